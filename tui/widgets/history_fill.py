"""`IdleFill`: the history's stale items rendered in idle time, newest first, a time slice a tick.

A part of `HistoryView`, handed its slot layout, how it renders a slot and lays the slots out
again, and the view itself for its timers. After a resize, a theme change or a saved session's
many items, what shows is rendered when drawn; the rest follows here, so input stays responsive.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.widget import Widget

from hotloop.tui.widgets.history_slots import Slot, SlotLayout

FILL_BUDGET = 0.012  # seconds of rendering per idle tick, to keep input responsive


class IdleFill:
    def __init__(
        self, layout: SlotLayout, render: Callable[[Slot], bool], relayout: Callable[[], None], view: Widget
    ) -> None:
        self._layout = layout
        self._render = render  # renders a slot; True if its height changed
        self._relayout = relayout
        self._view = view
        self._filling = False

    def schedule(self) -> None:
        if not self._filling:
            self._filling = True
            self._view.call_after_refresh(self._fill)

    def _fill(self) -> None:
        """Render stale items, newest first, a time slice at a time."""
        deadline = time.perf_counter() + FILL_BUDGET
        changed = False
        for slot in reversed(self._layout.slots):
            if slot.rendered is None:
                changed |= self._render(slot)
                if time.perf_counter() > deadline:
                    break
        if changed:
            self._relayout()
        if any(slot.rendered is None for slot in self._layout.slots):
            self._view.set_timer(0.01, self._fill)
        else:
            self._filling = False
