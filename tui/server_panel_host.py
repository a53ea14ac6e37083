"""`ServerPanelHost`: a screen that shows the server panel beside what it draws, for a server that describes itself.

A base of `MainScreen` and `WatchScreen`. The panel is mounted at the first report and shown
from the start only where the screen keeps room enough beside it; F2 shows or hides it anyway,
and once the user chose, a resize no longer decides.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from textual.screen import Screen
from textual.widget import Widget

if TYPE_CHECKING:
    from hotloop.core.server_watch import ServerReport

SERVER_PANEL_MIN_WIDTH = 120


class ServerPanelHost(Screen[None]):
    _server_panel_wanted: bool | None = None  # the user's F2, once pressed

    def panel_beside(self) -> Widget:
        """The widget the panel is docked beside."""
        raise NotImplementedError

    def server_report(self, report: ServerReport | None) -> None:
        """Show the server panel for a server that describes itself (vLLM, SGLang, the simulator, …)."""
        from hotloop.tui.widgets.server_panel import ServerPanel

        panels = self.query(ServerPanel)
        if report is None:
            panels.remove()
            return
        if panels:
            panels.first().report = report
            return
        panel = ServerPanel(id="server")
        panel.report = report
        wanted = self._server_panel_wanted
        panel.display = wanted if wanted is not None else self.app.size.width >= SERVER_PANEL_MIN_WIDTH
        self.mount(panel, before=self.panel_beside())

    def fit_server_panel(self, width: int) -> None:
        """The terminal is `width` wide now: the panel shows if there is room, unless the user chose."""
        from hotloop.tui.widgets.server_panel import ServerPanel

        if self._server_panel_wanted is None:
            for panel in self.query(ServerPanel):
                panel.display = width >= SERVER_PANEL_MIN_WIDTH

    def action_toggle_server(self) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        for panel in self.query(ServerPanel):
            panel.display = self._server_panel_wanted = not panel.display
