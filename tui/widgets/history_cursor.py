"""`HistoryCursor`: the history's selected item, what Enter, a click and the copy keys act on.

A part of `HistoryView`, handed the view's slot layout, which lines are on screen, and how to
scroll, redraw, expand an entry and copy. The cursor stays with the view: following puts it on
the last item, and a scroll that leaves it out of sight brings it to the nearest item in sight,
so a key starts from what is on screen, never from an item far above.
"""

from __future__ import annotations

from collections.abc import Callable

from hotloop.core.markdown_blocks import code_blocks
from hotloop.tui.items import Item
from hotloop.tui.widgets.history_slots import Place, SlotLayout


class HistoryCursor:
    def __init__(
        self,
        layout: SlotLayout,
        view: Callable[[], tuple[int, int]],
        scroll_to: Callable[[int], None],
        redraw: Callable[[], None],
        *,
        toggle: Callable[[int, str], None],
        copy: Callable[[str, str], None],
    ) -> None:
        self._layout = layout
        self._view = view  # the transcript lines on screen: the first, and how many
        self._scroll_to = scroll_to
        self._redraw = redraw
        self._toggle = toggle  # expand or fold entry `key` of slot `index`
        self._copy = copy  # to the clipboard: the text, and what it is (`copied {what}`)
        self.index = -1  # an index into the places; -1: the last one
        self.moving = False  # the cursor is putting the view there: it stays where it was put

    def place(self) -> Place | None:
        return self._layout.place(self.index)

    def line(self) -> int | None:
        """The transcript line the cursor is on, if any."""
        place = self.place()
        return self._layout.starts[place.slot] + place.line if place is not None else None

    def _item(self) -> Item | None:
        place = self.place()
        return self._layout.slots[place.slot].item if place is not None else None

    def move(self, index: int) -> None:
        """Go to place `index`, and the view with it (a key, a click)."""
        if index != self.index:
            self.index = index
            self._view_to_cursor()
            self._redraw()

    def put(self, index: int) -> None:
        """Go to place `index` without scrolling to it: the view moved, and the cursor goes with it."""
        if index != self.index:
            self.index = index
            self._redraw()

    def step(self, step: int) -> None:
        count = len(self._layout.places())
        if count:
            at = self.index if self.index >= 0 else count - 1
            self.move(min(max(at + step, 0), count - 1))

    def toggle(self) -> None:
        """Enter: the entry under the cursor expands or folds."""
        place = self.place()
        if place is not None and place.key is not None:
            self._toggle(place.slot, place.key)

    def click(self, y: int) -> None:
        """A click on transcript line `y`: the entry there, if any, expands or folds, and the cursor goes to it."""
        located = self._layout.locate(y)
        if located is None:
            return
        index, line = located
        rendered = self._layout.slots[index].rendered
        key = rendered.targets.get(line) if rendered is not None else None
        if key is not None:
            self._toggle(index, key)
            places = self._layout.places()
            self.move(next((n for n, p in enumerate(places) if p.slot == index and p.key == key), self.index))

    def copy_item(self) -> None:
        item = self._item()
        text = item.copy_text() if item is not None else None
        if item is not None and text:
            self._copy(text, item.copied())

    def copy_code(self) -> None:
        item = self._item()
        blocks = code_blocks(item.copy_text() or "") if item is not None else []
        if blocks:
            self._copy(blocks[-1], "the code block")

    def focused(self) -> None:
        """The view took the focus: the cursor shows, on an item in view."""
        if self.index < 0:
            self.index = len(self._layout.places()) - 1  # not scrolled to: that would show the item's first line
        self.into_view()
        self._view_to_cursor()  # nothing of the history shows (the step in flight fills the view)

    def into_view(self) -> None:
        """The view moved away from the cursor: it goes to the nearest place in view (if any shows)."""
        place = self.place() if self.index >= 0 else None
        if place is not None and not self._layout.shows(place, *self._view()):
            nearest = self._layout.nearest_shown(self.index, *self._view())
            self.put(self.index if nearest is None else nearest)

    def _view_to_cursor(self) -> None:
        """Scroll to the cursor's place, unless a line of it shows (an item partly in view needs no scroll)."""
        place = self.place()
        if place is None or self._layout.shows(place, *self._view()):
            return
        line = self._layout.starts[place.slot] + place.line
        self.moving = True
        try:
            self._scroll_to(max(line - self._view()[1] // 2, 0))
        finally:
            self.moving = False
