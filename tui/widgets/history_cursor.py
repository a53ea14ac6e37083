"""The history's cursor, clicks and copying: the part of `HistoryView` that selects an item and acts on it.

The cursor stays with the view: following puts it on the last item, and a scroll that leaves it
out of sight brings it to the nearest item in sight, so a key starts from what is on screen. Its
keys are never printable: a letter typed in the history goes to the prompt.
"""

from __future__ import annotations

from textual import events
from textual.binding import Binding
from textual.message import Message
from textual.reactive import reactive
from textual.scroll_view import ScrollView
from textual.strip import Strip

from hotloop.core.markdown_blocks import code_blocks
from hotloop.tui.widgets.history_slots import Place, Slot, SlotLayout


class HistoryCursor(ScrollView):
    """A scroll view of slots, laid out by `_layout`, with a cursor over their places (the view draws them)."""

    # The history's keys, all here so that help lists them in this order; home and end are the view's.
    BINDINGS = [
        Binding("up", "cursor(-1)", "Previous", show=False),
        Binding("down", "cursor(1)", "Next", show=False),
        Binding("home", "start", "First", show=False, tooltip="The transcript's start"),
        Binding("end", "follow", "Follow", show=False, tooltip="The bottom, following again"),
        Binding("enter", "toggle_entry", "Expand", show=True, tooltip="Expand or fold the tool call or reasoning"),
        Binding("ctrl+c", "copy_item", "Copy", show=True, tooltip="Copy the selected text, else the item"),
        Binding("ctrl+y", "copy_code", "Copy code", show=True, tooltip="Copy the item's last code block"),
    ]

    cursor: reactive[int] = reactive(-1, layout=False)  # an index into the places; -1: the last one

    # The view's, which it sets up: where the slots are, the lines above them, what is drawn.
    _layout: SlotLayout
    _lead: list[Strip]
    _drawn: dict[int, tuple[Strip | None, Strip]]
    _moving_cursor = False

    class Copied(Message, namespace="history_view"):
        """Text was copied from the history (the app shows a notice); `what` it was, as `copied {what}` says it."""

        def __init__(self, what: str) -> None:
            super().__init__()
            self.what = what

    @property
    def _pad(self) -> int:
        raise NotImplementedError

    def _render_slot(self, slot: Slot) -> bool:
        raise NotImplementedError

    def _relayout(self) -> None:
        raise NotImplementedError

    def _place(self) -> Place | None:
        return self._layout.place(self.cursor)

    def _cursor_line(self) -> int | None:
        place = self._place()
        return self._layout.starts[place.slot] + place.line if place is not None else None

    def _view(self) -> tuple[int, int]:
        """The transcript lines on screen: the first, and how many."""
        return self.scroll_offset.y - self._pad, self.scrollable_content_region.height

    def _in_view(self, place: Place) -> bool:
        return self._layout.shows(place, *self._view())

    def _cursor_into_view(self) -> None:
        """The view moved away from the cursor: it goes to the nearest place in view (if any shows)."""
        place = self._place() if self.cursor >= 0 else None
        if place is not None and not self._in_view(place):
            nearest = self._layout.nearest_shown(self.cursor, *self._view())
            self._put_cursor(self.cursor if nearest is None else nearest)

    def _put_cursor(self, index: int) -> None:
        """Move the cursor without scrolling to it (not watched): the view moved, and the cursor goes with it."""
        if index != self.cursor:
            self.set_reactive(HistoryCursor.cursor, index)
            self._drawn.clear()
            self.refresh()

    def _view_to_cursor(self) -> None:
        """Scroll to the cursor's place, unless a line of it shows (an item partly in view needs no scroll)."""
        place = self._place()
        if place is None or self._in_view(place):
            return
        line = self._layout.starts[place.slot] + place.line
        self._moving_cursor = True  # the cursor put the view there: it stays where it was put
        try:
            self.scroll_to(y=max(line - self.scrollable_content_region.height // 2, 0), animate=False)
        finally:
            self._moving_cursor = False

    def watch_cursor(self) -> None:
        self._view_to_cursor()
        self._drawn.clear()
        self.refresh()

    def on_focus(self) -> None:
        if self.cursor < 0:
            # Not watched: that would show the item's first line.
            self.set_reactive(HistoryCursor.cursor, len(self._layout.places()) - 1)
        self._cursor_into_view()
        self._view_to_cursor()  # nothing of the history shows (the step in flight fills the view)
        self._drawn.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._drawn.clear()
        self.refresh()

    def action_cursor(self, step: int) -> None:
        count = len(self._layout.places())
        if count:
            at = self.cursor if self.cursor >= 0 else count - 1
            self.cursor = min(max(at + step, 0), count - 1)

    def action_toggle_entry(self) -> None:
        place = self._place()
        if place is not None and place.key is not None:
            self._toggle(self._layout.slots[place.slot], place.key)

    def _toggle(self, slot: Slot, key: str) -> None:
        slot.item.toggle(key)
        self._render_slot(slot)
        self._relayout()

    def on_click(self, event: events.Click) -> None:
        link = event.style.link if event.style else None
        if link:
            self.app.open_url(link)
            return
        y = self.scroll_offset.y + event.y - self._pad
        place = self._layout.locate(y) if len(self._lead) <= y < self._layout.end else None
        if place is None:
            return
        index, line = place
        slot = self._layout.slots[index]
        key = slot.rendered.targets.get(line) if slot.rendered is not None else None
        if key is not None:
            self._toggle(slot, key)
            positions = self._layout.places()
            self.cursor = next((n for n, p in enumerate(positions) if p.slot == index and p.key == key), self.cursor)

    def action_copy_item(self) -> None:
        if self.screen.get_selected_text():
            self.screen.action_copy_text()
            return
        place = self._place()
        if place is None:
            return
        item = self._layout.slots[place.slot].item
        text = item.copy_text()
        if text:
            self.app.copy_to_clipboard(text)
            self.post_message(self.Copied(item.copied()))

    def action_copy_code(self) -> None:
        place = self._place()
        if place is None:
            return
        blocks = code_blocks(self._layout.slots[place.slot].item.copy_text() or "")
        if blocks:
            self.app.copy_to_clipboard(blocks[-1])
            self.post_message(self.Copied("the code block"))
