"""`WatchedList`: the conversations `hotloop watch` has seen, each with its agent, requests and dollars.

Side requests (a title, a summary, a sub-agent) are listed under the conversation they branched
from, theirs under them. Highlighting one puts it on screen (the screen listens for `OptionHighlighted`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.text import Text
from textual.widgets import OptionList
from textual.widgets.option_list import Option

from hotloop.agent.figures import SessionTotals, counted
from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.watch import ConversationInfo


_INDENTS = 6  # the deepest indent: past it, side requests of side requests line up


class WatchedList(OptionList):
    DEFAULT_CSS = """
    WatchedList, WatchedList:focus {
        width: 25%; min-width: 20; max-width: 34; height: 1fr; border: none; border-right: vkey $panel-lighten-2;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._rows: dict[str, tuple[ConversationInfo, Text, Text]] = {}  # the conversation, its two lines

    def update(self, conversation: ConversationInfo, totals: SessionTotals) -> None:
        """Add the conversation, or redraw its lines with its totals so far."""
        title = Text(inert(conversation.title or "(no prompt yet)"), "" if conversation.parent else "bold")
        agent = conversation.agent.partition("/")[0]  # `claude-cli/2.1.332`: the version is in the session's origin
        figures = Text(f"{inert(agent)} · {counted(totals.steps, 'request')} · {totals.cost.short()}", "dim")
        self._rows[conversation.id] = (conversation, title, figures)
        self._redraw()

    def highlight(self, conversation: str) -> None:
        """Highlight the conversation on screen, wherever a redraw has put its row."""
        if conversation in self._rows:
            self.highlighted = self.get_option_index(conversation)

    def on_resize(self) -> None:
        self._redraw()

    def _redraw(self) -> None:
        highlighted = self.highlighted_option.id if self.highlighted_option is not None else None
        self.clear_options()
        self.add_options(self._ordered())
        if highlighted is not None:
            self.highlighted = self.get_option_index(highlighted)
        elif self.option_count:
            self.highlighted = 0

    def _ordered(self) -> list[Option]:
        """Conversations in the order first seen, each followed by its side requests (and theirs), indented."""
        sides: dict[str, list[str]] = {}
        for key, (conversation, *_) in self._rows.items():
            if conversation.parent in self._rows:
                sides.setdefault(conversation.parent, []).append(key)
        # A stack, not recursion: a client can chain side requests as deep as it likes (each branching off the last).
        stack = [
            (key, 0)
            for key, (conversation, *_) in reversed(self._rows.items())
            if conversation.parent not in self._rows
        ]
        rows: list[Option] = []
        while stack:
            key, depth = stack.pop()
            _, *lines = self._rows[key]
            indent = f"{' ' * min(depth - 1, _INDENTS)}↳ " if depth else ""
            rows.append(Option(self._fitted(lines, indent), id=key))
            stack += [(side, depth + 1) for side in reversed(sides.get(key, ()))]
        return rows

    def _fitted(self, lines: list[Text], indent: str = "") -> Text:
        """The lines cut at the list's width: a wrapped line would push the next conversation down."""
        width = max(self.scrollable_content_region.width - len(indent), 8)
        fitted = []
        for line in lines:
            line = Text(indent).append_text(line.copy())
            line.truncate(width + len(indent), overflow="ellipsis")
            fitted.append(line)
        return Text("\n").join(fitted)
