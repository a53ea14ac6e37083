"""`WatchedList`: the conversations `hotloop watch` has seen, each with its requests, dollars and agent.

Side requests (a title, a summary, a sub-agent) are listed under the conversation they branched
from, theirs under them. Highlighting one puts it on screen (the screen listens for `OptionHighlighted`).
An update costs the rows it changes, not the list: a busy fleet lists thousands of conversations.
"""

from __future__ import annotations

from bisect import bisect
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from hotloop.agent.figures import SessionTotals, counted
from hotloop.agent.text import inert

if TYPE_CHECKING:
    from textual.css.styles import RulesMap

    from hotloop.watch import ConversationInfo


_INDENTS = 6  # the deepest indent: past it, side requests of side requests line up


@dataclass(eq=False)
class _Row:
    conversation: ConversationInfo
    lines: tuple[Text, Text]
    seen: int  # the order conversations were first listed in, which the list keeps among siblings
    parent: str  # the conversation's parent when the row was placed: a change moves the row
    under: str = ""  # the row it is listed under: "" at the top (no parent, or one not listed yet)
    depth: int = 0
    sides: list[str] = field(default_factory=list)  # the rows listed under it, in the order seen


class WatchedList(OptionList):
    DEFAULT_CSS = """
    WatchedList, WatchedList:focus {
        width: 25%; min-width: 20; max-width: 34; height: 1fr; border: none; border-right: vkey $panel-lighten-2;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[str, _Row] = {}
        self._top: list[str] = []
        self._waiting: dict[str, list[str]] = {}  # a parent not listed yet: its side requests, listed at the top
        self._scrolling = False  # a scroll to the highlighted row is due once the list is drawn
        self._width = -1  # the width the rows were cut at

    def update(self, conversation: ConversationInfo, totals: SessionTotals) -> None:
        """Add the conversation, or redraw its lines with its totals so far."""
        title = Text(inert(conversation.title or "(no prompt yet)"), "" if conversation.parent else "bold")
        agent = conversation.agent.partition("/")[0]  # `claude-cli/2.1.332`: the version is in the session's origin
        # The dollars first, then the count: in an 80-column terminal the row has 15 columns, room for a cost whole
        # (`~$0.0007`, `price unknown`), and the agent is the same on most rows.
        figures = Text(f"{totals.cost.short()} · {counted(totals.steps, 'request')} · {inert(agent)}", "dim")
        row = self._rows.get(conversation.id)
        if row is None:
            self._rows[conversation.id] = _Row(conversation, (title, figures), len(self._rows), conversation.parent)
            self._restructure(conversation.id, adopting=True)
        else:
            row.conversation, row.lines = conversation, (title, figures)
            if conversation.parent != row.parent:  # a `SideOf`: the row and its side requests move under it
                self._restructure(conversation.id, adopting=False)
            else:
                self._splice(
                    self.get_option_index(conversation.id),
                    1,
                    [Option(self._fitted(conversation.id), id=conversation.id)],
                )

    def highlight(self, conversation: str) -> None:
        """Highlight the conversation on screen, wherever its row is."""
        if conversation in self._rows:
            self.highlighted = self.get_option_index(conversation)

    def on_resize(self) -> None:
        self._redraw()

    def watch_show_vertical_scrollbar(self) -> None:
        self._redraw()  # the scrollbar takes columns from every row

    def _restructure(self, key: str, *, adopting: bool) -> None:
        """List a new row (and the side requests that waited for it), or move a listed one with its subtree; the
        highlight stays on its conversation."""
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        if adopting:
            self._place(key)
            for side in self._waiting.pop(key, ()):
                if self._rows[side].conversation.parent == key:
                    self._lift(side)
                    self._place(side)
        else:
            self._lift(key)
            self._place(key)
        if highlighted is not None:
            # Only its index moved: no `OptionHighlighted`, which would put the conversation on screen again.
            self.set_reactive(OptionList.highlighted, self.get_option_index(highlighted))
            if not self._scrolling:  # rows put above it may have pushed it out of view: once per frame, not per row
                self._scrolling = True
                self.call_after_refresh(self._scroll_to_highlight)
        elif self.option_count:
            self.highlighted = 0

    def _scroll_to_highlight(self) -> None:
        self._scrolling = False
        self.scroll_to_highlight()

    def _lift(self, key: str) -> None:
        """Take a row and the rows under it out of the list and out of its parent's (or its waiting place)."""
        row = self._rows[key]
        self._splice(self.get_option_index(key), len(self._subtree(key)), [])
        siblings = self._rows[row.under].sides if row.under else self._top
        siblings.remove(key)
        waiting = self._waiting.get(row.parent, [])
        if key in waiting:
            waiting.remove(key)

    def _place(self, key: str) -> None:
        """Put a row and its subtree in the list: under its parent among its siblings in the order first seen."""
        row = self._rows[key]
        row.parent = parent = row.conversation.parent
        row.under = parent if parent in self._rows and not self._within(parent, key) else ""
        if parent and parent not in self._rows:
            self._waiting.setdefault(parent, []).append(key)
        siblings = self._rows[row.under].sides if row.under else self._top
        at = bisect(siblings, row.seen, key=lambda sibling: self._rows[sibling].seen)
        siblings.insert(at, key)
        if at:
            index = self.get_option_index(self._last(siblings[at - 1])) + 1
        else:
            index = self.get_option_index(row.under) + 1 if row.under else 0
        depth = self._rows[row.under].depth + 1 if row.under else 0
        options = []
        for side, below in self._subtree(key):
            self._rows[side].depth = depth + below
            options.append(Option(self._fitted(side), id=side))
        self._splice(index, 0, options)

    def _splice(self, index: int, count: int, options: list[Option]) -> None:
        """Put `options` in place of `count` rows at `index`. Textual's `OptionList` (8.2) only appends, removes one
        row at a time (each removal moving the highlight, which puts another conversation on screen), and replacing a
        prompt re-measures every row: its line cache is kept here while the rows keep their heights."""
        if index == self.option_count and not count:
            self.add_options(options)  # the common case, and Textual's line cache grows instead of being rebuilt
            return
        heights = self._line_cache.heights
        width = self.scrollable_content_region.width - self.get_component_styles("option-list--option").padding.width
        same = count == len(options) > 0 and all(
            heights.get(at) == self._get_visual(option).get_height(cast("RulesMap", self.styles), width)
            for at, option in enumerate(options, index)
        )
        for option in self._options[index : index + count]:
            del self._option_to_index[option]
            if option.id is not None:
                del self._id_to_option[option.id]
        self._options[index : index + count] = options
        moved = options if len(options) == count else self._options[index:]  # the rows whose index changed
        for at, option in enumerate(moved, index):
            self._option_to_index[option] = at
        self._id_to_option.update((option.id, option) for option in options if option.id is not None)
        if same:  # only those rows' lines are drawn again
            self.refresh_lines(
                self._line_cache.index_to_line[index], sum(heights[at] for at in range(index, index + count))
            )
        else:
            # The rows above keep their lines (Textual measures the rest again); drawn rows carry their index.
            lines = self._line_cache
            if index in lines.index_to_line:
                del lines.lines[lines.index_to_line[index] :]
            for at in range(index, len(lines.heights)):
                del lines.heights[at], lines.index_to_line[at]
            self._option_render_cache.clear()
            self._mouse_hovering_over = None
            self.refresh()

    def _subtree(self, key: str) -> list[tuple[str, int]]:
        """The row and the rows under it as listed, each with its depth below it (a stack: chains go deep)."""
        rows: list[tuple[str, int]] = []
        stack = [(key, 0)]
        while stack:
            key, depth = stack.pop()
            rows.append((key, depth))
            stack += [(side, depth + 1) for side in reversed(self._rows[key].sides)]
        return rows

    def _last(self, key: str) -> str:
        """The last row of a row's subtree."""
        while sides := self._rows[key].sides:
            key = sides[-1]
        return key

    def _within(self, key: str, root: str) -> bool:
        """Whether a listed row is `root` or under it: a parent there would list the row under itself."""
        while key:
            if key == root:
                return True
            key = self._rows[key].under
        return False

    def _redraw(self) -> None:
        """Cut every row again at a new width (1.2 s for 1,200 rows): a taller or shorter list keeps them."""
        if self.scrollable_content_region.width != self._width:
            for key in self._rows:
                self.replace_option_prompt(key, self._fitted(key))
        self.scroll_to_highlight()

    def _fitted(self, key: str) -> Text:
        """The row's lines cut at the list's width: a wrapped line would push the next conversation down."""
        row = self._rows[key]
        indent = f"{' ' * min(row.depth - 1, _INDENTS)}↳ " if row.depth else ""
        self._width = self.scrollable_content_region.width
        width = max(self._width - len(indent), 8)
        fitted = []
        for line in row.lines:
            line = Text(indent).append_text(line.copy())
            line.truncate(width + len(indent), overflow="ellipsis")
            fitted.append(line)
        return Text("\n").join(fitted)
