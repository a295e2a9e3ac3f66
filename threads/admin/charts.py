"""Charts drawn on the server as inline SVG: no script, no library, nothing fetched, so the
dashboard reads the same offline, in any browser, and in a test that reads its text.

Every label and figure goes through ``escape`` (an agent's or a user's name, a tool's name from an
MCP server, is anybody's text)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

WIDTH = 680
LABEL_WIDTH = 190
FIGURE_WIDTH = 150
ROW = 24
BAR = 16
COLOUR = "#417690"  # the admin's own blue
ALERT = "#ba2121"  # the admin's error red
INK = "#333"


@dataclass(slots=True, frozen=True)
class Bar:
    label: str
    value: float
    figure: str  # the value as the chart writes it
    # A part of the bar drawn in red (a tool's failures among its calls), in the value's unit.
    alert: float = 0.0


def _svg(name: str, title: str, height: int, body: str) -> SafeString:
    # Every text in ``body`` and ``title`` was escaped where it was written.
    return mark_safe(
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" data-chart="{escape(name)}" role="img" '
        f'viewBox="0 0 {WIDTH} {height}" width="{WIDTH}" height="{height}" '
        f'font-family="sans-serif" font-size="12" fill="{INK}">'
        f"<title>{escape(title)}</title>{body}</svg>"
    )


def _nothing(name: str, title: str) -> SafeString:
    return _svg(name, title, ROW * 2, f'<text x="0" y="{ROW}">Nothing in this period.</text>')


def bar_chart(name: str, title: str, bars: Sequence[Bar]) -> SafeString:
    """Horizontal bars, one a row, longest to scale: what each label holds, read at a glance."""
    if not bars:
        return _nothing(name, title)
    top = max(bar.value for bar in bars) or 1.0
    room = WIDTH - LABEL_WIDTH - FIGURE_WIDTH
    rows = []
    for n, bar in enumerate(bars):
        y = n * ROW + 4
        width = max(1.0, room * bar.value / top) if bar.value else 0.0
        alert = room * bar.alert / top if bar.alert else 0.0
        rows.append(
            f'<g class="bar" data-label="{escape(bar.label)}" data-figure="{escape(bar.figure)}">'
            f"<title>{escape(bar.label)}: {escape(bar.figure)}</title>"
            f'<text x="{LABEL_WIDTH - 8}" y="{y + BAR - 4}" text-anchor="end">{escape(_short(bar.label))}</text>'
            f'<rect x="{LABEL_WIDTH}" y="{y}" width="{width:.1f}" height="{BAR}" fill="{COLOUR}"/>'
            + (
                f'<rect x="{LABEL_WIDTH + width - alert:.1f}" y="{y}" width="{alert:.1f}" height="{BAR}" '
                f'fill="{ALERT}"/>'
                if alert
                else ""
            )
            + f'<text x="{LABEL_WIDTH + width + 6:.1f}" y="{y + BAR - 4}">{escape(bar.figure)}</text></g>'
        )
    return _svg(name, title, len(bars) * ROW + 8, "".join(rows))


def column_chart(name: str, title: str, bars: Sequence[Bar]) -> SafeString:
    """Vertical columns in order (days), each labelled below, its figure in its tooltip and above it
    when there is room for it."""
    if not bars:
        return _nothing(name, title)
    height, base, top_room = 220, 190, 20
    top = max(bar.value for bar in bars) or 1.0
    margin = 16  # room for the first and last labels, centred under their columns
    step = (WIDTH - 2 * margin) / len(bars)
    width = max(2.0, step * 0.7)
    every = max(1, round(len(bars) / 10))  # at most about ten labels under the columns
    columns = []
    for n, bar in enumerate(bars):
        x = margin + n * step + (step - width) / 2
        tall = (base - top_room) * bar.value / top
        figure = (
            f'<text x="{x + width / 2:.1f}" y="{base - tall - 4:.1f}" text-anchor="middle" font-size="10">'
            f"{escape(bar.figure)}</text>"
            if len(bars) <= 10 or bar.value == top
            else ""
        )
        label = (
            f'<text x="{x + width / 2:.1f}" y="{base + 16}" text-anchor="middle" font-size="10">'
            f"{escape(bar.label)}</text>"
            if n % every == 0 or n == len(bars) - 1
            else ""
        )
        columns.append(
            f'<g class="bar" data-label="{escape(bar.label)}" data-figure="{escape(bar.figure)}">'
            f"<title>{escape(bar.label)}: {escape(bar.figure)}</title>"
            f'<rect x="{x:.1f}" y="{base - tall:.1f}" width="{width:.1f}" height="{tall:.1f}" fill="{COLOUR}"/>'
            f"{figure}{label}</g>"
        )
    axis = f'<line x1="0" y1="{base}" x2="{WIDTH}" y2="{base}" stroke="{INK}" stroke-width="1"/>'
    return _svg(name, title, height, axis + "".join(columns))


def _short(label: str, most: int = 28) -> str:
    return label if len(label) <= most else label[: most - 1] + "…"
