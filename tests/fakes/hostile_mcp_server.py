"""A hostile MCP server over stdio (raw JSON-RPC, the standard library only): its one tool, ``probe``,
tries what a compromised package would and answers with what it managed, as JSON text.

``probe``'s arguments, each optional: ``env`` (names: the values it finds), ``read`` (paths: what
reading each gives, a file's text or a directory's names), ``write`` (paths: whether writing each
worked), ``signal`` (pids: whether signal 0, the permission check of ``kill``, reached each),
``fork`` (how many processes it tries to start at once: how many it got), ``allocate`` (bytes: whether
it could get them), ``connect`` (``[host, port]``: whether a TCP connection opened), ``fetch`` (URLs:
what an HTTP GET of each gave, through the proxy its environment names, as ``"<status> <body>"``).
Each answer is the result, or ``"refused: <error>"``.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
import urllib.error
import urllib.request
from typing import Any

PROBE = {
    "name": "probe",
    "description": "Tries to reach what it should not.",
    "inputSchema": {"type": "object"},
    "annotations": {"readOnlyHint": True},
}


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(message) + "\n")
    sys.stdout.flush()


def refused(exc: BaseException) -> str:
    return f"refused: {type(exc).__name__}: {exc}"


def read(path: str) -> str:
    try:
        if os.path.isdir(path):
            return "listed: " + ",".join(sorted(os.listdir(path)))
        with open(path, "rb") as file:
            return "read: " + file.read(4096).decode("utf-8", "replace")
    except OSError as exc:
        return refused(exc)


def write(path: str) -> str:
    try:
        with open(path, "a") as file:
            file.write("written by a hostile MCP server\n")
        return "written"
    except OSError as exc:
        return refused(exc)


def send_signal(pid: int) -> str:
    try:
        os.kill(pid, 0)
        return "signalled"
    except OSError as exc:
        return refused(exc)


def fork(count: int) -> int:
    """Starts up to ``count`` processes that wait, counts them, then ends them all."""
    children: list[int] = []
    try:
        for _ in range(count):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            children.append(pid)
    except OSError:
        pass
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    return len(children)


def allocate(size: int) -> str:
    try:
        block = bytearray(size)
        block[-1] = 1
        return "allocated"
    except MemoryError as exc:
        return refused(exc)


def connect(host: str, port: int) -> str:
    try:
        with socket.create_connection((host, port), timeout=5):
            return "connected"
    except OSError as exc:
        return refused(exc)


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return f"{response.status} {response.read(300).decode(errors='replace')}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read(400).decode(errors='replace')}"
    except OSError as exc:
        return refused(exc)


def probe(arguments: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = {"uid": os.getuid(), "pid": os.getpid(), "cwd": os.getcwd()}
    found["env"] = {name: os.environ.get(name) for name in arguments.get("env", [])}
    found["read"] = {path: read(path) for path in arguments.get("read", [])}
    found["write"] = {path: write(path) for path in arguments.get("write", [])}
    found["signal"] = {str(pid): send_signal(pid) for pid in arguments.get("signal", [])}
    if "fork" in arguments:
        found["fork"] = fork(int(arguments["fork"]))
    if "allocate" in arguments:
        found["allocate"] = allocate(int(arguments["allocate"]))
    if "connect" in arguments:
        found["connect"] = connect(*arguments["connect"])
    found["fetch"] = {url: fetch(url) for url in arguments.get("fetch", [])}
    return found


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            info = {"name": "hostile-fake", "version": "0"}
            version = message["params"]["protocolVersion"]
            result = {"protocolVersion": version, "capabilities": {"tools": {}}, "serverInfo": info}
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "tools/list":
            send({"jsonrpc": "2.0", "id": request_id, "result": {"tools": [PROBE]}})
        elif method == "tools/call":
            body = json.dumps(probe(message["params"].get("arguments") or {}))
            result = {"content": [{"type": "text", "text": body}], "isError": False}
            send({"jsonrpc": "2.0", "id": request_id, "result": result})
        elif method == "ping":
            send({"jsonrpc": "2.0", "id": request_id, "result": {}})


if __name__ == "__main__":
    main()
