"""Streaming Markdown into a terminal with rich.

Only the last top-level block of a growing Markdown document can still change. Finished
blocks are printed once; the open block is redrawn in a transient `Live` region that shows
its latest lines, so a long code block never overflows the screen while it streams.

Every write to the terminal happens on the caller's thread: rich's auto-refresh thread,
racing block prints from the event loop, leaves stray copies of lines behind. Redraws are
throttled instead, with one scheduled on the event loop to catch a pause in the stream.
"""

from __future__ import annotations

import asyncio
import time

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment, Segments

from hotloop.core.markdown_blocks import block_starts


class _Tail:
    """A renderable showing only the last lines of another, to fit the screen.

    It ends with an empty line, so the cursor waits at column 0. Rich pads lines to the full
    width, and a `^C` echoed at the end of one wraps, which throws off the region's erase.
    """

    def __init__(self, renderable: Markdown) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        room = max(console.height - 3, 3)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()
        yield Segment.line()


def _is_blank(line: list[Segment]) -> bool:
    return not "".join(segment.text for segment in line).strip()


class MarkdownStream:
    REDRAW_INTERVAL = 1 / 15

    def __init__(self, console: Console) -> None:
        self.console = console
        self._source = ""
        self._printed = 0  # offset of the first block not printed yet
        self._live: Live | None = None
        self._last_redraw = 0.0
        self._scheduled: asyncio.TimerHandle | None = None

    def write(self, text: str) -> None:
        self._source += text
        starts = block_starts(self._source[self._printed :])
        if len(starts) > 1:
            self._print(self._source[self._printed : self._printed + starts[-1]])
            self._printed += starts[-1]
        self._show(self._source[self._printed :])

    def close(self) -> None:
        """Print what is left and end the live region."""
        if self._scheduled is not None:
            self._scheduled.cancel()
            self._scheduled = None
        if self._live is not None:
            self._live.stop()
            self._live = None
        rest = self._source[self._printed :]
        if rest.strip():
            self._print(rest)
        self._source, self._printed = "", 0

    def _print(self, blocks: str) -> None:
        """Print finished blocks with their edge blank lines trimmed and one blank line after."""
        lines = self.console.render_lines(Markdown(blocks), pad=False)
        while lines and _is_blank(lines[-1]):
            lines.pop()
        while lines and _is_blank(lines[0]):
            lines.pop(0)
        if lines:
            self.console.print(Segments([segment for line in lines for segment in (*line, Segment.line())]), end="")
            self.console.print()

    def _show(self, open_block: str) -> None:
        if self._live is None:
            self._live = Live(console=self.console, transient=True, auto_refresh=False)
            self._live.start()
        wait = self._last_redraw + self.REDRAW_INTERVAL - time.monotonic()
        if wait <= 0:
            self._redraw()
        elif self._scheduled is None:
            try:
                self._scheduled = asyncio.get_running_loop().call_later(wait, self._redraw)
            except RuntimeError:  # no event loop: draw now
                self._redraw()

    def _redraw(self) -> None:
        self._scheduled = None
        if self._live is not None:
            self._live.update(_Tail(Markdown(self._source[self._printed :])), refresh=True)
            self._last_redraw = time.monotonic()
