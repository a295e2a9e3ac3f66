"""Drive a Threadline AG-UI endpoint through the official ``@ag-ui/client``.

The Node harness ``tests/clients/run.mjs`` runs the real ``HttpAgent`` of
``@ag-ui/client`` 1.0.0 or 0.0.59 (with the client's own event verifier, which
both versions always apply) against a live server, and reports what the client
saw. This module is the pytest-facing wrapper around it.

Install the Node side once with ``npm ci --prefix tests/clients`` (the Makefile
does this); :func:`ensure_installed` explains what is missing otherwise.

Example::

    results = run_client(
        "1",
        f"{live_server.url}/agui/coder",
        token,
        [{"threadId": "t1", "runId": "r1",
          "messages": [{"id": "u1", "role": "user", "content": "hi"}]}],
    )
    assert results[0]["error"] is None
    assert results[0]["events"][-1]["type"] == "RUN_FINISHED"

Each per-run result is a dict with the keys documented at the top of
``run.mjs``: ``events``, ``error``, ``errorName``, ``messages``, ``state``,
``result``, ``pendingInterrupts``, ``request``, ``received``, ``warnings``.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "CLIENTS_DIR",
    "SUPPORTED_VERSIONS",
    "ClientHarnessError",
    "ClientHarnessNotInstalled",
    "ensure_installed",
    "run_client",
]

CLIENTS_DIR: Path = Path(__file__).resolve().parent / "clients"
RUNNER: Path = CLIENTS_DIR / "run.mjs"
SUPPORTED_VERSIONS: frozenset[str] = frozenset({"1", "0"})
"""``"1"`` is ``@ag-ui/client`` 1.0.0, ``"0"`` is 0.0.59."""

_PACKAGES: tuple[str, ...] = ("agui-client-1", "agui-client-0")
_INSTALL_HINT = "run `npm ci --prefix tests/clients`"


class ClientHarnessError(RuntimeError):
    """The harness itself failed: node crashed, timed out, or printed no JSON.

    A run that the *client* rejected (verifier error, HTTP error, schema
    error) is not a harness failure; it is reported in that run's ``error``.
    """


class ClientHarnessNotInstalled(ClientHarnessError):
    """Node or the harness's npm dependencies are not available."""


def ensure_installed() -> None:
    """Check that node and ``tests/clients/node_modules`` are usable.

    Returns ``None`` when both client versions are installed.

    Raises:
        ClientHarnessNotInstalled: node is not on PATH, or the npm
            dependencies (both ``@ag-ui/client`` aliases) are missing.
    """
    if shutil.which("node") is None:
        raise ClientHarnessNotInstalled("`node` is not on PATH; the AG-UI client tests need Node.js >= 18.")
    missing = [name for name in _PACKAGES if not (CLIENTS_DIR / "node_modules" / name / "package.json").is_file()]
    if missing:
        raise ClientHarnessNotInstalled(f"{CLIENTS_DIR / 'node_modules'} lacks {', '.join(missing)}; {_INSTALL_HINT}.")


def run_client(
    version: str,
    url: str,
    token: str,
    runs: Sequence[Mapping[str, Any]],
    timeout: float = 60,
    *,
    headers: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """Run the official AG-UI client against ``url`` and return what it saw.

    Args:
        version: ``"1"`` for ``@ag-ui/client`` 1.0.0 (sends
            ``protocolVersion: "1.0"`` in the body by itself) or ``"0"`` for
            0.0.59 (sends no ``protocolVersion``).
        url: The agent endpoint, e.g. ``http://127.0.0.1:PORT/agui/coder``.
        token: Bearer token, sent as ``Authorization: Bearer <token>``. An
            empty string sends no Authorization header.
        runs: Run specs, executed in order on ONE ``HttpAgent`` so messages
            and state accumulate. Keys: ``threadId``, ``runId``, ``messages``
            (replace the agent's messages), ``append`` (add messages),
            ``tools``, ``context``, ``state`` (replace the agent's state),
            ``forwardedProps``, ``resume``. All optional.
        timeout: Seconds for the whole node process (all runs together).
        headers: Extra request headers; they override the Authorization
            header built from ``token`` if they name it too.

    Returns:
        One dict per run that was executed. Execution stops after the first
        run whose ``error`` is not ``None``, so the list can be shorter than
        ``runs``; callers that expect success should assert on ``error``.

    Raises:
        ValueError: ``version`` is not ``"1"`` or ``"0"``.
        ClientHarnessNotInstalled: see :func:`ensure_installed`.
        ClientHarnessError: node exited non-zero, timed out, or printed
            something other than the expected JSON; the message carries the
            harness's stderr.
    """
    if version not in SUPPORTED_VERSIONS:
        raise ValueError(f"version must be one of {sorted(SUPPORTED_VERSIONS)}, got {version!r}")
    ensure_installed()

    request_headers: dict[str, str] = {}
    if token:
        request_headers["Authorization"] = f"Bearer {token}"
    if headers:
        request_headers.update(headers)
    spec = {
        "version": version,
        "url": url,
        "headers": request_headers,
        "runs": [dict(run) for run in runs],
    }

    try:
        completed = subprocess.run(
            ["node", str(RUNNER)],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            encoding="utf-8",
            timeout=timeout,
            cwd=CLIENTS_DIR,
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        stderr = _text(exc.stderr)
        raise ClientHarnessError(
            f"AG-UI client harness (version {version}) timed out after {timeout}s "
            f"against {url}.\n--- stderr ---\n{stderr}"
        ) from exc

    if completed.returncode != 0:
        raise ClientHarnessError(
            f"AG-UI client harness (version {version}) exited with "
            f"{completed.returncode}.\n--- stderr ---\n{completed.stderr}"
        )
    try:
        payload = json.loads(completed.stdout)
        results = payload["runs"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        raise ClientHarnessError(
            "AG-UI client harness printed no usable JSON.\n"
            f"--- stdout ---\n{completed.stdout[:4000]}\n--- stderr ---\n{completed.stderr}"
        ) from exc
    if not isinstance(results, list):
        raise ClientHarnessError(f"AG-UI client harness returned non-list runs: {results!r}")
    return results


def _text(value: str | bytes | None) -> str:
    """Decode the partial output a TimeoutExpired carries."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return value
