"""`hotloop replay`: an app that only redraws a saved session; it starts no provider and no tool."""

from __future__ import annotations

from textual.app import App

from hotloop.sessions.store import LoggedSession
from hotloop.tui.render import Palette, theme_palette
from hotloop.tui.screens.replay import ReplayScreen


class ReplayApp(App[None]):
    TITLE = "hotloop replay"

    def __init__(self, session: LoggedSession, speed: float) -> None:
        super().__init__()
        self.session = session
        self.speed = speed
        self._palette: Palette | None = None

    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = theme_palette(self)
        return self._palette

    def on_mount(self) -> None:
        self.push_screen(ReplayScreen(self.session, self.palette, self.speed, leave=self.exit))
