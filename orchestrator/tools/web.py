"""web_search (the Brave Search API) and web_fetch (a page, as text).

Both reach outside the workspace, so they are in the network class (``Tool.network``): with no
permission rule matching, each call asks a person, and a rule can allow a domain with a glob
(agents/permissions.py matches it against the URL's host). Neither changes the workspace, so the
grounding gate lets them through.

web_fetch follows redirects itself, up to ``max_redirects``, and only while they stay on the host and
port the call named (an ``http`` to ``https`` upgrade, and a move to the scheme's own port, included):
a rule that allows one domain, or an approval of one URL, must not be escaped by a redirect, so a
redirect elsewhere ends the call and tells the model where it points, and a fetch of that URL is
judged on its own. For the first request and every redirect, the host is resolved once and every
address checked (``netguard.resolve_checked``), and the request goes to one of those addresses, not
to the name (see ``_send_to``).
The body is read up to ``max_bytes`` (the rest is dropped and the model told), the whole call is
bounded by ``timeout_seconds``, and HTML is returned as its text.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from orchestrator.tools.base import Tool, ToolContext, ToolError, ToolOutput, optional_int, require_str
from orchestrator.tools.netguard import HostRefused, WebConfig, resolve_checked
from orchestrator.tools.targets import TextTarget, UrlTarget

# httpx (whose package import brings its command line's rich and click) and BeautifulSoup are
# imported by the calls that use them: together they were 15 MiB of every process's RSS
# (python -X importtime, bench/stream.py), for tools most runs never call.
if TYPE_CHECKING:
    import httpx

USER_AGENT = "Threadline-agent/0.1 (+web_fetch)"
_DEFAULT_PORTS = {"http": 80, "https": 443}
_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_TEXT_TYPES = ("text/", "application/json", "application/xml", "application/xhtml+xml", "application/javascript")
_DROPPED_TAGS = ("script", "style", "noscript", "template", "svg", "iframe", "head")
_BLOCK_TAGS = (
    "p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "pre", "blockquote", "section",
    "article", "header", "footer", "nav", "main", "table", "ul", "ol", "dl", "dt", "dd", "hr", "form",
)  # fmt: skip
_MAX_SEARCH_RESULTS = 20


def _checked_url(url: str) -> httpx.URL:
    import httpx

    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ToolError(f"{url!r}: only http and https URLs can be fetched")
    if not parts.hostname:
        raise ToolError(f"{url!r}: the URL has no host")
    if parts.username or parts.password:
        raise ToolError(f"{url!r}: URLs with credentials are not fetched")
    try:
        return httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise ToolError(f"{url!r}: {exc}") from exc


def _port(url: httpx.URL) -> int:
    return url.port or _DEFAULT_PORTS[url.scheme]


def _same_site(first: httpx.URL, then: httpx.URL) -> bool:
    """A redirect web_fetch follows: same host, the same scheme or an upgrade to https, and the port
    the call named or the scheme's own (80 to 443 with the upgrade). Another port on the same host is
    another service (a database, an admin), which the call's approval or rule never saw."""
    same_scheme = then.scheme == first.scheme or then.scheme == "https"
    return then.host == first.host and same_scheme and _port(then) in (_port(first), _DEFAULT_PORTS[then.scheme])


