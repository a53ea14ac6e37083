"""`HistoryView`: every finished part of the conversation, as pre-rendered lines in one widget.

One widget, however long the session: items render to strips once per width, and only
lines on screen are drawn. After a resize or theme change, items re-render lazily, visible
first, then the rest in idle time.
"""

from __future__ import annotations

import time
from bisect import bisect_right
from collections.abc import Callable
from dataclasses import dataclass

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Size
from textual.message import Message
from textual.reactive import reactive
from textual.selection import Selection
from textual.strip import Strip
from textual.widget import Widget

from hotloop.core.markdown_blocks import code_blocks
from hotloop.tui.items import Item, Rendered
from hotloop.tui.render import RenderContext
from hotloop.tui.widgets.selectable import selected_text, with_selection

FILL_BUDGET = 0.012  # seconds of rendering per idle tick, to keep input responsive


@dataclass
class _Slot:
    item: Item
    gap: int  # blank lines before the item
    rendered: Rendered | None = None
    height: int = 1  # rendered height, or an estimate until rendered


@dataclass(frozen=True)
class _Place:
    """A cursor position: an item, and the entry in it (a tool call, the reasoning), if any."""

    slot: int
    key: str | None
    line: int  # line within the item


class HistoryView(Widget, can_focus=True):
    """The finished transcript. Click or Enter expands an entry; ctrl+c copies the item under the cursor.

    Its keys are never printable: a letter typed here goes to the prompt.
    """

    DEFAULT_CSS = """
    HistoryView { height: auto; }
    HistoryView > .history-view--cursor { background: $boost; text-style: bold; }
    """
    COMPONENT_CLASSES = {"history-view--cursor"}
    ALLOW_SELECT = True
    BINDINGS = [
        Binding("up", "cursor(-1)", "Previous", show=False),
        Binding("down", "cursor(1)", "Next", show=False),
        Binding("home", "app.scroll_transcript('start')", "First", show=False, tooltip="The transcript's start"),
        Binding("end", "app.scroll_transcript('end')", "Follow", show=False, tooltip="The bottom, following again"),
        Binding("enter", "toggle_entry", "Expand", show=True, tooltip="Expand or fold the tool call or reasoning"),
        Binding("ctrl+c", "copy_item", "Copy", show=True, tooltip="Copy the selected text, else the item"),
        Binding("ctrl+y", "copy_code", "Copy code", show=True, tooltip="Copy the item's last code block"),
    ]

    cursor: reactive[int] = reactive(-1, layout=False)

    class Copied(Message):
        """Text was copied from the history (the app shows a notice)."""

        def __init__(self, what: str) -> None:
            super().__init__()
            self.what = what

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
        self._slots: list[_Slot] = []
        self._starts: list[int] = []
        self._total = 0
        self._width = 0
        self._filling = False
        self._drawn: dict[int, Strip] = {}  # finished screen lines, by y
        self._style: Style | None = None

    # -- items -------------------------------------------------------------------------

    @property
    def items(self) -> list[Item]:
        return [slot.item for slot in self._slots]

    def add(self, item: Item, gap: int = 1) -> None:
        slot = _Slot(item, gap if self._slots else 0)
        if self._width:
            self._render_slot(slot)
        else:
            slot.height = item.estimate_height(80)
        self._slots.append(slot)
        self._relayout()

    def extend(self, items: list[tuple[Item, int]]) -> None:
        """Add many items at once (a saved session): laid out on estimates, then rendered visible first."""
        for item, gap in items:
            slot = _Slot(item, gap if self._slots else 0)
            slot.height = item.estimate_height(self._width or 80)
            self._slots.append(slot)
        self._relayout()
        self._schedule_fill()

    def clear(self) -> None:
        self._slots.clear()
        self.cursor = -1
        self._relayout()

    def rerender(self) -> None:
        """Forget every rendering (theme or width changed); render again, visible first."""
        for slot in self._slots:
            slot.rendered = None
        self._relayout()
        self._schedule_fill()

    # -- geometry ----------------------------------------------------------------------

    def _relayout(self) -> None:
        starts, line = [], 0
        for slot in self._slots:
            line += slot.gap
            starts.append(line)
            line += slot.height
        self._starts, self._total = starts, line
        self._drawn.clear()
        self.virtual_size = Size(self._width, line)
        self.refresh(layout=True)

    def get_content_height(self, container: Size, viewport: Size, width: int) -> int:
        return self._total

    def _render_slot(self, slot: _Slot) -> bool:
        """Render a slot at the current width; True if its height changed."""
        slot.rendered = slot.item.render(self._render_context(self._width))
        changed = len(slot.rendered.lines) != slot.height
        slot.height = len(slot.rendered.lines)
        return changed

    def _locate(self, y: int) -> tuple[int, int] | None:
        """(slot index, line within the item) for transcript line `y`, or None on a gap."""
        index = bisect_right(self._starts, y) - 1
        if index < 0:
            return None
        line = y - self._starts[index]
        return (index, line) if line < self._slots[index].height else None

    def on_resize(self, event: events.Resize) -> None:
        if event.size.width != self._width:
            old = self._width
            self._width = event.size.width
            for slot in self._slots:
                if old and slot.rendered is not None:
                    # Keep the layout close to right until the item is rendered again.
                    slot.height = max(1, round(slot.height * old / self._width))
                slot.rendered = None
            self._relayout()
            self._schedule_fill()

    def _schedule_fill(self) -> None:
        if not self._filling:
            self._filling = True
            self.call_after_refresh(self._fill)

    def _fill(self) -> None:
        """Render stale items, newest first, a time slice at a time."""
        deadline = time.perf_counter() + FILL_BUDGET
        changed = False
        for slot in reversed(self._slots):
            if slot.rendered is None:
                changed |= self._render_slot(slot)
                if time.perf_counter() > deadline:
                    break
        if changed:
            self._relayout()
        if any(slot.rendered is None for slot in self._slots):
            self.set_timer(0.01, self._fill)
        else:
            self._filling = False

    # -- drawing -----------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style = None
        self._drawn.clear()

    def render_line(self, y: int) -> Strip:
        drawn = self._drawn.get(y)
        if drawn is None or drawn.cell_length != self.size.width:
            drawn = self._drawn[y] = self._draw(y)
        return drawn

    def _draw(self, y: int) -> Strip:
        width = self.size.width
        if self._style is None:
            self._style = self.rich_style  # ~40 µs to compute: once per style change, not per line
        style = self._style
        place = self._locate(y)
        if place is None:
            return Strip.blank(width, style)
        index, line = place
        slot = self._slots[index]
        if slot.rendered is None and self._render_slot(slot):
            self.call_after_refresh(self._relayout)
        assert slot.rendered is not None
        if line >= len(slot.rendered.lines):
            return Strip.blank(width, style)
        strip = slot.rendered.lines[line]
        if self.has_focus and self._cursor_line() == y:
            strip = strip.apply_style(self.get_component_rich_style("history-view--cursor"))
        # Rich leaves unstyled cells; the widget's own colours go under every line.
        return with_selection(self, strip.apply_style(style), y).crop_extend(0, width, style).apply_offsets(0, y)

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        changed = False
        lines: list[str] = []
        for slot in self._slots:
            if slot.rendered is None:
                changed |= self._render_slot(slot)
            assert slot.rendered is not None
            lines.extend([""] * slot.gap)
            lines.extend(strip.text for strip in slot.rendered.lines)
        if changed:
            # The fill skips what is rendered here, so it would not lay these heights out.
            self._relayout()
        return selected_text(lines, selection)

    def selection_updated(self, selection: Selection | None) -> None:
        self._drawn.clear()
        self.refresh()

    # -- cursor, clicks and copying ----------------------------------------------------

    def _places(self) -> list[_Place]:
        places = []
        for index, slot in enumerate(self._slots):
            targets = slot.rendered.targets if slot.rendered is not None else {}
            if targets:
                places += [_Place(index, key, line) for line, key in sorted(targets.items())]
            elif slot.item.copy_text() is not None:
                places.append(_Place(index, None, 0))
        return places

    def _cursor_line(self) -> int | None:
        places = self._places()
        if not 0 <= self.cursor < len(places):
            return None
        place = places[self.cursor]
        return self._starts[place.slot] + place.line

    def watch_cursor(self) -> None:
        line = self._cursor_line()
        if line is not None:
            self.scroll_visible_line(line)
        self._drawn.clear()
        self.refresh()

    def scroll_visible_line(self, line: int) -> None:
        parent = self.parent
        if isinstance(parent, Widget):
            top = self.virtual_region.y + line
            if not parent.scroll_y <= top < parent.scroll_y + parent.size.height:
                parent.scroll_to(y=max(top - parent.size.height // 2, 0), animate=False)

    def on_focus(self) -> None:
        places = self._places()
        if self.cursor < 0:
            self.set_reactive(HistoryView.cursor, len(places) - 1)  # not watched: that would show its first line
        parent = self.parent
        if 0 <= self.cursor < len(places) and isinstance(parent, Widget):
            # The view stays where it is if the cursor's item shows in it at all.
            slot = places[self.cursor].slot
            top = self.virtual_region.y + self._starts[slot]
            if not parent.scroll_y - self._slots[slot].height < top < parent.scroll_y + parent.size.height:
                self.scroll_visible_line(self._starts[slot] + places[self.cursor].line)
        self._drawn.clear()
        self.refresh()

    def on_blur(self) -> None:
        self._drawn.clear()
        self.refresh()

    def action_cursor(self, step: int) -> None:
        count = len(self._places())
        if count:
            self.cursor = min(max(self.cursor + step, 0), count - 1)

    def action_toggle_entry(self) -> None:
        places = self._places()
        if not 0 <= self.cursor < len(places):
            return
        place = places[self.cursor]
        if place.key is not None:
            self._toggle(self._slots[place.slot], place.key)

    def _toggle(self, slot: _Slot, key: str) -> None:
        slot.item.toggle(key)
        self._render_slot(slot)
        self._relayout()

    def on_click(self, event: events.Click) -> None:
        link = event.style.link if event.style else None
        if link:
            self.app.open_url(link)
            return
        place = self._locate(event.y)
        if place is None:
            return
        index, line = place
        slot = self._slots[index]
        key = slot.rendered.targets.get(line) if slot.rendered is not None else None
        if key is not None:
            self._toggle(slot, key)
            positions = self._places()
            self.cursor = next((n for n, p in enumerate(positions) if p.slot == index and p.key == key), self.cursor)

    def action_copy_item(self) -> None:
        if self.screen.get_selected_text():
            self.screen.action_copy_text()
            return
        places = self._places()
        if not 0 <= self.cursor < len(places):
            return
        place = places[self.cursor]
        item = self._slots[place.slot].item
        text = item.copy_text()
        if text:
            self.app.copy_to_clipboard(text)
            self.post_message(self.Copied(type(item).__name__.removesuffix("Item").lower()))

    def action_copy_code(self) -> None:
        places = self._places()
        if not 0 <= self.cursor < len(places):
            return
        blocks = code_blocks(self._slots[places[self.cursor].slot].item.copy_text() or "")
        if blocks:
            self.app.copy_to_clipboard(blocks[-1])
            self.post_message(self.Copied("code block"))
