"""`WatchScreen`: other agents' traffic through `hotloop watch`, drawn as hotloop draws its own sessions.

The pass-through hands every event of every watched conversation to `deliver`. Each
conversation gets its own `Transcript` (the same widget a live session and a replay use: the
answer streams, calls show as calls, usage strips fill), and only the one the list on the left
highlights is on screen, side requests (titles, summaries, sub-agents) under their parent (one on
screen that turns out to be a side request hands the screen to its parent); a self-hosted upstream's
server panel beside them (F2). The status bar
counts the conversation on screen, as it counts a session; the line at the top names the
address to point agents at and the whole traffic's totals. F3 draws the conversation's waterfall.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal
from textual.screen import Screen
from textual.widgets import ContentSwitcher, Footer, OptionList, Static

from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    SideOf,
    StepFinished,
    StepStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import SessionTotals
from hotloop.agent.pricing import CostTotals
from hotloop.tui.render import Palette
from hotloop.tui.server_panel_control import ServerPanelControl
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.status_bar import StatusBar
from hotloop.tui.widgets.transcript import Transcript
from hotloop.tui.widgets.watch_top_line import WatchTopLine
from hotloop.tui.widgets.watched_list import WatchedList

if TYPE_CHECKING:
    from hotloop.core.server_watch import ServerReport
    from hotloop.watch import ConversationInfo

WAITING = "waiting for requests: point an agent at the address above (F1 shows how)"


class WatchScreen(Screen[None]):
    DEFAULT_CSS = """
    WatchScreen #body { height: 1fr; }
    WatchScreen #waiting { padding: 1 2; color: $text-muted; }
    """
    BINDINGS = [
        Binding("f2", "toggle_server", "Server", tooltip="The upstream's server panel (a self-hosted upstream)"),
        Binding("f3", "waterfall", "Waterfall", tooltip="Where the time of the conversation on screen went"),
        Binding("f1", "app.help", "Help", tooltip="How to point agents at hotloop watch"),
        Binding("tab", "focus_list", "Conversations", show=False),
        Binding("q", "app.quit", "Quit"),
    ]

    def __init__(self, address: tuple[str, str], clock: Callable[[], float], palette: Callable[[], Palette]) -> None:
        super().__init__()
        self.address, self.upstream = address  # where agents point, and where their requests go on to
        self.clock = clock
        self.palette = palette
        self.events: dict[str, list[AgentEvent]] = {}
        self.totals: dict[str, SessionTotals] = {}
        # Held, not queried: Textual caches 1,024 queries, and a miss walks every widget of every conversation.
        self.transcripts: dict[str, Transcript] = {}
        # The whole traffic's, moved by the steps that change them: summing every conversation at each event was
        # most of an event's cost with 1,200 conversations listed (1.7 ms against 0.8 with running totals).
        self.traffic_steps = 0
        self.traffic_cost = CostTotals()
        self._shown: str | None = None
        self._follow = ""  # the conversation on screen became a side request of this one: it goes on screen
        self.answering = 0  # requests whose answer is streaming now: the server panel scrapes faster meanwhile
        self.nudge: Callable[[], None] = lambda: None  # a request started or ended: the panel scrapes at once
        self.server_panel = ServerPanelControl(self, lambda: self.query_one("#body", Horizontal))
        self.top_line = WatchTopLine(self.address, self.upstream, id="address")

    def compose(self) -> ComposeResult:
        yield self.top_line
        with Horizontal(id="body"):
            yield WatchedList(id="conversations")
            with ContentSwitcher(id="transcripts"):
                yield Static(WAITING, id="waiting", markup=False)
        yield StatusBar(id="status")
        yield Footer()

    def on_mount(self) -> None:
        self.status.state = "watching"
        self.query_one(ContentSwitcher).current = "waiting"

    def server_report(self, report: ServerReport | None) -> None:
        self.server_panel.report(report)
        self.call_after_refresh(self._fit_top_line)

    def fit_server_panel(self, width: int) -> None:
        self.server_panel.fit(width)
        self.call_after_refresh(self._fit_top_line)

    def action_toggle_server(self) -> None:
        self.server_panel.toggle()
        self.call_after_refresh(self._fit_top_line)

    def _fit_top_line(self) -> None:
        """The top line fitted to what the server panel, laid out by now, leaves of it."""
        # The screen's own children, not a query: a query walks every conversation's widgets. Its width, not where it
        # begins: a resize moves the panel without a word to the screen, and the line re-fits to its own new width.
        shown = [w.outer_size.width for w in self.children if isinstance(w, ServerPanel) and w.display and w.region]
        self.top_line.covered = max(shown, default=0)

    @property
    def status(self) -> StatusBar:
        return self.query_one(StatusBar)

    @property
    def conversations(self) -> WatchedList:
        return self.query_one(WatchedList)

    def deliver(self, conversation: ConversationInfo, event: AgentEvent) -> None:
        """One event of a watched conversation, in order: to its transcript, its totals and the list."""
        events = self.events.setdefault(conversation.id, [])
        if not events:
            self._open(conversation)
        events.append(event)
        self.transcripts[conversation.id].apply(event)
        totals = self.totals[conversation.id]
        if isinstance(event, StepStarted):
            totals.add(event)
        elif isinstance(event, StepFinished):
            self._add_step(totals, event)
        if isinstance(event, (StepStarted, ResponseFinished)):
            self.answering += 1 if isinstance(event, StepStarted) else -1
            self.nudge()
        if isinstance(event, StepStarted) and conversation.id == self._shown:
            self.status.provider, self.status.model = event.provider, event.model
        if isinstance(event, SideOf) and conversation.id == self._shown:
            self._follow = event.parent
        if isinstance(event, (TurnStarted, StepFinished, TurnFinished, SideOf)):
            self.conversations.update(conversation, totals)
            self._count()
        if conversation.id == self._shown:
            self.status.totals = totals

    def _open(self, conversation: ConversationInfo) -> None:
        # Priced as the headless table prices it: by the upstream's URL, or the configured cost of its hour.
        self.totals[conversation.id] = SessionTotals(conversation.pricer())
        transcript = Transcript(self.clock, self.palette, conversation.pricer, id=_widget_id(conversation.id))
        self.transcripts[conversation.id] = transcript
        transcript.display = False  # the switcher shows its `current` alone: a child mounted later shows too
        self.query_one(ContentSwitcher).mount(transcript)
        self.conversations.update(conversation, self.totals[conversation.id])
        if self._shown is None or conversation.id == self._follow:
            self.show(conversation.id)

    def show(self, conversation: str) -> None:
        """Put a conversation's transcript on screen, highlighted in the list, and its totals in the status bar."""
        self._shown, self._follow = conversation, ""
        self.conversations.highlight(conversation)
        self.query_one(ContentSwitcher).current = _widget_id(conversation)
        self.status.totals = self.totals[conversation]
        started = next((e for e in reversed(self.events[conversation]) if isinstance(e, StepStarted)), None)
        if started is not None:
            self.status.provider, self.status.model = started.provider, started.model

    def visible_transcript(self) -> Transcript | None:
        """The transcript on screen; None until a conversation is seen."""
        return self.transcripts[self._shown] if self._shown is not None else None

    def on_option_list_option_highlighted(self, message: OptionList.OptionHighlighted) -> None:
        # Two moves in one frame queue two messages: showing the stale one would highlight its row again, whose
        # message would undo the other's, for ever. A row redrawn since is a new option with the same id.
        current = self.conversations.highlighted_option
        key = message.option.id
        if current is not None and current.id == key and key is not None and key in self.events:
            self.show(key)

    def _add_step(self, totals: SessionTotals, event: StepFinished) -> None:
        """Count a finished step in its conversation's totals, and what it added in the whole traffic's."""
        cost, steps = totals.cost, totals.steps
        known, priced, unknown = cost.known, cost.priced, cost.unknown
        totals.add(event)
        self.traffic_steps += totals.steps - steps
        self.traffic_cost.known += cost.known - known
        self.traffic_cost.priced += cost.priced - priced
        self.traffic_cost.unknown += cost.unknown - unknown
        self.traffic_cost.estimated = self.traffic_cost.estimated or cost.estimated

    def _count(self) -> None:
        """The whole traffic's counts and dollars, beside the address."""
        self.top_line.count(len(self.totals), self.traffic_steps, self.traffic_cost)

    def action_focus_list(self) -> None:
        self.conversations.focus()

    def action_waterfall(self) -> None:
        from hotloop.tui.screens.waterfall import WaterfallScreen

        if self._shown is None:
            self.notify("no requests yet", severity="warning")
            return
        self.app.push_screen(WaterfallScreen(self.events[self._shown], self.totals[self._shown].pricer))


def _widget_id(conversation: str) -> str:
    """A conversation's id as a widget id: session ids are safe characters, but may start with a digit."""
    return "c-" + "".join(c if c.isalnum() or c in "-_" else "_" for c in conversation)
