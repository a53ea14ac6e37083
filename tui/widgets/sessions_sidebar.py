"""`SessionsSidebar`: the saved sessions, newest first, with a search box.

Enter opens a session read-only, `r` replays it, `c` continues it here.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import Input, OptionList, Static
from textual.widgets.option_list import Option

from hotloop.agent.figures import short_model
from hotloop.agent.text import inert

if TYPE_CHECKING:
    from hotloop.sessions.store import SessionSummary


class SessionsSidebar(Vertical):
    DEFAULT_CSS = """
    SessionsSidebar { dock: left; width: 44; display: none; background: $panel; padding: 0 1; }
    SessionsSidebar.-open { display: block; }
    SessionsSidebar > Static { color: $text-muted; height: 2; }
    SessionsSidebar > Input { margin-bottom: 1; }
    SessionsSidebar > OptionList { height: 1fr; border: none; background: $panel; }
    """
    BINDINGS = [Binding("r", "pick('replay')", "Replay"), Binding("c", "pick('resume')", "Continue")]

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
        yield Static("Sessions · Enter opens (read-only)\nr replays · c continues it here")
        yield Input(placeholder="search prompts, ids, models", id="search")
        yield OptionList(id="sessions")

    def show(self, sessions: list[SessionSummary]) -> None:
        self._sessions = sessions
        self._list()

    def on_input_changed(self, event: Input.Changed) -> None:
        event.stop()
        self._list()

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.query_one(OptionList).focus()

    def _list(self) -> None:
        search = self.query_one(Input).value.strip()
        shown = [s for s in self._sessions if not search or s.matches(search)]
        options = self.query_one(OptionList)
        options.clear_options()
        if not shown:
            empty = f"no session matches {search!r}" if search else "no sessions yet"
            options.add_option(Option(Text(empty, style="dim"), disabled=True))
        for session in shown:
            started = datetime.fromtimestamp(session.started).strftime("%b %d %H:%M")
            # Everything but the time comes from the log: a model's title, a prompt.
            label = Text(
                inert(f"{started} · {session.id} · {session.turns} turns · {short_model(session.model)}\n"), style="dim"
            )
            label.append(inert(session.title or "(no prompt)"))
            options.add_option(Option(label, id=str(session.path)))
        if shown:
            options.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.Picked(Path(event.option.id), "open"))

    def action_pick(self, action: str) -> None:
        options = self.query_one(OptionList)
        if options.highlighted is not None:
            option = options.get_option_at_index(options.highlighted)
            if option.id:
                self.post_message(self.Picked(Path(option.id), action))
