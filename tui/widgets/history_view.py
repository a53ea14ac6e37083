"""`HistoryView`: the conversation as pre-rendered lines in one scrolling widget.

One widget, however long the session: the finished items render to strips once per width, the
step in flight's parts (its answer, tool panes and usage strip) are lines handed in as they
change, and only lines on screen are drawn. A frame while the answer streams is the few lines
that changed, not a re-layout of widgets. After a resize or theme change, items re-render
lazily, visible first, then the rest in idle time (`IdleFill`).

The view follows its end whenever it is at the bottom; scrolling up by any means (keys, wheel,
scrollbar, the cursor) stops following, and scrolling back to the bottom follows again.

The cursor, what Enter, a click and the copy keys act on, is a part of its own (`HistoryCursor`)
that stays with the view; the keys and handlers Textual looks up here hand it on. The view's keys
are never printable: a letter typed in the history goes to the prompt.
"""

from __future__ import annotations

from collections.abc import Callable

from rich.style import Style
from textual import events
from textual.binding import Binding
from textual.geometry import Region, Size
from textual.message import Message
from textual.reactive import var
from textual.scroll_view import ScrollView
from textual.selection import Selection
from textual.strip import Strip

from hotloop.tui.items import Item
from hotloop.tui.render import RenderContext
from hotloop.tui.widgets.history_cursor import HistoryCursor
from hotloop.tui.widgets.history_fill import IdleFill
from hotloop.tui.widgets.history_slots import Slot, SlotLayout
from hotloop.tui.widgets.selectable import selected_text, with_selection

# The step in flight's parts, in the order they show under the history.
LIVE_PARTS = ("reasoning", "answer", "panes", "usage")


