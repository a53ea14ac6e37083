"""`LiveAnswer`: the answer while it streams, token by token, as Markdown lines.

Only the last top-level block of a growing document can change. Tokens are collected as
they arrive and applied on a coalescing flush: at once after a pause, then at most 30 times a
second, or back to back with a breather while a flood is behind. New text is parsed once into
blocks; a finished block is rendered once, the open (last) block again as it grows. While the
view follows the end, a flush renders the newest blocks first, as many as fill the view, so the
latest text is on screen at the next frame however far behind the rest is; the blocks skipped,
above the view, are rendered afterwards, oldest first, as the time budget allows. The lines are
blocks joined as `markdown_lines` joins them, so the finished answer's item shows exactly what
streamed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from itertools import pairwise

from textual.strip import Strip
from textual.timer import Timer

from hotloop.core.markdown_blocks import block_starts
from hotloop.tui.render import RenderContext, markdown_block

FLUSH_INTERVAL = 1 / 60
# Seconds of rendering finished blocks per flush; what is left waits for the next one. A budget,
# not a count of characters: a code block costs ~20 µs a character to render, prose ~1 µs.
FLUSH_BUDGET = 0.008
# Characters of pending text parsed in one budgeted flush (~0.2 µs each).
PARSE_LIMIT = 8_000
MIN_DELAY = 0.001  # a Textual timer can't be set for 0 s
# A flush that took long (a big open code block) pushes the next one back, so input stays responsive.
FLUSH_BACKOFF = 2.0
# Behind a flood, the next flush comes this soon after one ends: time enough for input and a frame.
BACKLOG_BREATHER = 0.004


class LiveAnswer:
    """The streaming answer. It renders for `context()` (None while there is no width yet) and hands
    its lines to `show` whenever they change; `rows()` is how many lines the view shows while it
    follows the end (0 when it doesn't); `set_timer` schedules its flushes."""

    def __init__(
        self,
        context: Callable[[], RenderContext | None],
        show: Callable[[list[Strip]], None],
        set_timer: Callable[[float, Callable[[], None]], Timer],
        rows: Callable[[], int] = lambda: 0,
    ) -> None:
        self._context = context
        self._show = show
        self._set_timer = set_timer
        self._rows = rows
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
        self._blocks: list[str] = []  # the finished blocks
        self._ends: list[int] = []  # where each finished block ends in the text
        self._rendered: list[list[Strip] | None] = []  # each finished block's lines, None until rendered
        self._unrendered = 0
        self._oldest = 0  # no finished block before this one waits to be rendered
        self._open_text = ""  # the last block, which more text can still change
        self._open: list[Strip] | None = None  # its lines as shown, None if not shown
        self._lines: list[Strip] = []
        self.shown_to = 0  # where the newest text on screen ends in the answer

    @property
    def lines(self) -> tuple[RenderContext | None, list[Strip]]:
        """The rendered answer and the context it was rendered with (None if not rendered)."""
        return self._rendered_context, self._lines

    @property
    def text(self) -> str:
        """Everything written so far, on screen or not."""
        return "".join(self._blocks) + self._open_text + "".join(self._pending)

    @property
    def complete(self) -> bool:
        """Whether every written character is in the lines."""
        return not self._behind and (self._open is not None or not self._open_text)

    def write(self, text: str) -> None:
        self._pending.append(text)
        if self._timer is None:
            # The first text after a pause shows at once, not a tick later: a stream's last token
            # has no event after it to hurry it on screen.
            self._timer = self._set_timer(max(self._next_flush - time.perf_counter(), MIN_DELAY), self._tick)

    @property
    def _behind(self) -> bool:
        return bool(self._pending or self._unrendered)

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
        """Show written text: all of it with `everything`, else as much as FLUSH_BUDGET allows."""
        if self.complete:
            return
        context = self._context()
        if context is not None:  # else no width yet: rendered by `rerender` once there is one
            self._render(context, None if everything else FLUSH_BUDGET)

    def _parse(self, budgeted: bool) -> int | None:
        """Split pending text into blocks: the finished ones are added, the last stays open. Returns
        the finished block that now holds the open block's text if that was on screen, else None."""
        pending = "".join(self._pending)
        self._pending = []
        if budgeted and len(pending) > PARSE_LIMIT:
            # A flood is parsed a piece at a time, so that one flush doesn't parse all of it.
            self._pending = [pending[PARSE_LIMIT:]]
            pending = pending[:PARSE_LIMIT]
        tail = self._open_text + pending
        starts = block_starts(tail)[1:]  # what comes before the second block belongs to the first
        held = len(self._blocks) if starts and self._open is not None else None
        offset = self._ends[-1] if self._ends else 0
        for a, b in pairwise([0, *starts]):
            self._blocks.append(tail[a:b])
            self._ends.append(offset + b)
            self._rendered.append(None)
        self._unrendered += len(starts)
        self._open_text = tail[starts[-1] :] if starts else tail
        self._open = None
        return held

    def _render_block(self, index: int, ctx: RenderContext) -> None:
        if self._rendered[index] is None:
            self._rendered[index] = markdown_block(self._blocks[index], ctx)
            self._unrendered -= 1

    def _render(self, ctx: RenderContext, budget: float | None) -> None:
        """Render what was written; past `budget` seconds, blocks above the view wait for a later flush."""
        self._rendered_context = ctx
        deadline = None if budget is None else time.perf_counter() + budget
        if self._pending:
            held = self._parse(budget is not None)
            if held is not None:  # shown before: never show less than before
                self._render_block(held, ctx)
        rows = self._rows() if budget is not None else 0
        if rows and self._unrendered:
            # Behind while following: the newest blocks first, enough to fill the view.
            if self._open is None:
                self._open = markdown_block(self._open_text, ctx)
            filled, index = len(self._open), len(self._blocks) - 1
            while filled < rows and index >= 0:
                self._render_block(index, ctx)
                block_lines = self._rendered[index] or []
                filled += len(block_lines) + 1 if block_lines else 0
                index -= 1
        while self._unrendered:  # the oldest first, at least one a flush
            while self._rendered[self._oldest] is not None:
                self._oldest += 1
            self._render_block(self._oldest, ctx)
            if deadline is not None and time.perf_counter() >= deadline:
                break
        if self._open is None and not self._unrendered:
            self._open = markdown_block(self._open_text, ctx)
        self._lines = []
        for lines in [*self._rendered, self._open]:
            if lines:
                if self._lines:
                    self._lines.append(Strip.blank(0))
                self._lines.extend(lines)
        if self._open is not None:
            self.shown_to = (self._ends[-1] if self._ends else 0) + len(self._open_text)
        else:
            self.shown_to = max(
                (end for end, lines in zip(self._ends, self._rendered, strict=True) if lines is not None), default=0
            )
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
