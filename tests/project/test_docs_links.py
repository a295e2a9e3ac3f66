"""Every internal link of the documentation (docs/*.md and README.md) leads somewhere: to a file that
exists and, when it names one, to a heading that file has."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest
from markdown.extensions.toc import slugify

ROOT = Path(__file__).resolve().parents[2]
PAGES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]

_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.MULTILINE | re.DOTALL)
_CODE_SPAN = re.compile(r"`[^`]*`")
_LINK = re.compile(r"\[(?:[^\]\n]|\n(?!\n))*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$", re.MULTILINE)


def _prose(text: str) -> str:
    """The page without its code: no link or heading is read from a code block or a code span."""
    return _CODE_SPAN.sub("", _FENCE.sub("", text))


def _heading_text(heading: str) -> str:
    """A heading as it is rendered: links as their text, no code or emphasis marks."""
    heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    return heading.replace("`", "").replace("**", "").replace("*", "")


def _github_slug(text: str) -> str:
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """The ids of the page's headings: as MkDocs makes them for docs/, as GitHub does for the README
    (both number a repeated one)."""
    on_github = page.parent == ROOT
    seen: Counter[str] = Counter()
    ids: set[str] = set()
    for match in _HEADING.finditer(_FENCE.sub("", page.read_text())):
        text = _heading_text(match.group(2))
        base = _github_slug(text) if on_github else slugify(text, "-")
        repeat = seen[base]
        ids.add(base if not repeat else f"{base}-{repeat}" if on_github else f"{base}_{repeat}")
        seen[base] += 1
    return ids


def broken_links(page: Path) -> list[str]:
    """The page's internal links that lead nowhere, each as written."""
    broken = []
    for match in _LINK.finditer(_prose(page.read_text())):
        target = match.group(1)
        if re.match(r"[a-z][a-z0-9+.-]*:", target, re.IGNORECASE):
            continue  # another site (https:, mailto:): not ours to check
        path, _, anchor = target.partition("#")
        file = (page.parent / path).resolve() if path else page
        if not file.exists():
            broken.append(f"{target}: no such file")
        elif anchor and (file.suffix != ".md" or anchor not in anchors(file)):
            broken.append(f"{target}: no such heading")
    return broken


def test_the_pages_have_links_to_check():
    links = [link for page in PAGES for link in _LINK.findall(_prose(page.read_text()))]
    assert len(links) > 50
    assert sum("#" in link for link in links) > 10


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_every_internal_link_resolves(page):
    assert broken_links(page) == []


def test_a_link_to_a_missing_heading_or_file_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n\n## Behind a proxy\n\n```sh\n# not a heading\n```\n")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n## `web_fetch` reaches\n\n"
        "[a](other.md#behind-a-proxy) [b](#web_fetch-reaches) [c](https://example.com/#x)\n"
        "[d](other.md#not-a-heading) [e](missing.md) [f](#nowhere) `[g](in-code.md)`\n"
    )
    assert broken_links(page) == [
        "other.md#not-a-heading: no such heading",
        "missing.md: no such file",
        "#nowhere: no such heading",
    ]
