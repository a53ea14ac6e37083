"""`hotloop watch` in the terminal: an app on the pass-through's traffic; it runs no agent and no tool itself.

The pass-through is started inside the app's event loop (its handlers call the screen's
`deliver` directly, no thread in between) once the first frame is up, and closed when the app ends.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import App
from textual.binding import Binding

from hotloop.agent.events import AgentEvent, Notice
from hotloop.agent.text import inert
from hotloop.tui.render import Palette, theme_palette
from hotloop.tui.screens.watch import WatchScreen
from hotloop.tui.stops import forget_stops, quit_on_stops
from hotloop.watch import HOSTED

if TYPE_CHECKING:
    from hotloop.config import Config
    from hotloop.core.telemetry import Telemetry
    from hotloop.watch import Watch


class WatchApp(App[None]):
    TITLE = "hotloop watch"

    def __init__(self, watch: Watch, host: str, port: int, config: Config | None = None, otel: bool = False) -> None:
        """`config`: the settings a self-hosted upstream's server panel is asked with (None: no panel), and where
        spans go (with `otel`, `--otel`: the local collector if none is configured)."""
        super().__init__()
        self.watch_ = watch
        self.config = config
        self.otel = otel
        self.telemetry: Telemetry | None = None
        self.host, self.port = host, port
        self._palette: Palette | None = None
        self.url = ""

    def palette(self) -> Palette:
        if self._palette is None:
            self._palette = theme_palette(self)
        return self._palette

    async def on_mount(self) -> None:
        quit_on_stops(self.exit)
        self.url = await self.watch_.start(self.host, self.port)
        # The events' clock (wall time): a step's wait and a running call tick against their `ts`.
        screen = WatchScreen((self.url, str(self.watch_.upstream)), time.time, self.palette)
        await self.push_screen(screen)
        if self.config is not None:
            from hotloop.core.telemetry import start_telemetry

            # A failed export is one line, as the pass-through's own are: a toast.
            self.telemetry = start_telemetry(
                self.config, self.otel, lambda e: self._deliver(screen, "", e), lambda: None
            )
        self.watch_.sink = lambda conversation, event: self._deliver(screen, conversation, event)
        if self.config is not None and self.watch_.upstream != HOSTED:
            self._follow_server(screen, self.config)

    @work(exclusive=True, group="server")
    async def _follow_server(self, screen: WatchScreen, config: Config) -> None:
        """What the upstream says of itself (vLLM, llama.cpp, SGLang, the simulator), for the panel, until the end."""
        from hotloop.config import ProviderSettings, Target
        from hotloop.core.runtime import Runtime
        from hotloop.core.server_watch import ServerFollower
        from hotloop.providers.errors import ProviderError

        target = self.watch_.upstream.openai
        settings = ProviderSettings(target.name, "openai", base_url=f"{target.url}/v1")
        runtime = Runtime(config)
        try:
            provider = await runtime.connect(Target(settings, None))
            follower = ServerFollower(lambda: runtime, lambda: provider, lambda: screen.answering > 0)
            screen.nudge = follower.nudge
            self.watch_.residency = follower.residency
            await follower.run(screen.server_report)
        except ProviderError:
            screen.server_report(None)  # a server that doesn't describe itself: no panel, as in a session
        finally:
            await runtime.aclose()

    def on_resize(self, event: events.Resize) -> None:
        if isinstance(self.screen, WatchScreen):
            self.screen.fit_server_panel(event.size.width)

    def _deliver(self, screen: WatchScreen | None, conversation: str, event: AgentEvent) -> None:
        """A conversation's event to the screen (None: it is gone) and its spans; the pass-through's own lines (no
        conversation) as toasts."""
        info = self.watch_.conversations.get(conversation)
        if info is not None:
            if screen is not None:
                screen.deliver(info, event)
            if self.telemetry is not None:
                self.telemetry.stream(conversation, info.pricer).observe(event)
        elif isinstance(event, Notice):
            self.notify(inert(event.message), severity="error" if event.level == "error" else "warning", markup=False)

    def action_help(self) -> None:
        from hotloop.tui.screens.watch_help import WatchHelp

        keys = [(b.key, b.tooltip or b.description) for b in WatchScreen.BINDINGS if isinstance(b, Binding)]
        self.push_screen(WatchHelp(self.url, [*keys, ("↑ ↓", "Another conversation (in the list)")]))

    async def on_unmount(self) -> None:
        forget_stops()
        # Closing ends the steps still waiting for their tools: their events go to the logs and spans, the screen
        # being torn down has nothing left to draw them on.
        self.watch_.sink = lambda conversation, event: self._deliver(None, conversation, event)
        await self.watch_.aclose()
        if self.telemetry is not None:
            await self.telemetry.close()
