"""A misbehaving MCP server over stdio, at the protocol edge (raw JSON-RPC, no SDK, so it can break
the protocol at will). Arguments: ``--tools N`` lists N extra tools ``t0``..``tN-1`` (in pages of
100); ``--record FILE`` appends every message it receives, one JSON a line; ``--destructive NAME``
lists one more tool, ``NAME``, marked destructive (it answers "NAME ran"; repeatable);
``--leak-at-start VAR`` writes the value of its environment's ``VAR`` to stderr and exits at once;
``--leaky`` lists ``leak`` and ``refuse``; ``--chatty`` lists ``chatty`` (``steps`` progress
notifications, 20,000 by default, as fast as it can, then its result) and ``large`` (a result of
``bytes`` bytes, 20,000,000 by default, in one line).

Its tools: ``ok`` (answers "fine"), ``hang`` (stops reading and answering, pings included),
``crash`` (exits mid-call), ``garbage`` (writes a line that is not JSON-RPC), ``huge`` (10 MB of
text), ``slow`` (answers only when cancelled... never: waits for notifications/cancelled and records
it), ``sample`` (asks the client for sampling and returns the error it got), ``wipe`` (marked
destructive), ``change`` (adds a tool and sends notifications/tools/list_changed), ``leak`` (fails
with a message holding its environment's ``TOKEN``), ``refuse`` (a JSON-RPC error holding it).
"""

from __future__ import annotations

import json
import os
import sys
import time

ARGS = sys.argv[1:]
EXTRA = int(ARGS[ARGS.index("--tools") + 1]) if "--tools" in ARGS else 0
RECORD = ARGS[ARGS.index("--record") + 1] if "--record" in ARGS else ""
DESTRUCTIVE = [ARGS[i + 1] for i, arg in enumerate(ARGS) if arg == "--destructive"]
LEAK_AT_START = ARGS[ARGS.index("--leak-at-start") + 1] if "--leak-at-start" in ARGS else ""
RO = {"readOnlyHint": True}
CHATTY = [
    {
        "name": "chatty",
        "description": "Many progress notifications.",
        "inputSchema": {"type": "object"},
        "annotations": RO,
    },
    {"name": "large", "description": "A large result.", "inputSchema": {"type": "object"}, "annotations": RO},
]
LEAKY = [
    {"name": "leak", "description": "Fails, telling its token.", "inputSchema": {"type": "object"}, "annotations": RO},
    {
        "name": "refuse",
        "description": "Refuses, telling its token.",
        "inputSchema": {"type": "object"},
        "annotations": RO,
    },
]
TOOLS = [
    {"name": "ok", "description": "Answers fine.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "hang", "description": "Never answers.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "crash", "description": "Exits mid-call.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "garbage", "description": "Writes garbage.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "huge", "description": "10 MB of text.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "slow", "description": "Waits to be cancelled.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "sample", "description": "Asks for sampling.", "inputSchema": {"type": "object"}, "annotations": RO},
    {"name": "change", "description": "Adds a tool.", "inputSchema": {"type": "object"}, "annotations": RO},
    {
        "name": "wipe",
        "description": "Deletes everything.",
        "inputSchema": {"type": "object", "properties": {"target": {"type": "string"}}},
        "annotations": {"readOnlyHint": False, "destructiveHint": True},
    },
    *(
        {"name": f"t{i}", "description": f"Extra tool {i}.", "inputSchema": {"type": "object"}, "annotations": RO}
        for i in range(EXTRA)
    ),
    *(LEAKY if "--leaky" in ARGS else []),
    *(CHATTY if "--chatty" in ARGS else []),
    *(
        {
            "name": name,
            "description": f"Destroys {name}.",
            "inputSchema": {"type": "object"},
            "annotations": {"readOnlyHint": False, "destructiveHint": True},
        }
        for name in DESTRUCTIVE
    ),
]