def html_to_text(html: str) -> str:
    """The readable text of an HTML page: no scripts or styles, one line per block, blank runs folded."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    title = soup.title.get_text(" ", strip=True) if soup.title else ""
    for tag in soup(_DROPPED_TAGS):
        tag.decompose()
    for tag in soup(_BLOCK_TAGS):  # inline tags (<b>, <a>) stay inside their line
        tag.insert_before("\n")
        tag.insert_after("\n")
    lines = [" ".join(line.split()) for line in soup.get_text().splitlines()]
    text = "\n".join(line for line in lines if line)
    return f"# {title}\n\n{text}" if title else text


async def _web_fetch(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    config = context.web
    url = _checked_url(require_str(arguments, "url") or "")
    try:
        async with asyncio.timeout(config.timeout_seconds):
            return await _fetch(url, context)
    except TimeoutError:
        raise ToolError(f"{url}: no complete answer within {config.timeout_seconds:g} s") from None


async def _fetch(url: httpx.URL, context: ToolContext) -> ToolOutput:
    import httpx

    config = context.web
    async with _client(config) as client:
        try:
            async with _followed(client, url, config) as (answered, response):
                if response.status_code in _REDIRECTS and "location" in response.headers:
                    target = answered.join(response.headers["location"])
                    if target.scheme not in ("http", "https"):
                        return ToolOutput(f"{answered} redirects to {target}, which is not http(s); not followed", True)
                    return ToolOutput(
                        f"{answered} redirects ({response.status_code}) to another site: {target}\n"
                        "Fetch that URL if you want it; it is judged on its own.",
                        True,
                    )
                body, cut = await _read_capped(response, config.max_bytes)
                return _page_output(answered, response, body, cut, config.max_bytes)
        except httpx.HTTPError as exc:
            raise ToolError(f"{url}: {type(exc).__name__}: {exc or 'the request failed'}") from None


def _client(config: WebConfig) -> httpx.AsyncClient:
    import httpx

    return httpx.AsyncClient(
        follow_redirects=False,
        timeout=httpx.Timeout(config.timeout_seconds),
        trust_env=False,
        headers={"User-Agent": USER_AGENT},
    )


@contextlib.asynccontextmanager
async def _followed(
    client: httpx.AsyncClient, first: httpx.URL, config: WebConfig
) -> AsyncIterator[tuple[httpx.URL, httpx.Response]]:
    """GET ``first``, following its redirects while they stay on its site (up to ``max_redirects``),
    each hop's host resolved once and every address checked: the URL that answered and its
    response. A redirect elsewhere, or to a scheme that is not http(s), is the response yielded."""
    url = first
    for hop in range(config.max_redirects + 1):
        try:
            addresses = await resolve_checked(_ascii_host(url), _port(url), config)
        except HostRefused as exc:
            raise ToolError(str(exc)) from None
        async with _send_to(client, url, addresses) as response:
            if response.status_code in _REDIRECTS and "location" in response.headers:
                target = url.join(response.headers["location"])
                if target.scheme in ("http", "https") and _same_site(first, target):
                    if hop == config.max_redirects:
                        raise ToolError(f"{first}: more than {config.max_redirects} redirects")
                    url = target
                    continue
            yield url, response
            return
    raise AssertionError("unreachable")


class FileTooLarge(ToolError):
    """The file is larger than the caller takes."""


async def fetch_file(url: str, config: WebConfig, *, max_bytes: int) -> tuple[str, bytes]:
    """A file at ``url`` fetched under web_fetch's guard (http or https only, no credentials in the
    URL, every address of each hop public unless ``allowed_private_hosts`` names the host, redirects
    only on its site, all within ``timeout_seconds``): its media type (lower case, no parameters)
    and its bytes. Raises FileTooLarge past ``max_bytes`` (nothing more is read), ToolError saying
    why for anything else (a refused host, a redirect elsewhere, an error status, no answer)."""
    import httpx

    checked = _checked_url(url)
    try:
        async with (
            asyncio.timeout(config.timeout_seconds),
            _client(config) as client,
            _followed(client, checked, config) as (answered, response),
        ):
            if response.status_code != 200:
                raise ToolError(f"{answered} answered HTTP {response.status_code}")
            body, cut = await _read_capped(response, max_bytes)
            if cut:
                raise FileTooLarge(f"{answered} is larger than {max_bytes} bytes")
            media_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
            return media_type, body
    except TimeoutError:
        raise ToolError(f"{url}: no complete answer within {config.timeout_seconds:g} s") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"{url}: {type(exc).__name__}: {exc or 'the request failed'}") from None


def _ascii_host(url: httpx.URL) -> str:
    """The host as DNS and TLS know it (an internationalised name in its ``xn--`` form)."""
    return url.raw_host.decode("ascii")


@contextlib.asynccontextmanager
async def _send_to(client: httpx.AsyncClient, url: httpx.URL, addresses: list[str]) -> AsyncIterator[httpx.Response]:
    """GET ``url`` from the first of ``addresses`` (all checked) that takes the connection.

    The address is put in the request's URL, so nothing resolves the name again between the check
    and the connection; the Host header, and TLS's server name (SNI, and the name the certificate
    must be valid for: httpx's ``sni_hostname`` extension), stay those of ``url``. httpx has no public
    hook for where its connections go (its transport builds the connection pool and its network
    backend privately), and this is the use its documentation gives that extension: a pinned address."""
    import httpx

    failed: httpx.ConnectError | None = None
    for address in addresses:
        request = client.build_request(
            "GET",
            url.copy_with(host=address),
            headers={"Host": url.netloc.decode("ascii")},
            extensions={"sni_hostname": _ascii_host(url)},
        )
        try:
            response = await client.send(request, stream=True)
        except httpx.ConnectError as exc:  # nothing was sent: the next address may answer
            failed = exc
            continue
        try:
            yield response
        finally:
            await response.aclose()
        return
    assert failed is not None
    raise failed


async def _read_capped(response: httpx.Response, max_bytes: int) -> tuple[bytes, bool]:
    """At most ``max_bytes`` of the body, and whether more was dropped; never more in memory."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        if size + len(chunk) > max_bytes:
            chunks.append(chunk[: max_bytes - size])
            return b"".join(chunks), True
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks), False


