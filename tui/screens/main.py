"""`MainScreen`: the live session: transcript, approval bar, prompt, queued prompts, status bar.

The app hands it the session and each of the session's events (`show`); the screen draws them,
sends the session prompts and runs its turns. Its other jobs are parts it holds, each handed what
it uses: the prompts that wait (`PromptQueue`), the calls that wait for an answer
(`PendingApprovals`), the status bar's figures (`StatusFigures`), switching (`ProviderSwitch`),
the slash commands (`SlashCommands`), the saved sessions (`SessionsBrowser`) and the server panel
(`ServerPanelControl`). What Textual looks up on the screen (bindings' actions, message handlers)
stays here as one line handing it on.
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import TYPE_CHECKING

from textual import events, work
from textual.app import ComposeResult, SystemCommand
from textual.binding import ActiveBinding, Binding
from textual.notifications import SeverityLevel
from textual.screen import Screen
from textual.widgets import Footer, OptionList, TextArea
from textual.worker import Worker, WorkerState

from hotloop.agent.events import AgentEvent, Notice, SessionTitled, TurnFinished
from hotloop.agent.figures import SessionTotals, short_model
from hotloop.agent.text import inert
from hotloop.config import Choice
from hotloop.core.markdown_blocks import code_blocks
from hotloop.core.session import Session
from hotloop.core.slash import SlashError, parse
from hotloop.tui.items import AnswerItem
from hotloop.tui.pending_approvals import PendingApprovals
from hotloop.tui.prompt_queue import PromptQueue
from hotloop.tui.provider_switch import ProviderSwitch
from hotloop.tui.render import Palette
from hotloop.tui.server_panel_control import ServerPanelControl
from hotloop.tui.sessions_browsing import SessionsBrowser
from hotloop.tui.slash_commands import SlashCommands
from hotloop.tui.status_figures import StatusFigures
from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript

if TYPE_CHECKING:
    from hotloop.agent.approvals import Reply, Request
    from hotloop.core.server_watch import ServerReport
    from hotloop.sessions.store import LoggedSession


class MainScreen(Screen[None]):
    AUTO_FOCUS = "#prompt"
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
        # The app binds F1 on every screen; here too, so the footer shows it among this screen's keys, first.
        Binding("f1", "app.help", "Help", tooltip="This help"),
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
        session: Session,
        clock: Callable[[], float],
        palette: Callable[[], Palette],
        retarget: Callable[[Choice], None],
    ) -> None:
        super().__init__()
        self.session = session
        self.clock = clock
        self.palette = palette
        self.queue = PromptQueue(self, self.say)
        self.approvals = PendingApprovals(self)
        self.figures = StatusFigures(session, lambda: self.status, self.say)
        self.switch = ProviderSwitch(
            session,
            self.figures,
            lambda: self.status,
            self.say,
            retarget=retarget,
            turn_running=lambda: self.turn_running,
            next_prompt=self.next_prompt,
        )
        self.saved_sessions = SessionsBrowser(
            self, session, palette, self.say, start_over=self.start_over, show_provider=self.figures.show_provider
        )
        self.slash = SlashCommands(
            self,
            session,
            self.say,
            self.saved_sessions,
            switch_to=self.switch_to,
            retarget=retarget,
            new_conversation=self.action_new_conversation,
            turn_running=lambda: self.turn_running,
        )
        self.server_panel = ServerPanelControl(self, lambda: self.transcript)

    def compose(self) -> ComposeResult:
        # The sessions sidebar is mounted on first use: the first paint doesn't need it.
        yield Transcript(self.clock, self.palette, lambda: self.session.config.pricer(), id="transcript")
        bar = ApprovalBar(id="approvals")
        bar.typed = self._type_in_prompt
        yield bar
        yield PromptInput(id="prompt")
        yield QueuedPrompts(id="queued")
        status = StatusBar(id="status")
        if self.session.options.resume is None:  # a resumed session's log names its provider, once read
            self.figures.show_target(self.session.choice, status)
        yield status
        yield Footer()

    @property
    def active_bindings(self) -> dict[str, ActiveBinding]:
        """The keys in force, F1 first: the footer shows them in this order and drops those past its width."""
        bindings = super().active_bindings
        help_key = bindings.pop("f1", None)
        return {"f1": help_key, **bindings} if help_key is not None else bindings

    @property
    def transcript(self) -> Transcript:
        return self.query_one("#transcript", Transcript)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    def say(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None:
        """A notification shown as it reads: its text may come from outside, so it is inert and never markup."""
        self.notify(inert(message), severity=severity, timeout=timeout, markup=False)

    @property
    def totals(self) -> SessionTotals:
        return self.figures.totals

    @property
    def turn_running(self) -> bool:
        """A turn or a /compact is running (they share the group)."""
        return any(worker.group == "turn" and worker.is_running for worker in self.workers)

    # -- the event stream ----------------------------------------------------------------

    def show(self, event: AgentEvent) -> None:
        """Every event of the session, once its log has it: to the transcript and the status bar."""
        self.transcript.apply(event)
        self.figures.show(event)
        if isinstance(event, SessionTitled):
            self.app.sub_title = inert(event.title)
            self.say(f"session titled “{event.title}” by {short_model(event.model)}", timeout=4)
        elif isinstance(event, Notice) and event.level != "info":
            self.say(event.message, severity="error" if event.level == "error" else "warning", timeout=8)
        elif isinstance(event, TurnFinished):
            self.status.state = "ready"
            # Collect the turn's garbage now and freeze what survives, so later pauses stay short.
            gc.collect()
            gc.freeze()

    def restored(self, session: LoggedSession) -> None:
        """A saved session is being continued: its history on screen, its own totals in the status bar."""
        self.transcript.fast_forward(session.events)
        self.figures.restored(session)
        self.say(f"continuing session {session.header.id}")

    def show_provider(self) -> None:
        self.figures.show_provider()

    def show_target(self, choice: Choice) -> None:
        self.figures.show_target(choice)

    # -- the parts' keys, messages and workers -----------------------------------------------

    @work(exclusive=True, group="switch", exit_on_error=False)
    async def switch_to(self, choice: Choice) -> None:
        await self.switch.switch(choice)

    async def action_toggle_sessions(self) -> None:
        await self.saved_sessions.toggle()

    def on_sessions_sidebar_picked(self, message: SessionsSidebar.Picked) -> None:
        self.saved_sessions.picked(message)

    def server_report(self, report: ServerReport | None) -> None:
        self.server_panel.report(report)

    def fit_server_panel(self, width: int) -> None:
        self.server_panel.fit(width)

    def action_toggle_server(self) -> None:
        self.server_panel.toggle()

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
        self.app.push_screen(WaterfallScreen(logged.events, logged.header.pricer()))

    # -- prompts -------------------------------------------------------------------------

    def on_prompt_input_submitted(self, message: PromptInput.Submitted) -> None:
        try:
            slash = parse(message.text)
        except SlashError as error:
            self.say(str(error), severity="warning")
            return
        if slash is not None:
            self.slash.run(slash)
        elif message.now and self.turn_running:
            self.queue.interrupting = message.text
            self.workers.cancel_group(self, "turn")
        elif self.turn_running or not self.session.ready or self.switch.pending is not None or self.switch.switching:
            self.queue.add(message.text)
        else:
            self._send(message.text)

    def on_prompt_input_recall(self, message: PromptInput.Recall) -> None:
        self.queue.recall()

    def next_prompt(self) -> None:
        """Send the prompt that interrupted a turn, or the first queued one, if the session can take it."""
        if (
            self.session.ready
            and not self.turn_running
            and not self.switch.switching
            and (prompt := self.queue.next()) is not None
        ):
            self._send(prompt)

    def _send(self, prompt: str) -> None:
        self.status.state = "running"
        self.transcript.follow()  # whatever the user scrolled to, the answer to their prompt is what they want
        self.run_turn(prompt)

    @work(exclusive=True, group="turn", exit_on_error=False)
    async def run_turn(self, prompt: str) -> None:
        await self.session.turn(prompt)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        if not self.query(StatusBar):
            return  # the app is closing: its workers are cancelled after its screen is gone
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            self.say(str(event.worker.error) or type(event.worker.error).__name__, severity="error", timeout=10)
        if event.worker.group == "turn" and event.state in (
            WorkerState.SUCCESS,
            WorkerState.CANCELLED,
            WorkerState.ERROR,
        ):
            self.status.state = "ready"
            if event.state is not WorkerState.SUCCESS and self.queue.interrupting is None:
                self.queue.back_to_box()  # Esc stops what was queued after the turn too
            if self.switch.pending is not None:
                choice, self.switch.pending = self.switch.pending, None
                self.switch_to(choice)  # the next prompt goes once it has switched
            else:
                self.next_prompt()

    def action_cancel_turn(self) -> None:
        if self.turn_running:
            self.workers.cancel_group(self, "turn")

    # -- approvals -----------------------------------------------------------------------

    async def ask_approval(self, request: Request) -> Reply:
        """Ask the user whether a call may run; the turn's other calls go on meanwhile."""
        return await self.approvals.ask(request)

    def on_approval_bar_answered(self, message: ApprovalBar.Answered) -> None:
        self.approvals.answered(message.reply, message.every)

    def action_answer_question(self) -> None:
        self.approvals.go_to_question()

    # -- keys ----------------------------------------------------------------------------

    def on_key(self, event: events.Key) -> None:
        """A printable key typed outside a text box goes to the prompt, never to a command.

        A list keeps its own keys (the sessions list's `c` and `r`; it sends other letters to its search). A text box
        that can be typed in stops the keys it takes: one that arrives here while such a box has the focus was typed
        before anything had it (as the app starts, before the first paint), and goes to the prompt too.
        """
        focused = self.focused
        if (
            not (event.is_printable and event.character)
            or isinstance(focused, OptionList)
            or (isinstance(focused, TextArea) and focused.read_only)
        ):
            return
        self._type_in_prompt(event)
        event.stop()

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

    def action_scroll_transcript(self, where: str) -> None:
        transcript = self.transcript
        {
            "page_up": transcript.page_up,
            "page_down": transcript.page_down,
            "start": transcript.scroll_to_start,
            "end": transcript.follow,
        }[where]()

    # -- copying -------------------------------------------------------------------------

    def _last_answer(self) -> str | None:
        answers = [item for item in self.transcript.history.items if isinstance(item, AnswerItem)]
        return answers[-1].text if answers else None

    def action_copy_answer(self) -> None:
        answer = self._last_answer()
        if answer:
            self.app.copy_to_clipboard(answer)
            self.say("copied the last answer")
        else:
            self.say("no answer to copy yet", severity="warning")

    def action_copy_code(self) -> None:
        blocks = code_blocks(self._last_answer() or "")
        if blocks:
            self.app.copy_to_clipboard(blocks[-1])
            self.say("copied the last code block")
        else:
            self.say("the last answer has no code block", severity="warning")

    def on_history_view_copied(self, message: HistoryView.Copied) -> None:
        self.say(f"copied {message.what}")

    def system_commands(self) -> list[SystemCommand]:
        """This screen's commands in the palette."""
        return [
            SystemCommand("Copy last answer", "Copy the last answer's Markdown", self.action_copy_answer),
            SystemCommand("Copy last code block", "Copy the last code block of the last answer", self.action_copy_code),
            SystemCommand("New conversation", "Start over, in a new session log", self.action_new_conversation),
            SystemCommand("Sessions", "Show or hide the saved sessions", self.action_toggle_sessions),
        ]

    # -- conversations -------------------------------------------------------------------

    def action_new_conversation(self) -> None:
        if self.session.agent is None:
            return
        self.start_over()
        self.session.new_conversation()
        self.say("new conversation")

    def start_over(self) -> None:
        """Stop the turn in flight, and clear the screen and the totals."""
        self.workers.cancel_group(self, "turn")
        self.transcript.clear()
        self.figures.start_over()