def send(message: dict) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def receive() -> dict | None:
    line = sys.stdin.readline()
    if not line:
        return None
    message = json.loads(line)
    if RECORD:
        with open(RECORD, "a") as record:
            record.write(json.dumps(message) + "\n")
    return message


def result(request_id: object, value: dict) -> None:
    send({"jsonrpc": "2.0", "id": request_id, "result": value})


def text(request_id: object, body: str) -> None:
    result(request_id, {"content": [{"type": "text", "text": body}], "isError": False})


def call(request_id: object, name: str, params: dict) -> None:
    if name == "ok":
        text(request_id, f"fine from pid {os.getpid()}")
    elif name == "hang":
        time.sleep(3600)
    elif name == "crash":
        os._exit(3)
    elif name == "garbage":
        sys.stdout.write("this is not JSON-RPC {{{\n")
        sys.stdout.flush()
    elif name == "huge":
        text(request_id, "".join(f"line {i} " + "x" * 90 + "\n" for i in range(100_000)))
    elif name == "slow":
        while (message := receive()) is not None:
            if message.get("method") == "notifications/cancelled":
                return
    elif name == "sample":
        send(
            {
                "jsonrpc": "2.0",
                "id": "s1",
                "method": "sampling/createMessage",
                "params": {"messages": [{"role": "user", "content": {"type": "text", "text": "hi"}}], "maxTokens": 10},
            }
        )
        while (message := receive()) is not None:
            if message.get("id") == "s1":
                text(request_id, f"sampling answered: {json.dumps(message.get('error') or message.get('result'))}")
                return
    elif name == "change":
        TOOLS.append(
            {"name": "added", "description": "Added later.", "inputSchema": {"type": "object"}, "annotations": RO}
        )
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        text(request_id, "added a tool")
    elif name == "wipe":
        text(request_id, "wiped")
    elif name == "chatty":
        token = (params.get("_meta") or {}).get("progressToken")
        steps = int((params.get("arguments") or {}).get("steps", 20_000))
        for step in range(1, steps + 1):
            notify = {"progressToken": token, "progress": step, "total": steps, "message": f"step {step}"}
            sys.stdout.write(
                json.dumps({"jsonrpc": "2.0", "method": "notifications/progress", "params": notify}) + "\n"
            )
        text(request_id, f"chatted {steps} times")
    elif name == "large":
        size = int((params.get("arguments") or {}).get("bytes", 20_000_000))
        text(request_id, "".join(f"line {i} " + "y" * 90 + "\n" for i in range(size // 100)))
    elif name == "leak":
        token = os.environ.get("TOKEN", "")
        result(request_id, {"content": [{"type": "text", "text": f"login refused for token {token}"}], "isError": True})
    elif name == "refuse":
        message = f"bad token {os.environ.get('TOKEN', '')}"
        send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": message}})
    else:
        text(request_id, f"{name} ran")


def main() -> None:
    if LEAK_AT_START:
        sys.stderr.write(f"login failed: {LEAK_AT_START}={os.environ.get(LEAK_AT_START, '')}\n")
        sys.exit(1)
    while (message := receive()) is not None:
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result(
                request_id,
                {
                    "protocolVersion": message["params"]["protocolVersion"],
                    "capabilities": {"tools": {"listChanged": True}},
                    "serverInfo": {"name": "misbehaving-fake", "version": "0"},
                },
            )
        elif method == "ping":
            result(request_id, {})
        elif method == "tools/list":
            start = int((message.get("params") or {}).get("cursor") or 0)
            page = {"tools": TOOLS[start : start + 100]}
            if start + 100 < len(TOOLS):
                page["nextCursor"] = str(start + 100)
            result(request_id, page)
        elif method == "tools/call":
            call(request_id, message["params"]["name"], message["params"])
        elif request_id is not None:
            send({"jsonrpc": "2.0", "id": request_id, "error": {"code": -32601, "message": "no such method"}})


if __name__ == "__main__":
    main()