class HistoryView(ScrollView, can_focus=True):
    """The transcript's lines. Click or Enter expands an entry; ctrl+c copies the item under the cursor."""

    # The history's keys, in the order help lists them.
    BINDINGS = [
        Binding("up", "cursor(-1)", "Previous", show=False),
        Binding("down", "cursor(1)", "Next", show=False),
        Binding("home", "start", "First", show=False, tooltip="The transcript's start"),
        Binding("end", "follow", "Follow", show=False, tooltip="The bottom, following again"),
        Binding("enter", "toggle_entry", "Expand", show=True, tooltip="Expand or fold the tool call or reasoning"),
        Binding("ctrl+c", "copy_item", "Copy", show=True, tooltip="Copy the selected text, else the item"),
        Binding("ctrl+y", "copy_code", "Copy code", show=True, tooltip="Copy the item's last code block"),
    ]

    DEFAULT_CSS = """
    HistoryView {
        height: 1fr;
        /* Lines as wide as when the transcript was a scrolling container: two more columns by the scrollbar. */
        padding: 0 3 0 1;
        overflow-x: hidden;
        /* Always there: lines are pre-rendered for a width, which a scrollbar appearing would change. */
        overflow-y: scroll;
        scrollbar-background: $background;
        scrollbar-background-hover: $background;
        scrollbar-background-active: $background;
    }
    HistoryView > .history-view--cursor { background: $boost; text-style: bold; }
    """
    COMPONENT_CLASSES = {"history-view--cursor"}
    ALLOW_SELECT = True
    following: var[bool] = var(True)

    class WidthChanged(Message):
        """Lines are now rendered for another width: what is drawn from outside must be rendered again."""

    class Copied(Message):
        """Text was copied from the history (the app shows a notice); `what` it was, as `copied {what}` says it."""

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
        self._layout = SlotLayout()
        self._lead: list[Strip] = []  # lines above the history (the welcome)
        self._live: dict[str, list[Strip]] = {part: [] for part in LIVE_PARTS}
        self._live_lines: list[Strip] = []
        self._width = 0
        # Drawn screen lines by transcript line, with the source strip each was drawn from: a line
        # whose source is still the same strip is not drawn again.
        self._drawn: dict[int, tuple[Strip | None, Strip]] = {}
        self._style: Style | None = None
        self._background = Style()
        self._fill = IdleFill(self._layout, self._render_slot, self._relayout, self)
        self._cursor = HistoryCursor(
            self._layout,
            lambda: (self.scroll_offset.y - self._pad, self.scrollable_content_region.height),
            lambda y: self.scroll_to(y=y, animate=False),
            self._redraw,
            toggle=self._toggle,
            copy=self._copy,
        )

    @property
    def cursor(self) -> int:
        """The cursor's place: an index into the places, -1 for the last one."""
        return self._cursor.index

    @property
    def width(self) -> int:
        """The width lines are rendered for (0 until the view is laid out)."""
        return self._width

    # -- items -------------------------------------------------------------------------

    @property
    def items(self) -> list[Item]:
        return [slot.item for slot in self._layout.slots]

    def add(self, item: Item, gap: int = 1) -> None:
        slot = Slot(item, gap if self._layout.slots else 0)
        if self._width:
            self._render_slot(slot)
        else:
            slot.height = item.estimate_height(80)
        self._layout.slots.append(slot)
        self._relayout()

    def extend(self, items: list[tuple[Item, int]]) -> None:
        """Add many items at once (a saved session): laid out on estimates, then rendered visible first."""
        for item, gap in items:
            slot = Slot(item, gap if self._layout.slots else 0)
            slot.height = item.estimate_height(self._width or 80)
            self._layout.slots.append(slot)
        self._relayout()
        self._fill.schedule()

    def clear(self) -> None:
        self._layout.slots.clear()
        self._cursor.move(-1)
        self._relayout()

    def rerender(self) -> None:
        """Forget every rendering (theme or width changed); render again, visible first."""
        for slot in self._layout.slots:
            slot.rendered = None
        self._relayout()
        self._fill.schedule()

    def set_lead(self, lines: list[Strip]) -> None:
        """Show `lines` above the history."""
        if lines != self._lead:
            self._lead = lines
            self._relayout()

    def set_live(self, part: str, lines: list[Strip]) -> None:
        """Show `lines` as the step in flight's `part` (one of LIVE_PARTS); only lines that changed are drawn."""
        self._live[part] = lines
        old = self._live_lines
        new = [line for part_lines in self._live.values() for line in part_lines]
        first = _first_change(old, new)
        self._live_lines = new
        if len(new) != len(old):
            self._resized()
        top = self._layout.end + 1 + first - self.scroll_offset.y + self._pad
        changed = Region(0, top, self.size.width, max(len(old), len(new)) - first).intersection(self.size.region)
        if changed:
            self.refresh(changed)

    # -- geometry ----------------------------------------------------------------------

    @property
    def _total(self) -> int:
        # A blank line parts the history from the step in flight.
        return self._layout.end + 1 + len(self._live_lines)

    @property
    def _pad(self) -> int:
        """Blank lines above a transcript shorter than the view: it sits at the bottom, by the prompt."""
        return max(self.scrollable_content_region.height - self._total, 0)

    def _relayout(self) -> None:
        self._layout.arrange(len(self._lead))
        self._drawn.clear()
        self._resized()
        self.refresh()

    def _resized(self) -> None:
        """The transcript's length changed: keep the end in view if following."""
        height = self.scrollable_content_region.height
        padded = self._pad > 0 or self.virtual_size.height < height
        size = Size(self._width, self._total)
        if self.show_vertical_scrollbar and min(size.height, self.virtual_size.height) > height:
            # The scrollbar stays: set the size without the screen-wide layout that assigning the
            # reactive asks for. That layout repaints every widget on screen, each frame of a stream.
            self.set_reactive(HistoryView.virtual_size, size)
            self._scroll_update(size)
        else:
            self.virtual_size = size
        if padded:  # every line moved
            self._drawn.clear()
            self.refresh()
        if self.following:
            self.scroll_to(y=self.max_scroll_y, animate=False)

    def _render_slot(self, slot: Slot) -> bool:
        """Render a slot at the current width; True if its height changed."""
        slot.rendered = slot.item.render(self._render_context(self._width))
        self._layout.rendered()
        changed = len(slot.rendered.lines) != slot.height
        slot.height = len(slot.rendered.lines)
        return changed

    def on_resize(self, event: events.Resize) -> None:
        width = self.scrollable_content_region.width
        if width != self._width:
            old, self._width = self._width, width
            for slot in self._layout.slots:
                if old and slot.rendered is not None:
                    # Keep the layout close to right until the item is rendered again.
                    slot.height = max(1, round(slot.height * old / width))
                slot.rendered = None
            self._relayout()
            self._fill.schedule()
            self.post_message(self.WidthChanged())
        else:  # only the height: a bar above the prompt came or went, and the end must stay in view
            self._resized()

    # -- following ---------------------------------------------------------------------

    def watch_scroll_y(self, old_value: float, new_value: float) -> None:
        super().watch_scroll_y(old_value, new_value)
        if new_value >= self.max_scroll_y:
            if not self.following and not self._cursor.moving:
                self._cursor.put(-1)  # following resumed: the cursor goes with the view
            self.following = True
        elif new_value < old_value:
            self.following = False
        if not self._cursor.moving:
            self._cursor.into_view()

    def follow(self) -> None:
        """Go to the bottom and stay there as the transcript grows; the cursor goes to the last item."""
        self.following = True
        self._cursor.put(-1)
        self.scroll_to(y=self.max_scroll_y, animate=False)

    def action_start(self) -> None:
        self.scroll_home(animate=False)

    def action_follow(self) -> None:
        self.follow()

    # -- drawing -----------------------------------------------------------------------

    def notify_style_update(self) -> None:
        super().notify_style_update()
        self._style = None
        self._drawn.clear()

    def _source(self, y: int) -> Strip | None:
        """Transcript line `y` as rendered (None for a blank one); renders its item if it isn't yet."""
        if y < len(self._lead):
            return self._lead[y] if y >= 0 else None
        if y >= self._layout.end:
            live = y - self._layout.end - 1
            return self._live_lines[live] if 0 <= live < len(self._live_lines) else None
        place = self._layout.locate(y)
        if place is None:
            return None
        index, line = place
        slot = self._layout.slots[index]
        if slot.rendered is None and self._render_slot(slot):
            self.call_after_refresh(self._relayout)
        assert slot.rendered is not None
        return slot.rendered.lines[line] if line < len(slot.rendered.lines) else None

    def render_line(self, y: int) -> Strip:
        line = self.scroll_offset.y + y - self._pad
        source = self._source(line)
        cached = self._drawn.get(line)
        width = self._width
        if cached is not None and cached[0] is source and cached[1].cell_length == width:
            return cached[1]
        if self._style is None:
            self._style = self.rich_style  # ~40 µs to compute: once per style change, not per line
            self._background = Style(bgcolor=self._style.bgcolor)
        style = self._style
        strip = source or Strip.blank(0)
        # Outside the items (the welcome, the step in flight, blank space), lines end in the background
        # alone, as the widgets that drew them did.
        fill = style if len(self._lead) <= line < self._layout.end else self._background
        if self.has_focus and line < self._layout.end and self._cursor.line() == line:
            strip = strip.apply_style(self.get_component_rich_style("history-view--cursor"))
        # Rich leaves unstyled cells; the widget's own colours go under every line.
        drawn = with_selection(self, strip.apply_style(style), line).crop_extend(0, width, fill).apply_offsets(0, line)
        self._drawn[line] = (source, drawn)
        return drawn

    def get_selection(self, selection: Selection) -> tuple[str, str] | None:
        changed = False
        lines = [strip.text for strip in self._lead]
        for slot in self._layout.slots:
            if slot.rendered is None:
                changed |= self._render_slot(slot)
            assert slot.rendered is not None
            lines.extend([""] * slot.gap)
            lines.extend(strip.text for strip in slot.rendered.lines)
        if changed:
            # The idle fill skips what is rendered here, so it would not lay these heights out.
            self._relayout()
        lines.append("")
        lines.extend(strip.text for strip in self._live_lines)
        return selected_text(lines, selection)

    def selection_updated(self, selection: Selection | None) -> None:
        self._redraw()

    def _redraw(self) -> None:
        self._drawn.clear()
        self.refresh()

    # -- the cursor's keys, clicks and copying -------------------------------------------

    def on_focus(self) -> None:
        self._cursor.focused()
        self._redraw()

    def on_blur(self) -> None:
        self._redraw()

    def action_cursor(self, step: int) -> None:
        self._cursor.step(step)

    def action_toggle_entry(self) -> None:
        self._cursor.toggle()

    def _toggle(self, index: int, key: str) -> None:
        slot = self._layout.slots[index]
        slot.item.toggle(key)
        self._render_slot(slot)
        self._relayout()

    def on_click(self, event: events.Click) -> None:
        link = event.style.link if event.style else None
        if link:
            self.app.open_url(link)
        else:
            self._cursor.click(self.scroll_offset.y + event.y - self._pad)

    def action_copy_item(self) -> None:
        if self.screen.get_selected_text():
            self.screen.action_copy_text()
        else:
            self._cursor.copy_item()

    def action_copy_code(self) -> None:
        self._cursor.copy_code()

    def _copy(self, text: str, what: str) -> None:
        self.app.copy_to_clipboard(text)
        self.post_message(self.Copied(what))


def _first_change(old: list[Strip], new: list[Strip]) -> int:
    """The first line of `new` that differs from `old`'s; a line rendered again the same is `old`'s in `new` again,
    so that its drawn line stays good."""
    first = None
    for y, (was, line) in enumerate(zip(old, new, strict=False)):
        if line is not was:
            if line == was:
                new[y] = was
            elif first is None:
                first = y
    return min(len(old), len(new)) if first is None else first
