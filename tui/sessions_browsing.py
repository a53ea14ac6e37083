"""`SessionsBrowsing`: the saved sessions from the main screen: the sidebar (ctrl+b) and what a pick does.

A base of `MainScreen`. A picked session opens read-only, replays, or is continued here in
place of the conversation on screen (whose log stays). The sidebar is mounted on first use,
and the sessions are read in a thread: the first paint needs neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from textual import work
from textual.notifications import SeverityLevel
from textual.screen import Screen

from hotloop import InputError
from hotloop.core.session import Session
from hotloop.tui.render import Palette
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.transcript import Transcript


class SessionsBrowsing(Screen[None]):
    session: Session
    palette: Callable[[], Palette]

    if TYPE_CHECKING:

        def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None: ...
        def start_over(self) -> None: ...
        def show_provider(self) -> None: ...

    async def action_toggle_sessions(self) -> None:
        sidebars = self.query(SessionsSidebar)
        if sidebars:
            sidebar = sidebars.first()
        else:
            sidebar = SessionsSidebar()
            await self.mount(sidebar, before=self.query_one(Transcript))
        sidebar.toggle_class("-open")
        if sidebar.has_class("-open"):
            self.load_sessions()
            sidebar.opened()
        else:
            sidebar.closed()
            self.query_one(PromptInput).focus()

    def list_sessions_again(self) -> None:
        """The saved sessions changed: the open sidebar lists them again."""
        sidebars = self.query(SessionsSidebar)
        if sidebars and sidebars.first().has_class("-open"):
            self.load_sessions()

    @work(exclusive=True, group="sessions", thread=True, exit_on_error=False)
    def load_sessions(self) -> None:
        from hotloop import paths
        from hotloop.sessions.store import list_sessions

        sessions = list_sessions(paths.sessions_dir()).sessions

        def show() -> None:
            # Looked up on the UI thread, where the DOM changes; gone if the app closed while the folder was read.
            for sidebar in self.query(SessionsSidebar):
                sidebar.show(sessions)

        if self.app.is_running:
            self.app.call_from_thread(show)

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def on_sessions_sidebar_picked(self, message: SessionsSidebar.Picked) -> None:
        from hotloop.sessions.store import SessionError, read_session

        try:
            session = await asyncio.to_thread(read_session, message.path)
        except SessionError as error:
            self.say(str(error), severity="error")
            return
        for warning in session.warnings:
            self.say(warning, severity="warning")
        if message.action == "resume":
            await self.resume_here(message.path)
        elif message.action == "replay":
            from hotloop.tui.screens.replay import ReplayScreen

            await self.app.push_screen(ReplayScreen(session, self.palette, 1.0, leave=self.app.pop_screen))
        else:
            from hotloop.tui.screens.session_view import SessionView

            await self.app.push_screen(SessionView(session, self.palette))

    async def resume_here(self, path: Path) -> None:
        """Leave the current conversation (its log stays) and go on with the picked one."""
        from hotloop.providers.errors import ProviderError

        if self.session.agent is None:
            self.say("not connected yet", severity="warning")
            return
        log = self.session.log
        if log is not None and log.path == path:
            self.say("that is this session")
            return
        self.start_over()
        try:
            await self.session.continue_session(path)
        except (InputError, ProviderError) as error:
            self.say(f"{error}: starting a new conversation instead", severity="error", timeout=10)
            self.session.new_conversation()
        self.show_provider()
        self.query_one(PromptInput).focus()
