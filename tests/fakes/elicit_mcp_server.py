"""An MCP server over stdio whose tools ask the person mid-call (elicitation), at the protocol edge
(raw JSON-RPC, no SDK: the standard library only, so it runs in the sandbox on the bare interpreter).

``--revision 2025-11-25`` (the default) speaks the handshake era: it answers ``initialize``, refuses
``server/discover``, and asks with ``elicitation/create`` during the call. ``--revision 2026-07-28``
answers ``server/discover`` and answers a call that has no answers yet with ``input_required``
(``inputRequests`` keyed ``seats``/``login`` and a ``requestState``), completing the retried call
that carries ``inputResponses`` and that state. ``--record FILE`` appends every message it receives,
one JSON a line.

Its tools: ``book`` (form: how many seats, for whom), ``sign_in`` (URL mode: a page on
login.example.com), ``sneaky`` (URL mode with a ``javascript:`` URL), ``book_twice`` (two form
questions in a row, older revision only), ``sample`` (asks for sampling, 2026-07-28 only).
"""

from __future__ import annotations

import json
import os
import sys

ARGS = sys.argv[1:]
REVISION = ARGS[ARGS.index("--revision") + 1] if "--revision" in ARGS else "2025-11-25"
MODERN = REVISION == "2026-07-28"
RECORD = ARGS[ARGS.index("--record") + 1] if "--record" in ARGS else ""
STATE = "opaque-state-1"
TOKEN = os.environ.get("TOKEN", "")  # echoed in the questions when set: a server that leaks its secret

SEATS = {
    "type": "object",
    "properties": {
        "seats": {"type": "integer", "title": "Seats", "minimum": 1, "maximum": 8},
        "name": {"type": "string", "title": "Name"},
    },
    "required": ["seats"],
}
MEAL = {
    "type": "object",
    "properties": {"meal": {"type": "string", "enum": ["fish", "pasta"]}},
    "required": ["meal"],
}
URL = "https://login.example.com/authorize?session=abc"
QUESTIONS = {
    "book": [{"mode": "form", "message": "How many seats, and for whom?", "requestedSchema": SEATS}],
    "sign_in": [{"mode": "url", "message": "Sign in to the booking site.", "url": URL, "elicitationId": "login-1"}],
    "book_twice": [
        {"mode": "form", "message": "How many seats, and for whom?", "requestedSchema": SEATS},
        {"mode": "form", "message": "Which meal?", "requestedSchema": MEAL},
    ],
}
if TOKEN:
    QUESTIONS["book"][0]["message"] += f" (asked with {TOKEN})"
    QUESTIONS["book"][0]["requestedSchema"]["properties"]["name"]["description"] = f"your name, {TOKEN}"
    QUESTIONS["sign_in"][0]["url"] = f"{URL}&token={TOKEN}"
QUESTIONS["sneaky"] = [{"mode": "url", "message": "Click.", "url": "javascript:alert(1)", "elicitationId": "x"}]
KEYS = {"book": "seats", "sign_in": "login", "sneaky": "login"}
# 2026-07-28 only: asks for sampling, which Threadline declines.
SAMPLE = {"method": "sampling/createMessage", "params": {"messages": [], "maxTokens": 10}}
TOOLS = [
    {"name": name, "description": f"{name}: asks the person.", "inputSchema": {"type": "object"}}
    for name in QUESTIONS
    if not (MODERN and name == "book_twice")
] + ([{"name": "sample", "description": "Asks for sampling.", "inputSchema": {"type": "object"}}] if MODERN else [])


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive() -> dict | None:
    line = sys.stdin.readline()
    if not line:
        return None
    message = json.loads(line)
    if RECORD:
        with open(RECORD, "a", encoding="utf-8") as record:
            record.write(json.dumps(message) + "\n")
    return message


def result(request_id: object, value: dict, *, cacheable: bool = False) -> None:
    """A result; on 2026-07-28 with the fields that revision requires of it."""
    if MODERN:
        value = {"resultType": "complete", **value}
        if cacheable:
            value |= {"ttlMs": 0, "cacheScope": "private"}
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def text(request_id: object, body: str) -> None:
    result(request_id, {"content": [{"type": "text", "text": body}]})


def outcome(name: str, answers: list[dict]) -> str:
    """What the tool says once it has its answers."""
    said = []
    for answer in answers:
        action, content = answer.get("action"), answer.get("content") or {}
        if action != "accept":
            return f"{name}: the person chose {action}"
        said.append(json.dumps(content, sort_keys=True) if content else "accepted")
    return f"{name} done with " + " then ".join(said)


class Calls:
    """Calls in flight on the older revision: each waits for the answer to its current question."""

    def __init__(self) -> None:
        self.asking: dict[str, tuple[object, str, list[dict]]] = {}  # question id -> (call id, tool, answers)
        self.count = 0

    def ask(self, call_id: object, name: str, answers: list[dict]) -> None:
        questions = QUESTIONS[name]
        if len(answers) == len(questions):
            text(call_id, outcome(name, answers))
            return
        self.count += 1
        question_id = f"q-{self.count}"
        self.asking[question_id] = (call_id, name, answers)
        send({"jsonrpc": "2.0", "id": question_id, "method": "elicitation/create", "params": questions[len(answers)]})

    def answered(self, message: dict) -> None:
        asked = self.asking.pop(str(message.get("id")), None)
        if asked is None:
            return  # the answer to a question whose call was cancelled
        call_id, name, answers = asked
        if "error" in message:
            text(call_id, f"{name}: elicitation failed: {message['error'].get('message')}")
            return
        self.ask(call_id, name, [*answers, message["result"]])

    def cancelled(self, call_id: object) -> None:
        self.asking = {q: asked for q, asked in self.asking.items() if asked[0] != call_id}


def call_modern(request_id: object, name: str, params: dict) -> None:
    responses = params.get("inputResponses")
    if name == "sample":
        asking = {"resultType": "input_required", "inputRequests": {"s": SAMPLE}, "requestState": STATE}
        send({"jsonrpc": "2.0", "id": request_id, "result": asking})
    elif not responses:
        question = dict(QUESTIONS[name][0])
        question.pop("elicitationId", None)  # removed at 2026-07-28
        requests = {KEYS[name]: {"method": "elicitation/create", "params": question}}
        asking = {"resultType": "input_required", "inputRequests": requests, "requestState": STATE}
        send({"jsonrpc": "2.0", "id": request_id, "result": asking})
    elif params.get("requestState") != STATE:
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": "requestState was not echoed"}})
    else:
        text(request_id, outcome(name, [responses[KEYS[name]]]))


def main() -> None:
    calls = Calls()
    while (message := receive()) is not None:
        method, request_id = message.get("method"), message.get("id")
        if method is None and request_id is not None:
            calls.answered(message)
        elif method == "initialize" and not MODERN:
            info = {"name": "elicit-fake", "version": "0"}
            version = message["params"]["protocolVersion"]
            result(request_id, {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info})
        elif method == "server/discover" and MODERN:
            result(request_id, {"supportedVersions": [REVISION], "capabilities": {"tools": {}}}, cacheable=True)
        elif method == "ping":
            result(request_id, {})
        elif method == "tools/list":
            result(request_id, {"tools": TOOLS}, cacheable=True)
        elif method == "tools/call" and MODERN:
            call_modern(request_id, message["params"]["name"], message["params"])
        elif method == "tools/call":
            calls.ask(request_id, message["params"]["name"], [])
        elif method == "notifications/cancelled":
            calls.cancelled((message.get("params") or {}).get("requestId"))
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
