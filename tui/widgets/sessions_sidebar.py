"""`SessionsSidebar`: the saved sessions, newest first; Enter opens one, read-only."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from rich.text import Text
from textual.app import ComposeResult
from textual.containers import Vertical
from textual.message import Message
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

if TYPE_CHECKING:
    from hotloop.sessions.store import SessionSummary


class SessionsSidebar(Vertical):
    DEFAULT_CSS = """
    SessionsSidebar { dock: left; width: 44; display: none; background: $panel; padding: 0 1; }
    SessionsSidebar.-open { display: block; }
    SessionsSidebar > Static { color: $text-muted; height: 1; }
    SessionsSidebar > OptionList { height: 1fr; border: none; background: $panel; }
    """

    class Open(Message):
        """The user picked a session to look at."""

        def __init__(self, path: Path) -> None:
            super().__init__()
            self.path = path

    def compose(self) -> ComposeResult:
        yield Static("Sessions · Enter opens (read-only)")
        yield OptionList(id="sessions")

    def show(self, sessions: list[SessionSummary]) -> None:
        options = self.query_one(OptionList)
        options.clear_options()
        if not sessions:
            options.add_option(Option(Text("no sessions yet", style="dim"), disabled=True))
        for session in sessions:
            started = datetime.fromtimestamp(session.started).strftime("%b %d %H:%M")
            label = Text(f"{started} · {session.turns} turns · {session.model}\n", style="dim")
            label.append(" ".join(session.first_prompt.split())[:80] or "(no prompt)")
            options.add_option(Option(label, id=str(session.path)))
        if sessions:
            options.highlighted = 0

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        if event.option.id:
            self.post_message(self.Open(Path(event.option.id)))
