"""`LiveAnswer`: the answer while it streams, token by token, as Markdown lines.

Only the last top-level block of a growing document can change. Tokens are collected as
they arrive and applied on a coalescing flush: at once after a pause, then at most 30 times a
second, or back to back with a breather while a flood is behind. New text is parsed once:
finished blocks queue up and are rendered once, as many as a time budget allows per flush,
and only the open block is rendered again. The lines are blocks joined as `markdown_lines` joins
them, so the finished answer's item shows exactly what streamed.
"""

from __future__ import annotations

import time
from collections import deque
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
# Characters of pending text parsed in one budgeted flush (~0.2 µs each).
PARSE_LIMIT = 8_000
MIN_DELAY = 0.001  # a Textual timer can't be set for 0 s
# A flush that took long (a big open code block) pushes the next one back, so input stays responsive.
FLUSH_BACKOFF = 2.0
# Behind a flood, the next flush comes this soon after one ends: time enough for input and a frame.
BACKLOG_BREATHER = 0.004


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
        self._pending: list[str] = []  # text not parsed yet
        self._forget_rendering()

    def _forget_rendering(self) -> None:
        self.source = ""  # the text on screen
        self._done_source = ""  # the text of the finished blocks on screen
        self._queue: deque[str] = deque()  # finished blocks, parsed but not rendered yet
        self._open_text = ""  # the last block, which more text can still change
        self._open_shown = False
        self._done: list[Strip] = []  # finished blocks, joined by blank lines
        self._open: list[Strip] = []
        self._lines: list[Strip] = []

    @property
    def lines(self) -> tuple[RenderContext | None, list[Strip]]:
        """The rendered answer and the context it was rendered with (None if not rendered)."""
        return self._rendered_context, self._lines

    @property
    def text(self) -> str:
        """Everything written so far, on screen or not."""
        return self._done_source + "".join(self._queue) + self._open_text + "".join(self._pending)

    def write(self, text: str) -> None:
        self._pending.append(text)
        if self._timer is None:
            # The first text after a pause shows at once, not a tick later: a stream's last token
            # has no event after it to hurry it on screen.
            self._timer = self._set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    @property
    def _behind(self) -> bool:
        return bool(self._pending or self._queue)

    def _tick(self) -> None:
        started = time.perf_counter()
        self.flush()
        took = time.perf_counter() - started
        if self._behind:  # a backlog: drain it, with a breather for input and frames between flushes
            self._next_flush = started + took + BACKLOG_BREATHER
        else:
            self._next_flush = started + max(FLUSH_INTERVAL, FLUSH_BACKOFF * took)
        self._timer = None
        if self._behind:
            self._timer = self._set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    def flush(self, everything: bool = False) -> None:
        """Show written text: all of it with `everything`, else finished blocks up to FLUSH_BUDGET."""
        if not self._behind:
            return
        context = self._context()
        if context is not None:  # else no width yet: rendered by `rerender` once there is one
            self._render(context, None if everything else FLUSH_BUDGET)

    def _parse(self, budgeted: bool) -> None:
        """Split pending text into blocks: the finished ones join the queue, the last stays open."""
        pending = "".join(self._pending)
        self._pending = []
        if budgeted and len(pending) > PARSE_LIMIT:
            # A flood is parsed a piece at a time, so that one flush doesn't parse all of it.
            self._pending = [pending[PARSE_LIMIT:]]
            pending = pending[:PARSE_LIMIT]
        tail = self._open_text + pending
        starts = block_starts(tail)[1:]  # what comes before the second block belongs to the first
        # The open block, if shown, is now the first of the queued ones, or longer: shown again either way.
        self._queue.extend(tail[a:b] for a, b in pairwise([0, *starts]))
        self._open_text = tail[starts[-1] :] if starts else tail
        self._open_shown = False

    def _render(self, ctx: RenderContext, budget: float | None) -> None:
        """Render the queued blocks, then the open one; past `budget` seconds, later blocks wait."""
        self._rendered_context = ctx
        deadline = None if budget is None else time.perf_counter() + budget
        on_screen = len(self.source) - len(self._done_source)  # of the text queued, what was shown
        if self._pending:
            self._parse(budget is not None)
        while self._queue and (deadline is None or on_screen > 0 or time.perf_counter() < deadline):
            block = self._queue.popleft()
            on_screen -= len(block)
            lines = markdown_block(block, ctx)
            if lines and self._done:
                self._done.append(Strip.blank(0))
            self._done.extend(lines)
            self._done_source += block
        if self._queue:
            self._open = []
        elif not self._open_shown:
            self._open = markdown_block(self._open_text, ctx)
            self._open_shown = True
        self.source = self._done_source + (self._open_text if self._open_shown else "")
        gap = [Strip.blank(0)] if self._done and self._open else []
        self._lines = [*self._done, *gap, *self._open]
        self._show(self._lines)

    def rerender(self) -> None:
        """Render everything again (width or theme changed)."""
        text = self.text
        self._forget_rendering()
        self._pending = [text] if text else []
        context = self._context()
        if context is not None and text:
            self._render(context, None)
        else:
            self._show(self._lines)
