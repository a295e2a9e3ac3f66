"""An MCP server's questions mid-call (elicitation), on both revisions, answered from the run.

A question is never held open in this process while the person answers: that may take days, and
the answer may reach another process after a restart (issue #46). So a call that asks ends here
with ``Asked``; the run waits on it in the database; the answer makes the call again with every
answer so far (orchestrator/tools/inputs.py ``CallInputs``):

- **2026-07-28** (``server/discover``): the server answers ``input_required`` with its questions
  instead of asking; the call is retried with ``inputResponses`` and the echoed ``requestState``,
  exactly as the revision means it, on whichever process.
- **older revisions** (``initialize``): the server sends ``elicitation/create`` during the call (or,
  for a page to visit, fails it with -32042, and the call made again after the visit goes on).
  When it is a question already answered (same mode and schema, or URL; each answer given once), it is
  answered at once; else the call is cancelled (MCP's ``notifications/cancelled``), the question
  answered ``cancel`` so the server does not hang on it, and the run waits. When the answer comes,
  the call is made again and the server's repeated question gets the stored answer. A tool that did
  something before it asked does that again: the price of a question that can outlive the process.

Sampling and roots stay declined on both revisions (the SDK's default answers, and here a call whose
``input_required`` asks for them fails saying so).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import mcp.types as mcp_types
from mcp.client.session import ClientRequestContext
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from orchestrator.tools.inputs import FORM, MAX_ROUNDS, CallInputs

# How long a question that ended its call is held before it is answered ``cancel``: the call's
# cancellation reaches the server first, so the server drops the question rather than reading it.
RELEASE_SECONDS = 5.0
# What a question may bring into the run's checkpoint and the person's page.
MAX_MESSAGE_CHARS = 4000
MAX_SCHEMA_BYTES = 64 * 1024


@dataclass(slots=True, frozen=True)
class Asked:
    """A question a server asked during a call, which ended the call."""

    mode: str
    message: str
    schema: dict[str, Any] = field(default_factory=dict)
    url: str = ""
    key: str = ""  # the 2026-07-28 revision's key for it in ``inputRequests``
    state: str | None = None  # its ``requestState``


class Declined(Exception):
    """The server asked for something Threadline does not offer (sampling, roots)."""


def asked_of(params: mcp_types.ElicitRequestParams, *, key: str = "", state: str | None = None) -> Asked:
    """The question as the run keeps it. Raises Declined for one nobody should be shown: a URL that
    is not http(s) (a ``javascript:`` link in a page), a schema past MAX_SCHEMA_BYTES."""
    message = params.message if len(params.message) <= MAX_MESSAGE_CHARS else params.message[:MAX_MESSAGE_CHARS] + "…"
    if isinstance(params, mcp_types.ElicitRequestURLParams):
        parts = urlsplit(params.url)
        if parts.scheme not in ("https", "http") or not parts.hostname:
            raise Declined("it asked the person to open a URL that is not an http(s) page with a host")
        return Asked("url", message, url=params.url, key=key, state=state)
    schema = dict(params.requested_schema or {})
    if len(json.dumps(schema)) > MAX_SCHEMA_BYTES:
        raise Declined(f"it asked with a form schema of more than {MAX_SCHEMA_BYTES} bytes")
    return Asked(FORM, message, schema=schema, key=key, state=state)


def _same_question(answer: dict[str, Any], asked: Asked) -> bool:
    if answer.get("mode") != asked.mode:
        return False
    return answer.get("url") == asked.url if asked.mode == "url" else answer.get("schema") == asked.schema


def result_of(answer: dict[str, Any]) -> mcp_types.ElicitResult:
    return mcp_types.ElicitResult(action=answer["action"], content=answer.get("content"))


@dataclass(slots=True)
class _Call:
    """One call in flight on a server on an older revision: the answers it was made with, how many
    of them its questions were given, and the question that ended it."""

    answers: tuple[dict[str, Any], ...]
    asked: asyncio.Future[Asked]
    released: asyncio.Event = field(default_factory=asyncio.Event)
    used: set[int] = field(default_factory=set)  # which answers its questions were given


class Questions:
    """The elicitation/create requests of one server's session, matched to its calls in flight."""

    def __init__(self) -> None:
        self._calls: list[_Call] = []

    @contextlib.contextmanager
    def call(self, inputs: CallInputs | None) -> Iterator[_Call]:
        """A call in flight: its questions are answered from ``inputs`` or end it."""
        made = _Call(inputs.answers if inputs else (), asyncio.get_running_loop().create_future())
        self._calls.append(made)
        try:
            yield made
        finally:
            self._calls.remove(made)
            made.released.set()
            if not made.asked.done():
                made.asked.cancel()

    async def ask_during[T](self, once: Callable[[], Coroutine[Any, Any, T]], inputs: CallInputs | None) -> T | Asked:
        """The call's result, or the question that ended it (the call is then cancelled, and the SDK
        tells the server with notifications/cancelled). A -32042 naming only pages already visited
        in this call makes it again: the server had not seen the visit yet."""
        for _ in range(MAX_ROUNDS):
            with self.call(inputs) as made:
                task = asyncio.ensure_future(once())
                either: list[asyncio.Future[Any]] = [task, made.asked]
                try:
                    await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    if not task.done():
                        task.cancel()
                        await asyncio.gather(task, return_exceptions=True)
                if made.asked.done() and not made.asked.cancelled():
                    return made.asked.result()
                try:
                    return task.result()
                except MCPError as exc:
                    if exc.error.code != mcp_types.URL_ELICITATION_REQUIRED:
                        raise
                    asked = url_required(exc, made.answers)
                    if asked is not None:
                        return asked
        raise Declined(f"it kept asking for pages already visited, {MAX_ROUNDS} times in one call")

    async def on_elicit(
        self, context: ClientRequestContext, params: mcp_types.ElicitRequestParams
    ) -> mcp_types.ElicitResult | mcp_types.ErrorData:
        # stdio carries no link from a question to the call it belongs to: it is the earliest call
        # still in flight that has not asked (with one call at a time, as a run mostly makes, exact).
        call = next((c for c in self._calls if not c.asked.done()), None)
        if call is None:
            return mcp_types.ElicitResult(action="decline")  # asked outside any call: nobody to ask
        try:
            asked = asked_of(params)
        except Declined:
            return mcp_types.ElicitResult(action="decline")  # never shown to anyone; the server decides
        # The first answer not given yet to the same question (a page named by -32042 takes one too).
        for index, answer in enumerate(call.answers):
            if index not in call.used and _same_question(answer, asked):
                call.used.add(index)
                return result_of(answer)
        call.asked.set_result(asked)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(call.released.wait(), RELEASE_SECONDS)
        return mcp_types.ElicitResult(action="cancel")


