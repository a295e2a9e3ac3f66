"""todo_write: the model's plan for the run, as a checklist it replaces whole each time."""

from __future__ import annotations

from typing import Any

from orchestrator.tools.base import TodoItem, Tool, ToolContext, ToolError, ToolOutput
from orchestrator.tools.targets import NoTargets

STATUSES = ("pending", "in_progress", "completed")
MAX_TODOS = 100
MAX_CONTENT_CHARS = 1_000
_KEYS = {"id", "content", "status"}
_MARKS = {"pending": "[ ]", "in_progress": "[~]", "completed": "[x]"}


def parse_todos(value: object) -> list[TodoItem]:
    """Checks the whole list strictly; items without an id are numbered by position."""
    if not isinstance(value, list):
        raise ToolError("argument 'todos' must be a list of {id?, content, status} objects")
    if len(value) > MAX_TODOS:
        raise ToolError(f"at most {MAX_TODOS} todos; merge or drop some")
    todos: list[TodoItem] = []
    for index, item in enumerate(value, 1):
        where = f"todos[{index - 1}]"
        if not isinstance(item, dict):
            raise ToolError(f"{where} must be an object with content and status")
        unknown = sorted(set(item) - _KEYS)
        if unknown:
            raise ToolError(f"{where} has unknown fields {unknown}; allowed: id, content, status")
        content = item.get("content")
        if not isinstance(content, str) or not content.strip():
            raise ToolError(f"{where}.content must be a non-empty string")
        if len(content) > MAX_CONTENT_CHARS:
            raise ToolError(f"{where}.content is longer than {MAX_CONTENT_CHARS} characters")
        status = item.get("status")
        if status not in STATUSES:
            raise ToolError(f"{where}.status is {status!r}; it must be one of {', '.join(STATUSES)}")
        todo_id = item.get("id", str(index))
        if isinstance(todo_id, bool) or not isinstance(todo_id, str | int) or str(todo_id).strip() == "":
            raise ToolError(f"{where}.id must be a non-empty string")
        todos.append({"id": str(todo_id), "content": content.strip(), "status": str(status)})
    ids = [todo["id"] for todo in todos]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ToolError(f"todo ids must be unique; repeated: {', '.join(duplicates)}")
    return todos


def render_todos(todos: list[TodoItem]) -> str:
    if not todos:
        return "the todo list is now empty"
    done = sum(todo["status"] == "completed" for todo in todos)
    lines = [f"{_MARKS[todo['status']]} {todo['id']}. {todo['content']}" for todo in todos]
    return f"todo list updated ({done}/{len(todos)} completed):\n" + "\n".join(lines)


async def todo_write_tool(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    todos = parse_todos(arguments.get("todos"))
    context.todos = todos
    if context.on_todos is not None:
        context.on_todos([dict(todo) for todo in todos])
    return ToolOutput(render_todos(todos))


TODO_WRITE = Tool(
    name="todo_write",
    description=(
        "Replace the run's todo list (shown to the user) with the given items. Use it to plan multi-step "
        "work and to mark progress: keep one item in_progress at a time and mark items completed as soon "
        "as they are done. Send the whole list every time."
    ),
    input_schema={
        "type": "object",
        "properties": {
            "todos": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "id": {"type": "string"},
                        "content": {"type": "string", "description": "What is to be done."},
                        "status": {"type": "string", "enum": list(STATUSES)},
                    },
                    "required": ["content", "status"],
                    "additionalProperties": False,
                },
            }
        },
        "required": ["todos"],
    },
    func=todo_write_tool,
    # The list is the run's own plan: a yes-always covers every later update of it.
    targets=NoTargets(remember_tool=True),
    read_only=False,
)