def _page_output(url: httpx.URL, response: httpx.Response, body: bytes, cut: bool, max_bytes: int) -> ToolOutput:
    content_type = response.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type and not content_type.startswith(_TEXT_TYPES) and not content_type.endswith(("+json", "+xml")):
        return ToolOutput(f"{url}: HTTP {response.status_code}, {content_type} is not text; not returned", True)
    text = body.decode(response.encoding or "utf-8", errors="replace")
    if content_type in ("text/html", "application/xhtml+xml") or (not content_type and "<html" in text[:1000].lower()):
        text = html_to_text(text)
    header = f"URL: {url}\nStatus: {response.status_code}\nContent-Type: {content_type or 'unknown'}\n"
    if cut:
        header += f"Note: the page is larger than {max_bytes} bytes; only its first {max_bytes} bytes were read\n"
    if response.status_code >= 400:
        return ToolOutput(f"{header}\nHTTP {response.status_code} {response.reason_phrase}\n\n{text[:2000]}", True)
    return ToolOutput(f"{header}\n{text}")


async def _web_search(arguments: dict[str, Any], context: ToolContext) -> ToolOutput:
    import httpx

    config = context.web
    query = (require_str(arguments, "query") or "").strip()
    if not query:
        raise ToolError("argument 'query' must be a non-empty string")
    count = min(optional_int(arguments, "count", 5, minimum=1), _MAX_SEARCH_RESULTS)
    if not config.brave_api_key:
        raise ToolError("web search is not configured on this server (BRAVE_API_KEY is not set)")
    headers = {"Accept": "application/json", "X-Subscription-Token": config.brave_api_key, "User-Agent": USER_AGENT}
    try:
        async with (
            asyncio.timeout(config.timeout_seconds),
            httpx.AsyncClient(timeout=httpx.Timeout(config.timeout_seconds), trust_env=False) as client,
        ):
            response = await client.get(config.brave_search_url, params={"q": query, "count": count}, headers=headers)
    except TimeoutError:
        raise ToolError(f"the search did not answer within {config.timeout_seconds:g} s") from None
    except httpx.HTTPError as exc:
        raise ToolError(f"the search failed: {type(exc).__name__}") from None
    if response.status_code != 200:
        # The body of an error may echo the request; the key is in a header and never in the text.
        return ToolOutput(f"the search failed: HTTP {response.status_code} {response.reason_phrase}", True)
    try:
        results = response.json().get("web", {}).get("results", [])
    except (json.JSONDecodeError, AttributeError):
        return ToolOutput("the search answered with something that is not its JSON", True)
    lines = [f"Results for {query!r}:"]
    for number, item in enumerate(results[:count], 1):
        if not isinstance(item, dict):
            continue
        description = " ".join(html_to_text(str(item.get("description") or "")).split())
        lines.append(f"{number}. {item.get('title', '')}\n   {item.get('url', '')}\n   {description}")
    if len(lines) == 1:
        lines.append("(no results)")
    return ToolOutput("\n".join(lines))


WEB_FETCH = Tool(
    name="web_fetch",
    description=(
        "Fetch a web page (http or https) and return it as text. Redirects on the same site are followed; "
        "large pages are cut. Each call may need the user's approval."
    ),
    input_schema={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "The absolute http(s) URL."}},
        "required": ["url"],
    },
    func=_web_fetch,
    targets=UrlTarget(),
    network=True,
)

WEB_SEARCH = Tool(
    name="web_search",
    description="Search the web; returns titles, URLs and snippets. Each call may need the user's approval.",
    input_schema={
        "type": "object",
        "properties": {
            "query": {"type": "string"},
            "count": {"type": "integer", "minimum": 1, "maximum": _MAX_SEARCH_RESULTS, "description": "Default 5."},
        },
        "required": ["query"],
    },
    func=_web_search,
    targets=TextTarget("query"),
    network=True,
)

WEB_TOOLS = (WEB_SEARCH, WEB_FETCH)
