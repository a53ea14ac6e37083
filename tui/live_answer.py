"""`LiveAnswer`: the answer while it streams, token by token, as Markdown lines.

Only the last top-level block of a growing document can change. Tokens are collected as
they arrive and applied on a coalescing flush: at once after a pause, then at most 30 times a
second. Finished blocks are rendered once, as many as a time budget allows per flush, and
only the open block is rendered again. The lines are blocks joined as `markdown_lines` joins
them, so the finished answer's item shows exactly what streamed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise

from textual.strip import Strip
from textual.timer import Timer

from hotloop.core.markdown_blocks import block_starts
from hotloop.tui.render import RenderContext, markdown_block

FLUSH_INTERVAL = 1 / 30
# Seconds of rendering finished blocks per flush; what is left waits for the next one. A budget,
# not a count of characters: a code block costs ~20 µs a character to render, prose ~1 µs.
FLUSH_BUDGET = 0.010
# Characters of pending text parsed in one budgeted flush (~0.2 µs each), more than a budget renders.
PARSE_LIMIT = 8_000
MIN_DELAY = 0.001  # a Textual timer can't be set for 0 s
# A flush that took long (a big open code block) pushes the next one back, so input stays responsive.
FLUSH_BACKOFF = 2.0


class LiveAnswer:
    """The streaming answer. It renders for `context()` (None while there is no width yet) and hands
    its lines to `show` whenever they change; `set_timer` schedules its flushes."""

    def __init__(
        self,
        context: Callable[[], RenderContext | None],
        show: Callable[[list[Strip]], None],
        set_timer: Callable[[float, Callable[[], None]], Timer],
    ) -> None:
        self._context = context
        self._show = show
        self._set_timer = set_timer
        self._timer: Timer | None = None
        self._next_flush = 0.0  # perf_counter time before which no flush starts
        self._rendered_context: RenderContext | None = None
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
            self._timer = self._set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    def _tick(self) -> None:
        started = time.perf_counter()
        self.flush()
        took = time.perf_counter() - started
        self._next_flush = started + max(FLUSH_INTERVAL, FLUSH_BACKOFF * took)
        self._timer = None
        if self._pending:
            self._timer = self._set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    def flush(self, everything: bool = False) -> None:
        """Apply pending text: all of it with `everything`, else finished blocks up to FLUSH_BUDGET."""
        if not self._pending:
            return
        pending = "".join(self._pending)
        self._pending = []
        context = self._context()
        if context is not None:
            self._render_new(context, pending, None if everything else FLUSH_BUDGET)
        else:  # no width yet: rendered by `rerender` once there is one
            self.source += pending

    def _render_new(self, ctx: RenderContext, pending: str, budget: float | None) -> None:
        """Render the open block with `pending` added; past `budget` seconds, later blocks stay pending."""
        self._rendered_context = ctx
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
        gap = [Strip.blank(0)] if self._done and self._open else []
        self._lines = [*self._done, *gap, *self._open]
        self._show(self._lines)

    def rerender(self) -> None:
        """Render everything again (width or theme changed)."""
        self._open_start = 0
        self._done, self._open, self._lines = [], [], []
        context = self._context()
        if context is not None and self.source:
            self._render_new(context, "", None)
        else:
            self._show(self._lines)
