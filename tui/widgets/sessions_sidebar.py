"""`SessionsSidebar`: the saved sessions, newest first, under a search box.

Typing searches. The search box has the focus when the sidebar opens, and any printable key
typed on the list goes back to it, so a word typed never fires an action. The list's own
keys act only while the list has the focus, and its footer line names them: Enter opens a
session read-only, `r` replays it, `c` continues it here. Forks are listed under their parent.
The search is cleared when the sidebar closes, so a hidden filter never hides a session the next time.

The app calls `opened()` after showing the sidebar and `closed()` after hiding it.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual import events
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from hotloop.agent.figures import counted, short_model
from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.sessions.store import SessionSummary

SEARCH_HINT = "type to search · ↓ or Enter: the list"
LIST_HINT = "Enter view · c continue here · r replay · type to search"


class SessionList(OptionList):
    """The sessions. `c` and `r` act on the highlighted one; every other printable key is a search."""

    BINDINGS = [
        Binding("enter", "select", "View", tooltip="Open the session read-only"),
        Binding("c", "pick('resume')", "Continue here", tooltip="Continue the session here, in place of this one"),
        Binding("r", "pick('replay')", "Replay", tooltip="Replay the session as it happened"),
    ]
    ACTION_KEYS = frozenset({"c", "r"})

    class Searched(Message):
        """A key typed on the list that belongs in the search box: a character, or None for backspace."""

        def __init__(self, character: str | None) -> None:
            super().__init__()
            self.character = character

    def on_key(self, event: events.Key) -> None:
        if event.key in self.ACTION_KEYS:
            return  # the binding acts
        if event.key == "backspace" or (event.is_printable and event.character):
            # Stopped here, the key never reaches a binding: typing on the list can't fire anything.
            event.stop()
            event.prevent_default()
            self.post_message(self.Searched(None if event.key == "backspace" else event.character))

    def action_pick(self, action: str) -> None:
        if self.highlighted is not None:
            option = self.get_option_at_index(self.highlighted)
            if option.id:
                self.post_message(SessionsSidebar.Picked(Path(option.id), action))


class SessionsSidebar(Vertical):
    DEFAULT_CSS = """
    SessionsSidebar { dock: left; width: 44; display: none; background: $panel; padding: 0 1; }
    SessionsSidebar.-open { display: block; }
    SessionsSidebar > Static { color: $text-muted; height: 1; }
    SessionsSidebar > #hint { height: auto; }
    SessionsSidebar > Input { margin-bottom: 1; }
    SessionsSidebar > SessionList { height: 1fr; border: none; background: $panel; }
    """
    BINDINGS = [Binding("down", "to_list", "The list", show=False)]

    class Picked(Message):
        """The user picked a session: to `open` it read-only, `replay` it, or `resume` it."""

        def __init__(self, path: Path, action: str) -> None:
            super().__init__()
            self.path = path
            self.action = action

    def __init__(self) -> None:
        super().__init__()
        self._sessions: list[SessionSummary] = []

    def compose(self) -> ComposeResult:
        yield Static("Sessions", id="heading")
        yield Input(placeholder="search prompts, ids, models", id="search")
        yield SessionList(id="sessions")
        yield Static(SEARCH_HINT, id="hint")

    @property
    def search(self) -> Input:
        return self.query_one("#search", Input)

    def opened(self) -> None:
        """The sidebar was just shown: typing goes to the search box."""
        self.search.focus()

    def closed(self) -> None:
        """The sidebar was just hidden: its search is forgotten."""
        self.search.clear()

    def show(self, sessions: list[SessionSummary]) -> None:
        self._sessions = sessions
        self._list()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._list()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_to_list()

    def action_to_list(self) -> None:
        self.query_one(SessionList).focus()

    def on_session_list_searched(self, event: SessionList.Searched) -> None:
        event.stop()
        search = self.search
        search.focus()
        search.cursor_position = len(search.value)
        if event.character is None:
            search.action_delete_left()
        else:
            search.insert_text_at_cursor(event.character)

    def on_descendant_focus(self, event: events.DescendantFocus) -> None:
        self.query_one("#hint", Static).update(LIST_HINT if isinstance(event.widget, SessionList) else SEARCH_HINT)

    def _list(self) -> None:
        from hotloop.sessions.fork import under_parents

        search = self.search.value.strip()
        shown = [s for s in self._sessions if not search or s.matches(search)]
        total = counted(len(self._sessions), "session")
        self.query_one("#heading", Static).update(
            f"Sessions · {len(shown)} of {total}" if search else f"Sessions · {total}"
        )
        options = self.query_one(SessionList)
        options.clear_options()
        if not shown:
            empty = f"no session matches {search!r}" if search else "no sessions yet"
            options.add_option(Option(Text(inert(empty), style="dim"), disabled=True))
        for session, depth in under_parents(shown):
            started = datetime.fromtimestamp(session.started).strftime("%b %d %H:%M")
            # A fork sits under its parent; one whose parent isn't listed says whose fork it is.
            indent = f"{'  ' * (depth - 1)}↳ " if depth else ""
            orphan = f"(fork of {session.parent}) " if session.parent and not depth else ""
            # Everything but the time comes from the log: a model's title, a prompt.
            label = Text(
                inert(
                    f"{indent}{started} · {session.id} · {counted(session.turns, 'turn')}"
                    f" · {short_model(session.model)}\n"
                ),
                style="dim",
            )
            label.append(inert(f"{' ' * len(indent)}{orphan}{session.title or '(no prompt)'}"))
            options.add_option(Option(label, id=str(session.path)))
        if shown:
            options.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.Picked(Path(event.option.id), "open"))
