"""Streaming Markdown into a terminal with rich.

Only the last top-level block of a growing Markdown document can still change. Finished
blocks are printed once; the open block is redrawn in a transient `Live` region that shows
its latest lines, so a long code block never overflows the screen while it streams.
"""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

from rich.console import Console, ConsoleOptions, RenderResult
from rich.live import Live
from rich.markdown import Markdown
from rich.segment import Segment, Segments

if TYPE_CHECKING:
    from markdown_it import MarkdownIt


@lru_cache(maxsize=1)
def _parser() -> MarkdownIt:
    from markdown_it import MarkdownIt

    # The parser rich's Markdown uses, so block boundaries agree with what it renders.
    return MarkdownIt().enable("strikethrough").enable("table")


def block_starts(source: str) -> list[int]:
    """Character offsets where each top-level Markdown block of `source` starts."""
    line_offsets = [0]
    for line in source.splitlines(keepends=True):
        line_offsets.append(line_offsets[-1] + len(line))
    starts = []
    for token in _parser().parse(source):
        if token.level == 0 and token.map is not None and token.nesting in (0, 1):
            starts.append(line_offsets[token.map[0]])
    return starts


class _Tail:
    """A renderable showing only the last lines of another, to fit the screen."""

    def __init__(self, renderable: Markdown) -> None:
        self.renderable = renderable

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        lines = console.render_lines(self.renderable, options, pad=False)
        room = max(console.height - 2, 3)
        for line in lines[-room:]:
            yield from line
            yield Segment.line()


def _is_blank(line: list[Segment]) -> bool:
    return not "".join(segment.text for segment in line).strip()


class MarkdownStream:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._source = ""
        self._printed = 0  # offset of the first block not printed yet
        self._live: Live | None = None

    def write(self, text: str) -> None:
        self._source += text
        starts = block_starts(self._source[self._printed :])
        if len(starts) > 1:
            self._print(self._source[self._printed : self._printed + starts[-1]])
            self._printed += starts[-1]
        self._show(self._source[self._printed :])

    def close(self) -> None:
        """Print what is left and end the live region."""
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
            self._live = Live(console=self.console, refresh_per_second=12, transient=True, auto_refresh=True)
            self._live.start()
        self._live.update(_Tail(Markdown(open_block)))
