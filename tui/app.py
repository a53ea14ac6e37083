"""The hotloop app: a streaming transcript, live tool panes, usage, and switching inside the app.

The app is a frontend on `core.session.Session`: it draws the session's event stream and
what the session reports of its server, and sends it prompts and switches. It never talks
to a provider itself. The engine (openai, aiohttp) is imported after the first paint, in a
thread, so the window appears at once.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen, ScreenResultType
from textual.theme import Theme
from textual.widgets import Footer, Input, OptionList, TextArea
from textual.worker import Worker, WorkerState

from hotloop import InputError
from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    Notice,
    ProviderSwitched,
    SessionTitled,
    StepFinished,
    StepStarted,
    TurnFinished,
)
from hotloop.agent.figures import SessionTotals, short_model
from hotloop.agent.text import inert
from hotloop.config import Choice, Config
from hotloop.core.markdown_blocks import code_blocks
from hotloop.core.session import ServerReport, Session, SessionOptions, SwitchOption
from hotloop.core.slash import Slash, SlashError, parse
from hotloop.tui.commands import SwitchCommands
from hotloop.tui.items import AnswerItem
from hotloop.tui.render import Palette, theme_palette
from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.status_bar import CONTEXT_WARNING, StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.approvals import Reply, Request
    from hotloop.agent.loop import Agent
    from hotloop.agent.tools.mcp import McpState
    from hotloop.sessions.store import LoggedSession


SERVER_PANEL_MIN_WIDTH = 120
RECONNECT_FIRST = 2.0  # seconds before a start provider that can't be reached is asked again, doubling
RECONNECT_MAX = 30.0


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


class HotloopApp(App[None]):
    CSS_PATH = "app.tcss"
    TITLE = "hotloop"
    COMMANDS = App.COMMANDS | {SwitchCommands}
    BINDINGS = [
        Binding(
            "escape",
            "cancel_turn",
            "Cancel turn",
            tooltip="Cancel the turn in flight; queued prompts go back to the box",
        ),
        Binding("ctrl+n", "new_conversation", "New", tooltip="A new conversation, in a new session log"),
        Binding("ctrl+b", "toggle_sessions", "Sessions", tooltip="The saved sessions: search, continue, replay, view"),
        Binding("ctrl+o", "copy_answer", "Copy answer", tooltip="Copy the last answer's Markdown"),
        Binding("f2", "toggle_server", "Server", tooltip="The server panel (vLLM, SGLang, llama.cpp, the simulator)"),
        Binding("f3", "waterfall", "Waterfall", tooltip="Where each turn's time went, for the session on screen"),
        Binding("f1", "help", "Help", tooltip="This help"),
        Binding("ctrl+r", "answer_question", "Answer", tooltip="Go to the question about a call waiting for you"),
        Binding("pageup", "scroll_transcript('page_up')", "Page up", show=False, priority=True),
        Binding("pagedown", "scroll_transcript('page_down')", "Page down", show=False, priority=True),
        Binding("ctrl+home", "scroll_transcript('start')", "Transcript start", show=False, priority=True),
        Binding(
            "ctrl+end", "scroll_transcript('end')", "Transcript end", show=False, priority=True, tooltip="Follow again"
        ),
    ]

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
        self.session = Session(config, options, self.show, restored=self._restored, ask=self.ask_approval)
        self.clock = clock
        self._server_panel_wanted: bool | None = None
        self.totals = SessionTotals(self.session.config.pricer())
        self._palette: Palette | None = None
        self._pending_switch: Choice | None = None
        self._queue: list[str] = []  # prompts typed while a turn ran (or before the session opened)
        self._interrupting: str | None = None  # a prompt sent now: the turn it cancels gives way to it
        self._asks: list[tuple[Request, asyncio.Future[Reply]]] = []  # calls waiting for the user's answer
        self._context_warned = False  # the context-full warning, said once a conversation

    def compose(self) -> ComposeResult:
        # The sessions sidebar is mounted on first use: the first paint doesn't need it.
        yield Transcript(self.clock, self.palette, lambda: self.session.config.pricer(), id="transcript")
        bar = ApprovalBar(id="approvals")
        bar.typed = self._type_in_prompt
        yield bar
        yield PromptInput(id="prompt")
        yield QueuedPrompts(id="queued")
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

    @property
    def agent(self) -> Agent | None:
        return self.session.agent

    @property
    def workspace(self) -> Path:
        return self.session.workspace

    # -- connecting ----------------------------------------------------------------------

    @work(exclusive=True, group="connect", exit_on_error=False)
    async def connect(self) -> None:
        """Open the session; a server that can't be reached yet is asked again, the wait shown, until it answers.

        Meanwhile /provider, /model, /tier and the palette pick another target, which starts this again.
        """
        from hotloop.providers.errors import ProviderError

        await asyncio.to_thread(_import_engine)
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
                    self.status.state = f"connecting… retry in {left} s"
                    await asyncio.sleep(1)
                self.status.state = "connecting…"
                wait = min(wait * 2, RECONNECT_MAX)
        self._show_provider()
        self.session.watch_server(self._server_report)
        self.status.state = "ready"
        self._next_prompt()

    def _retarget(self, choice: Choice) -> None:
        """The session isn't open (its server unreachable): open it on `choice` instead."""
        try:
            self.session.retarget(choice)
        except InputError as error:
            self.say(str(error), severity="error")
            return
        self.status.state = "connecting…"
        self.connect()

    def _restored(self, session: LoggedSession) -> None:
        """A saved session is being continued: its history on screen, its totals in the status bar."""
        self.transcript.fast_forward(session.events)
        steps = [event for event in session.events if isinstance(event, (StepStarted, StepFinished, Compacted))]
        for event in steps:
            self.totals.add(event)
        self.status.totals = self.totals
        self._measure_context()
        self.say(f"continuing session {session.header.id}")

    def _show_provider(self) -> None:
        if self.agent is not None:
            provider = self.agent.provider
            self.status.provider, self.status.model = provider.name, provider.model
            self.status.tier = self.session.tier_label(provider.name, provider.model)

    def _server_report(self, report: ServerReport | None) -> None:
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
        # Shown from the start only where the transcript keeps room enough; F2 shows or hides it anyway.
        wanted = self._server_panel_wanted
        panel.display = wanted if wanted is not None else self.size.width >= SERVER_PANEL_MIN_WIDTH
        self.mount(panel, before=self.transcript)

    def on_resize(self, event: events.Resize) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        if self._server_panel_wanted is None:  # the user hasn't chosen: follow the room there is
            for panel in self.query(ServerPanel):
                panel.display = event.size.width >= SERVER_PANEL_MIN_WIDTH

    def action_waterfall(self) -> None:
        """Where this session's time went, from its log (so it shows what a replay would)."""
        from hotloop.sessions.store import read_session
        from hotloop.tui.screens.waterfall import WaterfallScreen

        log = self.session.log
        if log is None:
            self.say("no turns yet", severity="warning")
            return
        log.flush()
        logged = read_session(log.path)
        self.push_screen(WaterfallScreen(logged.events, logged.header.pricer()))

    def action_toggle_server(self) -> None:
        from hotloop.tui.widgets.server_panel import ServerPanel

        for panel in self.query(ServerPanel):
            panel.display = self._server_panel_wanted = not panel.display

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if not self.query(StatusBar):
            return  # the app is closing: its workers are cancelled after its screen is gone
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            message = str(event.worker.error) or type(event.worker.error).__name__
            if event.worker.group == "connect":
                self.status.state = "not connected"
            self.say(message, severity="error", timeout=10)
        if event.worker.group == "turn" and event.state in (
            WorkerState.SUCCESS,
            WorkerState.CANCELLED,
            WorkerState.ERROR,
        ):
            self.status.state = "ready"
            if event.state is not WorkerState.SUCCESS and self._interrupting is None:
                self._queue_back_to_box()  # Esc stops what was queued after the turn too
            if self._pending_switch is not None:
                choice, self._pending_switch = self._pending_switch, None
                self.switch_to(choice)  # the next prompt goes once it has switched
            else:
                self._next_prompt()

    def _measure_context(self) -> None:
        """The meter after a step or a compaction; a warning once the context nears full and nothing will compact it."""
        self.status.context = measured = self.session.context()
        if measured is None or self._context_warned:
            return
        used, window = measured
        settings = self.session.config.context
        if used >= CONTEXT_WARNING * window and (not settings.auto_compact or settings.compact_at > CONTEXT_WARNING):
            self._context_warned = True
            left = max(window - used, 0)
            self.say(
                f"the context is {used / window:.0%} full ({left:,} tokens left): /compact summarizes it, "
                "/new starts a fresh conversation",
                "warning",
                timeout=10,
            )

    def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None:
        """A notification shown as it reads: its text may come from outside, so it is inert and never markup."""
        self.notify(inert(message), severity=severity, timeout=timeout, markup=False)

    # -- the event stream ----------------------------------------------------------------

    def show(self, event: AgentEvent) -> None:
        """Every event of the session, once its log has it: to the transcript and the status bar."""
        self.transcript.apply(event)
        if isinstance(event, StepStarted):
            self.status.state = f"step {event.step}"
            self.totals.add(event)
        elif isinstance(event, (StepFinished, Compacted)):
            self.totals.add(event)
            self.status.totals = self.totals
            self._measure_context()
        elif isinstance(event, ProviderSwitched):
            self.status.provider, self.status.model = event.provider, event.model
            self.status.tier = self.session.tier_label(event.provider, event.model)
        elif isinstance(event, SessionTitled):
            self.sub_title = inert(event.title)
            self.say(f"session titled “{event.title}” by {short_model(event.model)}", timeout=4)
        elif isinstance(event, Notice) and event.level != "info":
            self.say(event.message, severity="error" if event.level == "error" else "warning", timeout=8)
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
            self.say(str(error), severity="warning")
            return
        if slash is not None:
            self.run_slash(slash)
        elif message.now and self.turn_running:
            self._interrupting = message.text
            self.workers.cancel_group(self, "turn")
        elif self.turn_running or not self.session.ready or self._pending_switch is not None:
            self._queue.append(message.text)
            self._show_queue()
        else:
            self._send(message.text)

    def _send(self, prompt: str) -> None:
        self.status.state = "running"
        self.transcript.follow()  # whatever the user scrolled to, the answer to their prompt is what they want
        self.run_turn(prompt)

    def _next_prompt(self) -> None:
        """Send the prompt that interrupted a turn, or the first queued one, if the session can take it."""
        if not self.session.ready or self.turn_running:
            return
        if self._interrupting is not None:
            prompt, self._interrupting = self._interrupting, None
            self._send(prompt)
        elif self._queue:
            self._send(self._queue.pop(0))
            self._show_queue()

    def _show_queue(self) -> None:
        self.query_one(QueuedPrompts).prompts = tuple(self._queue)
        self.query_one(PromptInput).queued = len(self._queue)

    def _queue_back_to_box(self) -> None:
        """The queued prompts, back in the box above what it holds, to edit or drop."""
        if not self._queue:
            return
        box = self.query_one(PromptInput)
        box.load_text("\n\n".join([*self._queue, box.text] if box.text.strip() else self._queue))
        box.move_cursor(box.document.end)
        self.say(f"{'the queued prompt is' if len(self._queue) == 1 else 'the queued prompts are'} back in the box")
        self._queue.clear()
        self._show_queue()

    async def ask_approval(self, request: Request) -> Reply:
        """Ask the user whether a call may run; the turn's other calls go on meanwhile."""
        answer: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
        self._asks.append((request, answer))
        self._show_asks()
        try:
            return await answer
        finally:  # answered, or the turn was cancelled while it waited
            self._asks = [(r, f) for r, f in self._asks if f is not answer]
            self._show_asks()

    def _show_asks(self) -> None:
        """The waiting calls on the bar; it takes the focus only from an empty prompt, else ctrl+r gives it."""
        bar = self.query_one(ApprovalBar)
        bar.requests = tuple(request for request, _ in self._asks)
        if self._asks and not bar.has_focus_within and not self.query_one(PromptInput).text:
            bar.ask()
        elif not self._asks and bar.has_focus_within:
            self.query_one(PromptInput).focus()

    def action_answer_question(self) -> None:
        if self._asks:
            self.query_one(ApprovalBar).ask()

    def _type_in_prompt(self, event: events.Key) -> None:
        """A key typed where it isn't a command (outside a text box, or not an answer): the prompt's."""
        box = self.query_one(PromptInput)
        box.focus()
        if event.key == "enter":
            box.action_submit()
        elif event.key == "backspace":
            box.action_delete_left()
        elif event.character:
            box.insert(event.character)

    def on_approval_bar_answered(self, message: ApprovalBar.Answered) -> None:
        for _, answer in self._asks if message.every else self._asks[:1]:
            if not answer.done():
                answer.set_result(message.reply)

    def on_prompt_input_recall(self, message: PromptInput.Recall) -> None:
        if self._queue:
            box = self.query_one(PromptInput)
            box.load_text(self._queue.pop())
            box.move_cursor(box.document.end)
            self._show_queue()

    def on_key(self, event: events.Key) -> None:
        """A printable key typed outside a text box goes to the prompt, never to a command.

        A list keeps its own keys (the sessions list's `c` and `r`; it sends other letters to its search).
        """
        if self.screen is not self.screen_stack[0] or not (event.is_printable and event.character):
            return
        if isinstance(self.focused, (TextArea, Input, OptionList)):
            return
        self._type_in_prompt(event)
        event.stop()

    def action_scroll_transcript(self, where: str) -> None:
        transcript = self.transcript
        {
            "page_up": transcript.page_up,
            "page_down": transcript.page_down,
            "start": transcript.scroll_to_start,
            "end": transcript.follow,
        }[where]()

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def run_turn(self, prompt: str) -> None:
        await self.session.turn(prompt)

    def run_slash(self, slash: Slash) -> None:
        if slash.name == "/new":
            self.action_new_conversation()
        elif slash.name == "/help":
            self.action_help()
        elif slash.name == "/fork":
            self.fork(int(slash.args[0]) if slash.args else None)
        elif slash.name == "/compact":
            self._compact()
        elif slash.name == "/mcp":
            if self.agent is None:
                self.say("not connected yet", severity="warning")
            else:
                self.mcp(slash.args[1] if slash.args else None)
        elif self.agent is None:
            self._retarget(slash.choice(self.session.choice.provider or self.session.config.default_provider))
        else:
            self.switch_to(slash.choice(self.agent.provider.name))

    def _compact(self) -> None:
        if self.agent is None:
            self.say("not connected yet", severity="warning")
        elif self.turn_running:
            self.say("a turn is running: /compact when it ends", severity="warning")
        else:
            self.status.state = "compacting…"
            self.compact()

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def compact(self) -> None:
        """`/compact`, in the turn's group: prompts sent meanwhile queue, and Esc cancels it."""
        try:
            await self.session.compact()
        except InputError as error:
            self.say(str(error), severity="error")

    @work(exclusive=True, group="fork", exit_on_error=False)
    async def fork(self, turn: int | None) -> None:
        """`/fork [N]`: go on in a new session holding this conversation up to turn N; this one's log stays."""
        if self.agent is None:
            self.say("not connected yet", severity="warning")
            return
        try:
            forked = await self.session.fork(turn)
        except InputError as error:
            self.say(str(error), severity="error")
            return
        for warning in forked.warnings:
            self.say(warning, severity="warning")
        await self._resume_here(forked.path)
        if self.session.log is not None and self.session.log.path == forked.path:
            self.say(f"forked session {forked.parent} at turn {forked.turn}: this is session {forked.id}")
        sidebars = self.query(SessionsSidebar)
        if sidebars and sidebars.first().has_class("-open"):  # the fork joins the list, under its parent
            self.load_sessions()

    @work(exclusive=True, group="mcp", exit_on_error=False)
    async def mcp(self, restart: str | None) -> None:
        """`/mcp`: each MCP server's state and tools, in the transcript; `/mcp restart NAME` starts one again."""
        if restart is not None:
            try:
                await self.session.restart_mcp(restart)
            except InputError as error:
                self.say(str(error), severity="error")
                return
        servers = self.session.mcp_servers()
        lines = [mcp_line(state) for state in servers] or ["no MCP servers (add them in the config, or with --mcp)"]
        self.show(Notice(level="info", message="MCP servers:\n" + "\n".join(lines)))

    @work(exclusive=True, group="switch", exit_on_error=False)
    async def switch_to(self, choice: Choice) -> None:
        """Use another provider, model or tier from the next turn on; the conversation stays."""
        from hotloop.providers.errors import ProviderError

        if self.agent is None:
            self._retarget(choice)
            return
        if self.turn_running:
            self._pending_switch = choice
            self.say("switching after this turn")
            return
        try:
            # The agent reports the switch, with its cost, through the event stream.
            await self.session.switch(choice)
            self._show_provider()
        except (InputError, ProviderError) as error:
            self.say(str(error), severity="error")
        self._next_prompt()

    async def switch_options(self) -> list[SwitchOption]:
        """Every tier, provider and model, each with what switching to it would cost now."""
        return await self.session.switch_options()

    def get_system_commands(self, screen: Screen[ScreenResultType]) -> list[SystemCommand]:
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
            self.say("copied the last answer")
        else:
            self.say("no answer to copy yet", severity="warning")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self._last_answer() or "")
        if blocks:
            self.copy_to_clipboard(blocks[-1])
            self.say("copied the last code block")
        else:
            self.say("the last answer has no code block", severity="warning")

    def on_history_view_copied(self, message: HistoryView.Copied) -> None:
        self.say(f"copied the {message.what}")

    def action_new_conversation(self) -> None:
        if self.agent is None:
            return
        self._start_over()
        self.session.new_conversation()
        self.say("new conversation")

    def _start_over(self) -> None:
        """Stop the turn in flight, and clear the screen and the totals."""
        self.workers.cancel_group(self, "turn")
        self.transcript.clear()
        self.totals = SessionTotals(self.session.config.pricer())
        self.status.totals = self.totals
        self.status.context = None
        self._context_warned = False

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
            sidebar.opened()
        else:
            sidebar.closed()
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
            self.say(str(error), severity="error")
            return
        for warning in session.warnings:
            self.say(warning, severity="warning")
        if message.action == "resume":
            await self._resume_here(message.path)
        elif message.action == "replay":
            from hotloop.tui.screens.replay import ReplayScreen

            await self.push_screen(ReplayScreen(session, self.palette, 1.0, leave=self.pop_screen))
        else:
            from hotloop.tui.screens.session_view import SessionView

            await self.push_screen(SessionView(session, self.palette))

    async def _resume_here(self, path: Path) -> None:
        """Leave the current conversation (its log stays) and go on with the picked one."""
        from hotloop.providers.errors import ProviderError

        if self.agent is None:
            self.say("not connected yet", severity="warning")
            return
        log = self.session.log
        if log is not None and log.path == path:
            self.say("that is this session")
            return
        self._start_over()
        try:
            await self.session.continue_session(path)
        except (InputError, ProviderError) as error:
            self.say(f"{error}: starting a new conversation instead", severity="error", timeout=10)
            self.session.new_conversation()
        self._show_provider()
        self.query_one(PromptInput).focus()

    async def on_unmount(self) -> None:
        await self.session.close()


def mcp_line(state: McpState) -> str:
    """`fs · running · read_file, list_dir` or `fs · stopped: the server exited · /mcp restart fs`."""
    name = state.server.name
    if state.status == "running":
        return f"{name} · running · {', '.join(state.tools) or 'no tools'}"
    problem = f": {state.problem}" if state.problem else ""
    return f"{name} · {state.status}{problem} · /mcp restart {name}"
