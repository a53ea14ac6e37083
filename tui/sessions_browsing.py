"""`SessionsBrowser`: the saved sessions from the main screen: the sidebar (ctrl+b) and what a pick does.

A part of `MainScreen`, handed the screen (the sidebar mounts there, its workers are the
screen's), the session, the palette, `say`, and what starting over and naming the provider
mean on it. A picked session opens read-only, replays, or is continued here in place of the
conversation on screen (whose log stays). The sidebar is mounted on first use, and the
sessions are read in a thread: the first paint needs neither.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path

from textual.screen import Screen

from hotloop import InputError
from hotloop.core.session import Session
from hotloop.tui.render import Palette
from hotloop.tui.say import Say
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.transcript import Transcript


class SessionsBrowser:
    def __init__(
        self,
        screen: Screen[None],
        session: Session,
        palette: Callable[[], Palette],
        say: Say,
        *,
        start_over: Callable[[], None],
        show_provider: Callable[[], None],
    ) -> None:
        self._screen = screen
        self._session = session
        self._palette = palette
        self._say = say
        self._start_over = start_over
        self._show_provider = show_provider

    async def toggle(self) -> None:
        screen = self._screen
        sidebars = screen.query(SessionsSidebar)
        if sidebars:
            sidebar = sidebars.first()
        else:
            sidebar = SessionsSidebar()
            await screen.mount(sidebar, before=screen.query_one(Transcript))
        sidebar.toggle_class("-open")
        if sidebar.has_class("-open"):
            self._load()
            sidebar.opened()
        else:
            sidebar.closed()
            screen.query_one(PromptInput).focus()

    def list_again(self) -> None:
        """The saved sessions changed: the open sidebar lists them again."""
        sidebars = self._screen.query(SessionsSidebar)
        if sidebars and sidebars.first().has_class("-open"):
            self._load()

    def _load(self) -> None:
        self._screen.run_worker(self._read, group="sessions", exclusive=True, thread=True, exit_on_error=False)

    def _read(self) -> None:
        from hotloop import paths
        from hotloop.sessions.store import list_sessions

        sessions = list_sessions(paths.sessions_dir()).sessions

        def show() -> None:
            # Looked up on the UI thread, where the DOM changes; gone if the app closed while the folder was read.
            for sidebar in self._screen.query(SessionsSidebar):
                sidebar.show(sessions)

        app = self._screen.app
        if app.is_running:
            app.call_from_thread(show)

    def picked(self, message: SessionsSidebar.Picked) -> None:
        work: Callable[[], Awaitable[None]] = partial(self._open, message.path, message.action)
        self._screen.run_worker(work, group="sessions", exclusive=True, exit_on_error=False)

    async def _open(self, path: Path, action: str) -> None:
        from hotloop.sessions.store import SessionError, read_session

        try:
            session = await asyncio.to_thread(read_session, path)
        except SessionError as error:
            self._say(str(error), severity="error")
            return
        for warning in session.warnings:
            self._say(warning, severity="warning")
        app = self._screen.app
        if action == "resume":
            await self.resume_here(path)
        elif action == "replay":
            from hotloop.tui.screens.replay import ReplayScreen

            await app.push_screen(ReplayScreen(session, self._palette, 1.0, leave=app.pop_screen))
        else:
            from hotloop.tui.screens.session_view import SessionView

            await app.push_screen(SessionView(session, self._palette))

    async def resume_here(self, path: Path) -> None:
        """Leave the current conversation (its log stays) and go on with the picked one."""
        from hotloop.providers.errors import ProviderError

        if self._session.agent is None:
            self._say("not connected yet", severity="warning")
            return
        log = self._session.log
        if log is not None and log.path == path:
            self._say("that is this session")
            return
        self._start_over()
        try:
            await self._session.continue_session(path)
        except (InputError, ProviderError) as error:
            self._say(f"{error}: starting a new conversation instead", severity="error", timeout=10)
            self._session.new_conversation()
        self._show_provider()
        self._screen.query_one(PromptInput).focus()
