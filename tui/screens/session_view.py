"""`SessionView`: a saved session, drawn read-only from its log."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static

from hotloop.agent.figures import short_model
from hotloop.agent.text import inert
from hotloop.sessions.store import LoggedSession
from hotloop.tui.render import Palette
from hotloop.tui.widgets.transcript import Transcript


class SessionView(Screen[None]):
    DEFAULT_CSS = """
    SessionView > #title { dock: top; height: 1; background: $panel; padding: 0 1; color: $text-muted; }
    """
    BINDINGS = [Binding("escape", "app.pop_screen", "Back"), Binding("f3", "waterfall", "Waterfall")]

    def __init__(self, session: LoggedSession, palette: Callable[[], Palette]) -> None:
        super().__init__()
        self.session = session
        self.palette = palette

    def compose(self) -> ComposeResult:
        header = self.session.header
        started = datetime.fromtimestamp(header.started).strftime("%Y-%m-%d %H:%M")
        skipped = len(self.session.warnings)
        note = f" · {skipped} unreadable line{'s' if skipped != 1 else ''} skipped" if skipped else ""
        title = f"session {header.id} · {started} · {header.provider} · {short_model(header.model)} · read-only{note}"
        yield Static(inert(title), id="title", markup=False)
        # A finished session's time stands still: its last event is "now".
        last = self.session.events[-1].ts if self.session.events else header.started
        yield Transcript(lambda: last, self.palette, self.session.header.pricer)
        yield Footer()

    def on_mount(self) -> None:
        self.query_one(Transcript).fast_forward(self.session.events, finished=True)

    def action_waterfall(self) -> None:
        """Where the time of the session on screen went (not the live one's)."""
        from hotloop.tui.screens.waterfall import WaterfallScreen

        self.app.push_screen(WaterfallScreen(self.session.events, self.session.header.pricer()))
