"""`WatchTopLine`: the watch screen's top line: where agents point, the traffic's counts and dollars, the upstream.

Narrowed, the line gives up its parts least wanted first: the upstream (the user gave it on the command line), then
the word "watching", then the count of requests without a price (`$0.0123 + 2 steps price unknown` becomes
`≥$0.0123`), then the address (F1 says it too). The counts and the dollars, or `price unknown`, stay: they fit at
80 columns; narrower still, the line is cropped at its end. The server panel docks over the line's end: the line
is fitted to what the panel leaves of it.
"""

from __future__ import annotations

from rich.cells import cell_len
from rich.text import Text
from textual.reactive import reactive
from textual.widgets import Static

from hotloop.agent.figures import counted
from hotloop.agent.pricing import CostTotals
from hotloop.agent.text import inert

SEPARATOR = "  │  "


def top_line(address: str, upstream: str, figures: tuple[str, str] | None, width: int) -> str:
    """The fullest form of the line that fits `width` cells (0: not laid out yet, the fullest).

    `figures`: the counts and dollars, whole and short (None: nothing counted yet).
    """
    whole, short = figures or ("", "")
    forms = (
        (f"watching {address}", whole, f"→ {upstream}"),
        (f"watching {address}", whole, ""),
        (address, whole, ""),
        (address, short, ""),
        ("", short, ""),
    )
    lines = [SEPARATOR.join(part for part in form if part) for form in forms]
    return next((line for line in lines if cell_len(line) <= width), lines[-1]) if width else lines[0]


class WatchTopLine(Static):
    DEFAULT_CSS = """
    WatchTopLine { dock: top; height: 1; background: $panel; padding: 0 1; }
    """

    # The width of a panel docked on the right (0: none): docks overlap, so the server panel hides the line's end.
    covered: reactive[int] = reactive(0)

    def __init__(self, address: str, upstream: str, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.address, self.upstream = inert(address), inert(upstream)
        self.figures: tuple[str, str] | None = None

    def count(self, conversations: int, requests: int, cost: CostTotals) -> None:
        """The whole traffic's counts and dollars, as they stand."""
        counts = f"{counted(conversations, 'conversation')} · {counted(requests, 'request')} · "
        self.figures = (counts + str(cost), counts + cost.short())
        self.refresh()

    def render(self) -> Text:
        width = self.content_size.width
        if self.covered:
            width = max(width - self.covered, 1)  # the padding that would be under the panel is the space before it
        return Text(top_line(self.address, self.upstream, self.figures, width), no_wrap=True)
