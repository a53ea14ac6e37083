"""The hotloop app: a streaming transcript, live tool panes, usage, and switching inside the app.

The app renders the agent's event stream and never talks to a provider itself: it asks the
runtime for one, and the agent for turns. The engine (openai, aiohttp) is imported after
the first paint, in a thread, so the window appears at once.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import Screen
from textual.theme import Theme
from textual.widgets import Footer, OptionList
from textual.worker import Worker, WorkerState

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ProviderSwitched,
    SessionTitled,
    StepFinished,
    StepStarted,
    TurnFinished,
)
from hotloop.agent.figures import SessionTotals
from hotloop.agent.switching import describe_cost
from hotloop.config import AUTO_TIER, Choice, Config, ConfigError, resolve
from hotloop.markdown_blocks import code_blocks
from hotloop.tui.commands import SwitchCommands
from hotloop.tui.items import AnswerItem
from hotloop.tui.render import Palette, theme_palette
from hotloop.slash import Slash, SlashError, parse
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.providers.base import Provider
    from hotloop.resumption import Resumption
    from hotloop.routing import Router
    from hotloop.runtime import Runtime
    from hotloop.sessions.log import SessionLog


SERVER_PANEL_MIN_WIDTH = 120


class SwitchOption(NamedTuple):
    title: str
    help: str
    choice: Choice
    unavailable: str | None = None


def _import_engine() -> None:
    """The heavy imports (openai, aiohttp, the simulator, Markdown rendering), done off the UI thread.

    They are not needed for the first paint, but would stall the first request or answer.
    """
    import hotloop.agent.loop  # noqa: F401
    import hotloop.runtime  # noqa: F401
    import openai  # noqa: F401
    from hotloop.tui.render import warm_up

    warm_up()


class HotloopApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "hotloop"
    COMMANDS = App.COMMANDS | {SwitchCommands}
    BINDINGS = [
        Binding("escape", "cancel_turn", "Cancel turn"),
        Binding("ctrl+n", "new_conversation", "New"),
        Binding("ctrl+b", "toggle_sessions", "Sessions"),
        Binding("ctrl+o", "copy_answer", "Copy answer"),
        Binding("f2", "toggle_server", "Server"),
        Binding("f3", "waterfall", "Waterfall"),
        Binding("f1", "help", "Help"),
        Binding("question_mark", "help", "Help", show=False),
    ]

    def __init__(
        self,
        config: Config,
        choice: Choice,
        *,
        workspace: Path | None = None,
        clock: Callable[[], float] = time.time,
        resume: Path | None = None,
    ) -> None:
        super().__init__()
        self.config = config
        self.choice = choice
        self.resume = resume
        self.workspace = workspace or Path.cwd()
        self.clock = clock
        self.runtime: Runtime | None = None
        self.router: Router | None = None
        self._server_panel_wanted: bool | None = None
        self.agent: Agent | None = None
        self.session_log: SessionLog | None = None
        self.totals = SessionTotals()
        self._palette: Palette | None = None
        self._pending_switch: Choice | None = None
        self._probes: asyncio.Task[dict[str, list[str] | str]] | None = None

    def compose(self) -> ComposeResult:
        # The sessions sidebar is mounted on first use: the first paint doesn't need it.
        yield Transcript(self.clock, self.palette, id="transcript")
        yield PromptInput(id="prompt")
        yield StatusBar(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.theme_changed_signal.subscribe(self, self._theme_changed)
        self.query_one(PromptInput).focus()
        # The engine's imports wait for the first paint, so they can't delay it.
        self.call_after_refresh(self.connect)

    @property
    def transcript(self) -> Transcript:
        return self.query_one("#transcript", Transcript)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def turn_running(self) -> bool:
        return any(worker.group == "turn" and worker.is_running for worker in self.workers)

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
        await asyncio.to_thread(_import_engine)
        from hotloop.resumption import Resumption
        from hotloop.routing import Router
        from hotloop.runtime import Runtime

        self.runtime = Runtime(self.config)
        self.router = Router(self.config, self.runtime, auto=self.choice.tier == AUTO_TIER)
        # Any error here is shown by on_worker_state_changed, and the app stays open.
        resumed = await asyncio.to_thread(Resumption.load, self.resume) if self.resume else None
        target, notes = resumed.target(self.config, self.choice) if resumed else (resolve(self.config, self.choice), [])
        provider = await self.runtime.connect(target)
        self.agent = self._new_agent(provider)
        self._show_provider()
        self._follow_server(provider)
        for warning in self.config.warnings:
            self.emit(Notice(level="warning", message=warning))
        if resumed is not None:
            self._continue(resumed, notes)
        self.status.state = "ready"
        await self.runtime.learn_from_past(self.agent, self.workspace)
        await self.runtime.start_mcp([], self.emit)
        self._probes = asyncio.create_task(self._probe_all())
        # The startup heap never dies: keep the collector off it, and collect old objects rarely.
        gc.collect()
        gc.freeze()
        gc.set_threshold(700, 10, 1_000_000)

    def _new_agent(self, provider: Provider, system: str | None = None, cache_key: str | None = None) -> Agent:
        assert self.router is not None
        agent = self.router.new_agent(provider, emit=self.emit, workspace=self.workspace, system=system,
                                      cache_key=cache_key)
        if self.agent is not None and self.agent.prefetcher is not None and agent.prefetcher is not None:
            agent.prefetcher.predictor = self.agent.prefetcher.predictor  # what was learned outlives the conversation
        return agent

    def _continue(self, resumed: Resumption, notes: list[str]) -> None:
        """Go on with a saved session: its history on screen and in the agent, appending to its log."""
        from hotloop.agent.events import StepFinished as Step
        from hotloop.sessions.log import SessionInUse

        assert self.runtime is not None and self.agent is not None
        try:
            log = self.runtime.reopen_session_log(resumed.path, resumed.session)
        except (SessionInUse, ConfigError) as error:
            self.notify(f"{error}: starting a new conversation instead", severity="error", timeout=10)
            return
        self.workspace, moved = resumed.workspace(self.workspace)
        header, conversation = resumed.session.header, resumed.conversation
        self.agent = self._new_agent(self.agent.provider, header.system or None, header.id)
        self.agent.restore(conversation.messages, conversation.turns, conversation.warmth)
        self.session_log = log
        self.transcript.fast_forward(resumed.session.events)
        for event in resumed.session.events:
            if isinstance(event, Step):
                self.totals.add(event)
        self.status.totals = self.totals
        for event in resumed.opening_events(notes + moved):
            self.emit(event)
        self.notify(f"continuing session {header.id}")

    def _show_provider(self) -> None:
        if self.agent is not None:
            provider = self.agent.provider
            self.status.provider, self.status.model = provider.name, provider.model
            self.status.tier = self._tier_label(provider.name, provider.model)

    def _tier_label(self, provider: str, model: str) -> str | None:
        tier = self.config.tier_of(provider, model)
        return f"auto → {tier}" if self.router is not None and self.router.auto else tier

    @work(exclusive=True, group="server", exit_on_error=False)
    async def _follow_server(self, provider: Provider) -> None:
        """Show the server panel for a server that describes itself (vLLM, SGLang, the simulator, …)."""
        from hotloop.tui.widgets.server_panel import ServerPanel

        assert self.runtime is not None
        info = await self.runtime.server_of(provider)
        panels = self.query(ServerPanel)
        if info is None:
            await panels.remove()
            return
        panel = panels.first() if panels else ServerPanel(id="server")
        if not panels:
            # Shown from the start only where the transcript keeps room enough; F2 shows or hides it anyway.
            wanted = self._server_panel_wanted
            panel.display = wanted if wanted is not None else self.size.width >= SERVER_PANEL_MIN_WIDTH
            await self.mount(panel, before=self.transcript)
        panel.watch_server(provider, info)  # type: ignore[arg-type]

    def on_resize(self) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        if self._server_panel_wanted is None:  # the user hasn't chosen: follow the room there is
            for panel in self.query(ServerPanel):
                panel.display = self.size.width >= SERVER_PANEL_MIN_WIDTH

    def action_waterfall(self) -> None:
        """Where this session's time went, from its log (so it shows what a replay would)."""
        from hotloop.sessions.store import read_session
        from hotloop.tui.screens.waterfall import WaterfallScreen

        if self.session_log is None:
            self.notify("no turns yet", severity="warning")
            return
        self.session_log.flush()
        self.push_screen(WaterfallScreen(read_session(self.session_log.path).events))

    def action_toggle_server(self) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        for panel in self.query(ServerPanel):
            panel.display = self._server_panel_wanted = not panel.display

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            message = str(event.worker.error) or type(event.worker.error).__name__
            if event.worker.group == "connect":
                self.status.state = "not connected"
            self.notify(message, severity="error", timeout=10)
        elif event.worker.group == "turn" and event.state in (WorkerState.SUCCESS, WorkerState.CANCELLED):
            self.status.state = "ready"
            if self._pending_switch is not None:
                choice, self._pending_switch = self._pending_switch, None
                self.switch_to(choice)

    # -- the event stream ----------------------------------------------------------------

    def emit(self, event: AgentEvent) -> None:
        """Every event of the agent goes to the session log and the transcript."""
        if self.session_log is not None:
            self.session_log.write(event)
        self.transcript.apply(event)
        if isinstance(event, StepStarted):
            self.status.state = f"step {event.step}"
        elif isinstance(event, StepFinished):
            self.totals.add(event)
            self.status.totals = self.totals
        elif isinstance(event, ProviderSwitched):
            self.status.provider, self.status.model = event.provider, event.model
            self.status.tier = self._tier_label(event.provider, event.model)
            if self.agent is not None and (event.provider, event.model) != (event.previous_provider, event.previous_model):
                self._follow_server(self.agent.provider)
        elif isinstance(event, SessionTitled):
            self.sub_title = event.title
            self.notify(f"session titled “{event.title}” by {event.model}", timeout=4)
        elif isinstance(event, Notice) and event.level != "info":
            self.notify(event.message, severity="error" if event.level == "error" else "warning", timeout=8)
        elif isinstance(event, TurnFinished):
            self.status.state = "ready"
            # Collect the turn's garbage now and freeze what survives, so later pauses stay short.
            gc.collect()
            gc.freeze()

    # -- prompts and commands -------------------------------------------------------------

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        try:
            slash = parse(message.text)
        except SlashError as error:
            self.notify(str(error), severity="warning")
            return
        if slash is not None:
            self.run_slash(slash)
        elif self.agent is None:
            self.query_one(PromptInput).load_text(message.text)
            self.notify("not connected yet: the prompt is still in the box", severity="warning")
        elif self.turn_running:
            self.query_one(PromptInput).load_text(message.text)
            self.notify("a turn is running: Esc cancels it", severity="warning")
        else:
            self.status.state = "running"
            self.run_turn(message.text)

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def run_turn(self, prompt: str) -> None:
        assert self.agent is not None and self.runtime is not None
        if self.session_log is None:
            # A session is logged from its first turn, so an app opened and closed leaves no empty file.
            self.session_log = self.runtime.open_session_log(self.agent.provider, self.workspace, self.agent.system)
            self.agent.cache_key = self.session_log.id
        self._server_busy(True)
        try:
            assert self.router is not None
            await self.router.turn(self.agent, prompt)
        finally:
            self._server_busy(False)

    def _server_busy(self, busy: bool) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        for panel in self.query(ServerPanel):
            panel.busy = busy

    def run_slash(self, slash: Slash) -> None:
        if slash.name == "/new":
            self.action_new_conversation()
        elif slash.name == "/help":
            self.action_help()
        elif self.agent is None:
            self.notify("not connected yet", severity="warning")
        else:
            self.switch_to(slash.choice(self.agent.provider.name))

    @work(exclusive=True, group="switch", exit_on_error=False)
    async def switch_to(self, choice: Choice) -> None:
        """Use another provider, model or tier from the next turn on; the conversation stays."""
        from hotloop.providers.errors import ProviderError

        if self.agent is None or self.runtime is None:
            self.notify("not connected yet", severity="warning")
            return
        if self.turn_running:
            self._pending_switch = choice
            self.notify("switching after this turn")
            return
        try:
            # The agent reports the switch, with its cost, through the event stream.
            await self.runtime.switch(self.agent, choice)
            if self.router is not None:
                self.router.chose(choice)
                self._show_provider()
        except (ConfigError, ProviderError) as error:
            self.notify(str(error), severity="error")
    async def switch_options(self) -> list[SwitchOption]:
        """Every tier, provider and model, each with what switching to it would cost now."""
        probes = await self._probes if self._probes is not None else {}
        options = []
        for tier in self.config.tiers.values():
            reason = probes.get(tier.provider)
            help_text = f"{tier.provider} · {tier.model}{self._switch_cost(tier.provider, tier.model)}"
            options.append(
                SwitchOption(f"tier: {tier.name}", help_text, Choice(tier=tier.name), reason if isinstance(reason, str) else None)
            )
        routing = self.config.routing
        options.append(SwitchOption(
            f"tier: {AUTO_TIER}", f"the {routing.helper_tier} tier sorts each turn: simple → {routing.auto_simple}, "
            f"complex → {routing.auto_complex}", Choice(tier=AUTO_TIER),
        ))
        for name, settings in self.config.providers.items():
            served = probes.get(name, [])
            if isinstance(served, str):
                options.append(SwitchOption(f"provider: {name}", f"unavailable: {served}", Choice(provider=name), served))
                continue
            where = settings.base_url or f"embedded simulator, {settings.protocol} API"
            for model in settings.models or tuple(served):
                options.append(SwitchOption(f"model: {name} · {model}", f"{where}{self._switch_cost(name, model)}",
                                            Choice(provider=name, model=model)))
        return options

    def _switch_cost(self, provider: str, model: str) -> str:
        if self.agent is None or not self.agent.messages:
            return ""
        if (provider, model) == (self.agent.provider.name, self.agent.provider.model):
            return " · current"
        return " · " + describe_cost(*self.agent.warmth.cost(provider, model))

    async def _probe_all(self) -> dict[str, list[str] | str]:
        assert self.runtime is not None
        names = list(self.config.providers)
        results = await asyncio.gather(*(self.runtime.probe(self.config.providers[n]) for n in names))
        return dict(zip(names, results))

    def get_system_commands(self, screen: Screen) -> list[SystemCommand]:  # type: ignore[override]
        return [
            *super().get_system_commands(screen),
            SystemCommand("Copy last answer", "Copy the last answer's Markdown", self.action_copy_answer),
            SystemCommand("Copy last code block", "Copy the last code block of the last answer", self.action_copy_code),
            SystemCommand("New conversation", "Start over, in a new session log", self.action_new_conversation),
            SystemCommand("Sessions", "Show or hide the saved sessions", self.action_toggle_sessions),
            SystemCommand("Keys and commands", "Show the help", self.action_help),
        ]

    # -- actions -------------------------------------------------------------------------

    def action_cancel_turn(self) -> None:
        if self.turn_running:
            self.workers.cancel_group(self, "turn")

    def _last_answer(self) -> str | None:
        answers = [item for item in self.transcript.history.items if isinstance(item, AnswerItem)]
        return answers[-1].text if answers else None

    def action_copy_answer(self) -> None:
        answer = self._last_answer()
        if answer:
            self.copy_to_clipboard(answer)
            self.notify("copied the last answer")
        else:
            self.notify("no answer to copy yet", severity="warning")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self._last_answer() or "")
        if blocks:
            self.copy_to_clipboard(blocks[-1])
            self.notify("copied the last code block")
        else:
            self.notify("the last answer has no code block", severity="warning")

    def on_history_view_copied(self, message: HistoryView.Copied) -> None:
        self.notify(f"copied the {message.what}")

    def action_new_conversation(self) -> None:
        if self.agent is None or self.runtime is None:
            return
        self._start_over()
        self.agent = self._new_agent(self.agent.provider)
        self.notify("new conversation")

    def _start_over(self) -> None:
        """Stop the turn in flight, close the session log, and clear the screen and the totals."""
        self.workers.cancel_group(self, "turn")
        if self.session_log is not None:
            self.session_log.close()
            self.session_log = None
        self.transcript.clear()
        self.totals = SessionTotals()
        self.status.totals = self.totals

    def action_help(self) -> None:
        from hotloop.tui.screens.help import HelpScreen

        self.push_screen(HelpScreen())

    async def action_toggle_sessions(self) -> None:
        sidebars = self.query(SessionsSidebar)
        if sidebars:
            sidebar = sidebars.first()
        else:
            sidebar = SessionsSidebar()
            await self.mount(sidebar, before=self.transcript)
        sidebar.toggle_class("-open")
        if sidebar.has_class("-open"):
            self.load_sessions()
            sidebar.query_one(OptionList).focus()
        else:
            self.query_one(PromptInput).focus()

    @work(exclusive=True, group="sessions", thread=True)
    def load_sessions(self) -> None:
        from hotloop import paths
        from hotloop.sessions.store import list_sessions

        sessions = list_sessions(paths.sessions_dir()).sessions
        self.call_from_thread(self.query_one(SessionsSidebar).show, sessions)

    @work(exclusive=True, group="sessions", exit_on_error=False)
    async def on_sessions_sidebar_picked(self, message: SessionsSidebar.Picked) -> None:
        from hotloop.sessions.store import SessionError, read_session

        try:
            session = await asyncio.to_thread(read_session, message.path)
        except SessionError as error:
            self.notify(str(error), severity="error")
            return
        for warning in session.warnings:
            self.notify(warning, severity="warning")
        if message.action == "resume":
            from hotloop.resumption import Resumption
            from hotloop.sessions.resume import rebuild

            conversation = await asyncio.to_thread(rebuild, session.events)
            await self._resume_here(Resumption(message.path, session, conversation))
        elif message.action == "replay":
            from hotloop.tui.screens.replay import ReplayScreen

            await self.push_screen(ReplayScreen(session, self.palette, 1.0, leave=self.pop_screen))
        else:
            from hotloop.tui.screens.session_view import SessionView

            await self.push_screen(SessionView(session, self.palette))

    async def _resume_here(self, resumed: Resumption) -> None:
        """Leave the current conversation (its log stays) and go on with the picked one."""
        if self.runtime is None or self.agent is None:
            self.notify("not connected yet", severity="warning")
            return
        if self.session_log is not None and self.session_log.path == resumed.path:
            self.notify("that is this session")
            return
        target, notes = resumed.target(self.config, Choice())
        provider = await self.runtime.connect(target)
        self._start_over()
        self.agent = self._new_agent(provider)
        self._show_provider()
        self._continue(resumed, notes)
        self.query_one(PromptInput).focus()

    async def on_unmount(self) -> None:
        if self._probes is not None:
            self._probes.cancel()
        if self.session_log is not None:
            self.session_log.close()
        if self.runtime is not None:
            await self.runtime.aclose()
