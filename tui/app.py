"""The hotloop app: a streaming transcript, live tool panes, usage, and switching inside the app.

The app is a frontend on `core.session.Session`: it draws the session's event stream and
what the session reports of its server, and sends it prompts and switches. It never talks
to a provider itself. The engine (openai, aiohttp) is imported after the first paint, in a
thread, so the window appears at once.

The app holds the session, its connection, the theme and the screens; the live session is
drawn by `MainScreen` (`screens/main.py`), which handles what is typed there.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen, ScreenResultType
from textual.theme import Theme
from textual.worker import Worker, WorkerCancelled, WorkerFailed, WorkerState

from hotloop import InputError
from hotloop.agent.events import AgentEvent
from hotloop.config import Choice, Config
from hotloop.core.session import Session, SessionOptions
from hotloop.core.switch_menu import SwitchOption
from hotloop.tui.commands import SwitchCommands
from hotloop.tui.render import Palette, theme_palette
from hotloop.tui.screens.main import MainScreen
from hotloop.tui.stops import forget_stops, quit_on_stops
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent


RECONNECT_FIRST = 2.0  # seconds before a start provider that can't be reached is asked again, doubling
RECONNECT_MAX = 30.0
QUIT_GRACE = 5.0  # seconds a turn has to end when the app quits mid-turn (a tool's process group to stop)


def _import_engine() -> None:
    """The heavy imports (openai, aiohttp, the simulator, Markdown rendering), done off the UI thread.

    They are not needed for the first paint, but would stall the first request or answer.
    """
    import openai  # noqa: F401

    import hotloop.agent.loop
    import hotloop.core.resumption
    import hotloop.core.routing
    import hotloop.core.runtime  # noqa: F401
    from hotloop.tui.render import warm_up

    warm_up()


def _screenshots_folder() -> Path:
    from platformdirs import user_downloads_path

    from hotloop import paths

    downloads = user_downloads_path()
    if downloads.is_dir():
        return downloads
    folder = paths.data_dir() / "screenshots"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


class HotloopApp(App[None]):
    TITLE = "hotloop"
    COMMANDS = App.COMMANDS | {SwitchCommands}
    # The main screen's stylesheet is loaded with the app's: Textual doesn't load a default screen's CSS_PATH, and
    # a mode's base screen (which it does load) is composed inside the app's start, whose batch drops the first frame.
    CSS_PATH = "screens/main.tcss"
    BINDINGS = [Binding("f1", "help", "Help", tooltip="This help")]

    def __init__(
        self,
        config: Config,
        options: SessionOptions | None = None,
        *,
        workspace: Path | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        super().__init__()
        options = options or SessionOptions()
        if workspace is not None:
            options = replace(options, workspace=workspace)
        # A bad provider, tier or missing key fails here, before the screen takes over.
        self.session = Session(
            config,
            options,
            self.show,
            restored=lambda session: self.main.restored(session),
            ask=lambda request: self.main.ask_approval(request),
        )
        self._palette: Palette | None = None
        self.main = MainScreen(self.session, clock, self.palette, self._retarget)

    def on_mount(self) -> None:
        quit_on_stops(self.exit)
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        # The engine's imports wait for the main screen's first paint, so they can't delay it.
        self.main.call_after_refresh(self.connect)

    def get_default_screen(self) -> MainScreen:
        return self.main

    @property
    def agent(self) -> Agent | None:
        return self.session.agent

    @property
    def workspace(self) -> Path:
        return self.session.workspace

    def show(self, event: AgentEvent) -> None:
        """Every event of the session, once its log has it: drawn on the main screen."""
        self.main.show(event)

    def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None:
        self.main.say(message, severity, timeout)

    # -- theme ---------------------------------------------------------------------------

    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = theme_palette(self)
        return self._palette

    def _theme_changed(self, theme: Theme) -> None:
        self._palette = None
        for transcript in self.query(Transcript):
            transcript.rerender()

    # -- connecting ----------------------------------------------------------------------

    @work(exclusive=True, group="connect", exit_on_error=False)
    async def connect(self) -> None:
        """Open the session; a server that can't be reached yet is asked again, the wait shown, until it answers.

        Meanwhile /provider, /model, /tier and the palette pick another target, which starts this again.
        """
        from hotloop.providers.errors import ProviderError

        await asyncio.to_thread(_import_engine)
        status = self.main.status
        wait = RECONNECT_FIRST
        while True:
            try:
                # Any other error is shown by on_worker_state_changed, and the app stays open.
                await self.session.open()
                break
            except ProviderError as error:
                if not error.retryable:
                    raise
                if wait == RECONNECT_FIRST:
                    self.say(f"{error}: trying again · /provider or ctrl+p picks another", "warning", timeout=10)
                for left in range(int(wait), 0, -1):
                    status.state = f"connecting… retry in {left} s"
                    await asyncio.sleep(1)
                status.state = "connecting…"
                wait = min(wait * 2, RECONNECT_MAX)
        self.main.show_provider()
        self.session.server.follow(self.main.server_report)
        status.state = "ready"
        self.main.next_prompt()

    def _retarget(self, choice: Choice) -> None:
        """The session isn't open (its server unreachable): open it on `choice` instead."""
        try:
            self.session.retarget(choice)
        except InputError as error:
            self.say(str(error), severity="error")
            return
        self.main.status.state = "connecting…"
        self.main.show_target(choice)
        self.connect()

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """The connection failed for good: said, and the app stays open to pick another target."""
        if not self.main.query(StatusBar):
            return  # the app is closing: its workers are cancelled after its screen is gone
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.main.status.state = "not connected"
            self.say(str(event.worker.error) or type(event.worker.error).__name__, severity="error", timeout=10)

    def on_resize(self, event: events.Resize) -> None:
        self.main.fit_server_panel(event.size.width)  # also while another screen is over it

    # -- the palette and the screens -----------------------------------------------------

    async def switch_options(self) -> list[SwitchOption]:
        """Every tier, provider and model, each with what switching to it would cost now."""
        return await self.session.switch_options()

    def switch_to(self, choice: Choice) -> Worker[None]:
        return self.main.switch_to(choice)

    def get_system_commands(self, screen: Screen[ScreenResultType]) -> list[SystemCommand]:
        return [
            *super().get_system_commands(screen),
            *self.main.system_commands(),
            SystemCommand("Keys and commands", "Show the help", self.action_help),
        ]

    def action_help(self) -> None:
        from hotloop.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    def deliver_screenshot(
        self, filename: str | None = None, path: str | None = None, time_format: str | None = None
    ) -> str | None:
        """The palette's Screenshot: into the Downloads folder, or hotloop's data folder where there is none.

        Textual saves into Downloads only, and fails where that folder doesn't exist (a server, a container).
        """
        return super().deliver_screenshot(filename, path or str(_screenshots_folder()), time_format)

    async def on_unmount(self) -> None:
        forget_stops()
        # Quitting mid-turn ends the turn as Esc does; the screen's going cancelled it, and its end (`cancelled`)
        # must reach the log before the log closes.
        turns = [worker for worker in self.workers if worker.group == "turn" and not worker.is_finished]
        for worker in turns:
            worker.cancel()
            with contextlib.suppress(WorkerCancelled, WorkerFailed, TimeoutError):
                await asyncio.wait_for(worker.wait(), QUIT_GRACE)
        await self.session.close()
