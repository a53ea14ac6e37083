"""`StreamingText`: the answer while it streams, token by token, as Markdown.

Only the last top-level block of a growing document can change. Tokens are collected as
they arrive and applied on a coalescing flush (30 Hz, a capped amount per tick): finished
blocks are rendered once, and only the open block is rendered again.
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
MAX_CHARS_PER_FLUSH = 4_000
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
            self._timer = self.set_timer(FLUSH_INTERVAL, self._tick)

    def _tick(self) -> None:
        started = time.perf_counter()
        self.flush()
        took = time.perf_counter() - started
        self._timer = self.set_timer(max(FLUSH_INTERVAL, FLUSH_BACKOFF * took), self._tick) if self._pending else None

    def flush(self, everything: bool = False) -> None:
        """Apply pending text: at most MAX_CHARS_PER_FLUSH per tick, unless `everything`."""
        if not self._pending:
            return
        pending = "".join(self._pending)
        take = len(pending) if everything else MAX_CHARS_PER_FLUSH
        self.source += pending[:take]
        self._pending = [pending[take:]] if pending[take:] else []
        if self.size.width:
            self._render_new()

    def _render_new(self) -> None:
        ctx = self._rendered_context = self._render_context(self.size.width)
        tail = self.source[self._open_start :]
        starts = block_starts(tail)
        for start, end in pairwise(starts):
            block = markdown_block(tail[start:end], ctx)
            if block and self._done:
                self._done.append(Strip.blank(0))
            self._done.extend(block)
        if starts:
            self._open_start += starts[-1]
        self._open = markdown_block(self.source[self._open_start :], ctx)
        self._set_lines()

    def _set_lines(self) -> None:
        gap = [Strip.blank(0)] if self._done and self._open else []
        old = len(self._lines)
        self._lines = [*self._done, *gap, *self._open]
        if len(self._lines) != old:
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
            self._render_new()
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