def url_required(exc: MCPError, answers: tuple[dict[str, Any], ...]) -> Asked | None:
    """2025-11-25's other way to ask: the call fails with -32042 naming pages the person must visit
    first; the first not visited yet is asked (the call is made again once it is answered). None
    when every page was visited; ``exc`` itself when it names none."""
    try:
        pages = mcp_types.ElicitationRequiredErrorData.model_validate(exc.error.data).elicitations
    except ValidationError:
        raise exc from None
    visited = {a.get("url") for a in answers if a.get("mode") == "url"}
    return next((asked_of(page) for page in pages if page.url not in visited), None)


def responses_for(answers: tuple[dict[str, Any], ...], state: str | None) -> dict[str, Any]:
    """The answers given to the round whose ``requestState`` is ``state``, by their keys."""
    return {a["key"]: result_of(a) for a in answers if a.get("key") and a.get("state") == state}


def next_round(
    result: mcp_types.InputRequiredResult, answers: tuple[dict[str, Any], ...]
) -> Asked | dict[str, Any] | None:
    """What to do with an ``input_required``: the first question not answered yet (the run waits
    on it), or the responses to retry with (None when it carried only its state). Raises Declined
    for a request that is not an elicitation."""
    state = result.request_state
    given = responses_for(answers, state)
    responses: dict[str, Any] = {}
    for key, request in (result.input_requests or {}).items():
        if not isinstance(request, mcp_types.ElicitRequest):
            raise Declined(f"it asked for {request.method}, which Threadline does not offer (only elicitation)")
        if key not in given:
            return asked_of(request.params, key=key, state=state)
        responses[key] = given[key]
    return responses or None
