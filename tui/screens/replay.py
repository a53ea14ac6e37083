"""`ReplayScreen`: a saved session redrawn in the live widgets, at the pace it was recorded.

Events go through the same `Transcript` as a live session: the answer streams, tool panes
run side by side with their timers, usage strips fill. The transcript's clock is the
recording's, so timers show recorded time. Nothing is sent to a provider and no tool runs.
"""

from __future__ import annotations

from collections.abc import Callable

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Footer, Static
from textual.worker import Worker

from hotloop.agent.events import AgentEvent
from hotloop.agent.text import inert
from hotloop.sessions.replay import Replay
from hotloop.sessions.store import LoggedSession
from hotloop.tui.render import Palette
from hotloop.tui.widgets.transcript import Transcript


class ReplayScreen(Screen[None]):
    DEFAULT_CSS = """
    ReplayScreen > #title { dock: top; height: 1; background: $panel; padding: 0 1; color: $text-muted; }
    """
    # Priority: the transcript would take the arrows and space for scrolling.
    BINDINGS = [
        Binding("space", "toggle_pause", "Pause/play", priority=True),
        Binding("right", "next_step", "Next step", priority=True),
        Binding("left", "previous_step", "Previous step", priority=True),
        Binding("plus,equals_sign", "speed(2)", "Faster", priority=True),
        Binding("minus", "speed(0.5)", "Slower", priority=True),
        Binding("f3", "waterfall", "Waterfall"),
        Binding("escape,q", "leave", "Back"),
    ]

    def __init__(
        self, session: LoggedSession, palette: Callable[[], Palette], speed: float, leave: Callable[[], object]
    ) -> None:
        super().__init__()
        self.session = session
        self.palette = palette
        self.replay = Replay(session.events, speed or 1.0)
        self._instant = speed == 0  # `--speed 0`: drawn at once; a step or a speed key plays on at the replay's speed
        self._leave = leave
        self._player: Worker[None] | None = None
        self._left = False

    def compose(self) -> ComposeResult:
        yield Static(id="title", markup=False)
        yield Transcript(self.replay.recorded_time, self.palette, self.session.header.pricer)
        yield Footer()

    @property
    def transcript(self) -> Transcript:
        return self.query_one(Transcript)

    def on_mount(self) -> None:
        self.set_interval(0.25, self._show_state)
        if self._instant:
            self._draw_jump(len(self.replay.timeline))
        else:
            # Start once the screen is up, so the first events aren't rushed out during the first paint.
            self.call_after_refresh(self._start)
        self._show_state()

    def _start(self) -> None:
        if not self._left:  # left before the first refresh: a replay started now would draw on a screen being torn down
            self._player = self.play()

    @property
    def drawing(self) -> bool:
        """False once the user left or the app is closing: a burst or a tick already under way would draw on
        widgets being torn down."""
        return not self._left and self.is_attached and self.app.is_running

    @work(exclusive=True, group="replay")
    async def play(self) -> None:
        await self.replay.play(self.deliver)
        if self.drawing:
            self._finish()

    def deliver(self, event: AgentEvent) -> None:
        """One event of the log, through the same path a live event takes."""
        if self.drawing:
            self.transcript.apply(event)

    def _finish(self) -> None:
        """The end of the log: a step it leaves open was cut short when the session stopped."""
        self.transcript.fast_forward([], finished=True)
        self._show_state()

    def _draw_jump(self, target: int) -> None:
        jump = self.replay.jump(target)
        if jump.restart:
            self.transcript.clear()
        self.transcript.fast_forward(jump.events)
        if self.replay.done:
            self._finish()
        elif self._player is None or self._player.is_finished:
            self._player = self.play()
        self._show_state()

    def _show_state(self) -> None:
        if not self.drawing:
            return
        replay, header = self.replay, self.session.header
        steps = len(replay.timeline.step_starts)
        state = "done" if replay.done else "paused" if replay.paused else "playing"
        pace = "at once" if self._instant else f"{replay.speed:g}×"
        title = (
            f"replay · session {header.id} · {pace} · step {replay.timeline.steps_before(replay.position)} "
            f"of {steps} · {state} · space pause · ←/→ steps · +/- speed"
        )
        self.query_one("#title", Static).update(inert(title))  # the id comes from the log

    def action_toggle_pause(self) -> None:
        self.replay.toggle_pause()
        self._show_state()

    def action_next_step(self) -> None:
        self._instant = False
        self._draw_jump(self.replay.timeline.next_step(self.replay.position))

    def action_previous_step(self) -> None:
        self._instant = False
        self._draw_jump(self.replay.timeline.previous_step(self.replay.position))

    def action_speed(self, factor: float) -> None:
        self._instant = False
        self.replay.set_speed(self.replay.speed * factor)
        self._show_state()

    def action_waterfall(self) -> None:
        from hotloop.tui.screens.waterfall import WaterfallScreen

        self.app.push_screen(WaterfallScreen(self.session.events, self.session.header.pricer()))

    def action_leave(self) -> None:
        self._left = True
        self.workers.cancel_group(self, "replay")
        self._leave()
