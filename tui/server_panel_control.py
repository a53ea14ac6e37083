"""`ServerPanelControl`: the server panel beside what a screen draws, for a server that describes itself.

A part of `MainScreen` and `WatchScreen`, handed the screen it mounts the panel on and the widget
the panel docks beside. The panel is mounted at the first report and shown from the start only
where the terminal keeps room enough beside it; F2 shows or hides it anyway, and once the user
chose, a resize no longer decides.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widget import Widget

if TYPE_CHECKING:
    from hotloop.core.server_watch import ServerReport

SERVER_PANEL_MIN_WIDTH = 120


class ServerPanelControl:
    def __init__(self, screen: Screen[None], beside: Callable[[], Widget]) -> None:
        self._screen = screen
        self._beside = beside
        self._wanted: bool | None = None  # the user's F2, once pressed

    def report(self, report: ServerReport | None) -> None:
        """Show the server panel for a server that describes itself (vLLM, SGLang, the simulator, …)."""
        from hotloop.tui.widgets.server_panel import ServerPanel

        if not (self._screen.is_attached and self._screen.app.is_running):
            return  # a scrape answered as the app closes: the widgets it would dock beside are being torn down
        panels = self._screen.query(ServerPanel)
        if report is None:
            panels.remove()
            return
        if panels:
            panels.first().report = report
            return
        panel = ServerPanel(id="server")
        panel.report = report
        wanted = self._wanted
        panel.display = wanted if wanted is not None else self._screen.app.size.width >= SERVER_PANEL_MIN_WIDTH
        self._screen.mount(panel, before=self._beside())

    def fit(self, width: int) -> None:
        """The terminal is `width` wide now: the panel shows if there is room, unless the user chose."""
        from hotloop.tui.widgets.server_panel import ServerPanel

        if self._wanted is None:
            for panel in self._screen.query(ServerPanel):
                panel.display = width >= SERVER_PANEL_MIN_WIDTH

    def toggle(self) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        for panel in self._screen.query(ServerPanel):
            panel.display = self._wanted = not panel.display
