"""`StreamingText`: the answer while it streams, token by token, as Markdown.

Only the last top-level block of a growing document can change. Tokens are collected as
they arrive and applied on a coalescing flush: at once after a pause, then at most 30 times a
second. Finished blocks are rendered once, as many as a time budget allows per flush, and
only the open block is rendered again.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise

from rich.style import Style
from textual import events
from textual.geometry import Size
from textual.selection import Selection
from textual.strip import Strip
from textual.timer import Timer
from textual.widget import Widget

from hotloop.core.markdown_blocks import block_starts
from hotloop.tui.render import RenderContext, markdown_block
from hotloop.tui.widgets.selectable import selected_text, with_selection

FLUSH_INTERVAL = 1 / 30
# Seconds of rendering finished blocks per flush; what is left waits for the next one. A budget,
# not a count of characters: a code block costs ~20 µs a character to render, prose ~1 µs.
FLUSH_BUDGET = 0.010
# Characters of pending text parsed in one budgeted flush (~0.2 µs each), more than a budget renders.
PARSE_LIMIT = 8_000
MIN_DELAY = 0.001  # a Textual timer can't be set for 0 s
# A flush that took long (a big open code block) pushes the next one back, so input stays responsive.
FLUSH_BACKOFF = 2.0


class StreamingText(Widget):
    DEFAULT_CSS = "StreamingText { height: auto; }"
    ALLOW_SELECT = True

    def __init__(
        self,
        context: Callable[[int], RenderContext],
        *,
        name: str | None = None,
        id: str | None = None,
        classes: str | None = None,
        disabled: bool = False,
    ) -> None:
        super().__init__(name=name, id=id, classes=classes, disabled=disabled)
        self._render_context = context
        self._timer: Timer | None = None
        self._next_flush = 0.0  # perf_counter time before which no flush starts
        self._rendered_context: RenderContext | None = None
        # Drawn screen lines by y, with the source strip they were drawn from: finished blocks
        # keep their strips from flush to flush, so only the open block is drawn again.
        self._drawn: dict[int, tuple[Strip, Strip]] = {}
        self._style: Style | None = None
        self.reset()

    def reset(self) -> None:
        """Forget the current answer (it has moved into the history)."""
        if self._timer is not None:
            self._timer.stop()
            self._timer = None
        self.source = ""
        self._pending: list[str] = []
        self._open_start = 0  # offset in `source` of the open block
        self._done: list[Strip] = []  # finished blocks, joined by blank lines
        self._open: list[Strip] = []
        self._lines: list[Strip] = []
        self._drawn.clear()
        self._height_changed()

    @property
    def lines(self) -> tuple[RenderContext | None, list[Strip]]:
        """The rendered answer and the context it was rendered with (None if not rendered)."""
        return self._rendered_context, self._lines

    @property
    def text(self) -> str:
        """Everything written so far, flushed or not."""
        return self.source + "".join(self._pending)

    def write(self, text: str) -> None:
        self._pending.append(text)
        if self._timer is None:
            # The first text after a pause shows at once, not a tick later: a stream's last token
            # has no event after it to hurry it on screen.
            self._timer = self.set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    def _tick(self) -> None:
        started = time.perf_counter()
        self.flush()
        took = time.perf_counter() - started
        self._next_flush = started + max(FLUSH_INTERVAL, FLUSH_BACKOFF * took)
        self._timer = None
        if self._pending:
            self._timer = self.set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    def flush(self, everything: bool = False) -> None:
        """Apply pending text: all of it with `everything`, else finished blocks up to FLUSH_BUDGET."""
        if not self._pending:
            return
        pending = "".join(self._pending)
        self._pending = []
        if self.size.width:
            self._render_new(pending, None if everything else FLUSH_BUDGET)
        else:  # not laid out yet: rendered on the first resize
            self.source += pending

    def _render_new(self, pending: str, budget: float | None) -> None:
        """Render the open block with `pending` added; past `budget` seconds, later blocks stay pending."""
        ctx = self._rendered_context = self._render_context(self.size.width)
        applied = len(self.source) - self._open_start  # the open block's text, already on screen
        if budget is not None and len(pending) > PARSE_LIMIT:
            # A backlog is parsed a piece at a time: parsing all of it each flush would eat the budget.
            self._pending = [pending[PARSE_LIMIT:]]
            pending = pending[:PARSE_LIMIT]
        tail = self.source[self._open_start :] + pending
        deadline = None if budget is None else time.perf_counter() + budget
        starts = block_starts(tail)
        for start, end in pairwise(starts):
            block = markdown_block(tail[start:end], ctx)
            if block and self._done:
                self._done.append(Strip.blank(0))
            self._done.extend(block)
            # Stop only past what was on screen already: the text shown never shrinks.
            if deadline is not None and end >= applied and time.perf_counter() > deadline:
                self._pending.insert(0, tail[end:])
                self._open, taken, opened = [], end, end
                break
        else:
            taken, opened = len(tail), starts[-1] if starts else 0
            self._open = markdown_block(tail[opened:], ctx)
        self.source = self.source[: self._open_start] + tail[:taken]
        self._open_start += opened
        self._set_lines()

    def _set_lines(self) -> None:
        gap = [Strip.blank(0)] if self._done and self._open else []
        old = self._lines
        lines = [*self._done, *gap, *self._open]
        # A line rendered again the same keeps its old strip, which `render_line` has drawn already:
        # most lines of a re-rendered open block are unchanged.
        for y in range(min(len(old), len(lines))):
            if lines[y] is not old[y] and lines[y] == old[y]:
                lines[y] = old[y]
        self._done, self._open = lines[: len(self._done)], lines[len(lines) - len(self._open) :]
        self._lines = lines
        if len(lines) != len(old):
            self._height_changed()
        else:
            self.refresh()

    def _height_changed(self) -> None:
        self.virtual_size = Size(self.size.width, len(self._lines))
        self.refresh(layout=True)

    def rerender(self) -> None:
        """Render everything again (width or theme changed)."""
        self._drawn.clear()
        self._open_start = 0
        self._done, self._open = [], []
        if self.size.width and self.source:
            self._render_new("", None)
        else:
            self._set_lines()

    def on_resize(self, event: events.Resize) -> None:
        # The widget's height changes with every new line; only a new width means new lines.
        if self._rendered_context is None or event.size.width != self._rendered_context.width:
            self.rerender()

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return len(self._lines)

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style = None
        self._drawn.clear()

    def render_line(self, y: int) -> Strip:
        width = self.size.width
        if self._style is None:
            self._style = self.rich_style  # ~40 µs to compute: once per style change, not per line
        style = self._style
        if y >= len(self._lines):
            return Strip.blank(width, style)
        source = self._lines[y]
        cached = self._drawn.get(y)
        if cached is not None and cached[0] is source and cached[1].cell_length == width:
            return cached[1]
        drawn = with_selection(self, source.apply_style(style), y).crop_extend(0, width, style).apply_offsets(0, y)
        self._drawn[y] = (source, drawn)
        return drawn

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        return selected_text((strip.text for strip in self._lines), selection)

    def selection_updated(self, selection: Selection | None) -> None:
        self._drawn.clear()
        self.refresh()
