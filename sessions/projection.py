"""A session's events projected into turns, steps and tool calls, with the times they happened.

The TUI's fold (what the transcript shows), the exports and the waterfall all read the
same records, so a figure or a status can't differ between them. A projection takes events
one at a time, live or from a log; with `keep=False` it keeps only the turn in progress, as
a live transcript needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    Compacted,
    HookRan,
    Notice,
    ProviderSwitched,
    ResponseFinished,
    SideRequest,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import compaction_summary, side_request_summary
from hotloop.agent.switching import describe_switch
from hotloop.providers.events import (
    ReasoningDelta,
    ServerToolUsed,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    UsageLedger,
)

FINAL = ("ok", "error", "cancelled")
# The turn ends that stop a step midway, its calls unanswered (not the model's cut: `providers.events.CUT_SHORT`).
BROKEN_OFF = ("cancelled", "error", "interrupted")


@dataclass
class CallRecord:
    """A tool call from its first argument fragment to its result. Times are event timestamps."""

    call_id: str
    name: str
    arguments: str = ""
    status: str = "pending"  # pending, waiting (for approval), running, then ok, error or cancelled
    started: float | None = None
    ended: float | None = None
    duration: float | None = None
    output: list[str] = field(default_factory=list)
    result: str = ""
    reused: str = ""  # "memo" or "prefetch"
    ahead: float = 0.0  # prefetch: seconds of its run done before the model asked
    preview: str = ""  # what it would do, shown while it waits for approval: a diff, a command
    decision: str = ""  # `allowed by rule run_shell:pytest*`, `denied by you: …`

    def full_text(self) -> str:
        return self.result or "".join(self.output)


@dataclass
class StepRecord:
    step: int
    provider: str
    model: str
    started: float
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: dict[str, CallRecord] = field(default_factory=dict)
    server_tools: list[ServerToolUsed] = field(default_factory=list)
    response: ResponseFinished | None = None
    finished: StepFinished | None = None

    @property
    def usage(self) -> UsageLedger | None:
        source = self.finished or self.response
        return source.usage if source is not None else None

    def call(self, call_id: str) -> CallRecord:
        if call_id not in self.calls:
            self.calls[call_id] = CallRecord(call_id, "")
        return self.calls[call_id]


@dataclass
class TurnRecord:
    turn: int
    prompt: str
    started: float
    steps: list[StepRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    end: str = ""  # the TurnFinished reason; empty while the turn runs (or if the log stops mid-turn)
    wall: float | None = None
    hooks: list[HookRan] = field(default_factory=list)  # the prompt's hooks (run before it started) included

    def broken_off(self, step: StepRecord) -> bool:
        """Whether `step` stopped before it finished: the turn ended, or the log did, before the step."""
        return step.finished is None and (self.end in BROKEN_OFF or not self.end)


class Projection:
    """Turns, steps and calls, built event by event; `preamble` holds the notes from before the first turn.

    `step` is the step in progress. Events of a step that has no `StepStarted` (a line lost
    from a damaged log) open one of their own, so nothing they carry is dropped.
    """

    def __init__(self, keep: bool = True) -> None:
        self.keep = keep
        self.preamble: list[str] = []
        self.turns: list[TurnRecord] = []
        self.step: StepRecord | None = None
        self._early_hooks: list[HookRan] = []  # a prompt's hooks run before its turn starts

    @property
    def turn(self) -> TurnRecord | None:
        return self.turns[-1] if self.turns else None

    def apply(self, event: AgentEvent) -> None:
        if isinstance(event, TurnStarted):
            turn = TurnRecord(event.turn, event.prompt, event.ts, hooks=self._early_hooks)
            self._early_hooks = []
            self.turns = [*self.turns, turn] if self.keep else [turn]
            self.step = None
        elif isinstance(event, HookRan):
            current = self.turn
            (current.hooks if current is not None and not current.end else self._early_hooks).append(event)
        elif isinstance(event, StepStarted):
            self.step = self._new_step(event.step, event.provider, event.model, event.ts)
        elif isinstance(event, TurnFinished):
            if self.turn is not None:
                self.turn.end, self.turn.wall = event.reason, event.wall
            self.step = None
        elif isinstance(event, Notice | ProviderSwitched | Compacted | SideRequest):
            (self.turn.notes if self.turn is not None else self.preamble).append(_note(event))
        elif isinstance(event, _STEP_EVENTS):
            self._step_event(self.step or self._new_step(0, "", "", event.ts), event)

    def _new_step(self, number: int, provider: str, model: str, ts: float) -> StepRecord:
        turn = self.turn
        if turn is None:
            turn = TurnRecord(0, "", ts)
            self.turns = [*self.turns, turn] if self.keep else [turn]
        step = StepRecord(number or len(turn.steps) + 1, provider, model, ts)
        turn.steps.append(step)
        self.step = step
        return step

    def _step_event(self, step: StepRecord, event: AgentEvent) -> None:
        if isinstance(event, TextDelta):
            step.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            step.reasoning.append(event.text)
        elif isinstance(event, ToolCallArgsDelta):
            step.call(event.call_id).arguments += event.fragment
        elif isinstance(event, ToolOutput):
            step.call(event.call_id).output.append(event.text)
        elif isinstance(event, ToolCallStarted):
            step.calls.setdefault(event.call_id, CallRecord(event.call_id, event.name))
        elif isinstance(event, ToolCallReady):
            call = step.call(event.call_id)
            call.name, call.arguments = event.name, event.arguments
        elif isinstance(event, ApprovalAsked):
            call = step.call(event.call_id)
            call.status, call.preview = "waiting", event.preview
        elif isinstance(event, ApprovalDecided):
            call = step.call(event.call_id)
            call.decision = f"{'allowed' if event.allowed else 'denied'} by {event.by}"
            call.preview = call.preview or event.preview
            if call.status == "waiting":
                call.status = "pending"
        elif isinstance(event, ToolStarted):
            call = step.call(event.call_id)
            call.name = call.name or event.name
            call.status, call.started = "running", event.ts
        elif isinstance(event, ToolFinished):
            call = step.call(event.call_id)
            call.name = call.name or event.name
            call.status, call.ended, call.duration, call.result = event.status, event.ts, event.duration, event.result
            call.reused, call.ahead = event.reused, event.ahead
        elif isinstance(event, ServerToolUsed):
            step.server_tools.append(event)
        elif isinstance(event, ResponseFinished):
            step.response = event
        elif isinstance(event, StepFinished):
            step.finished = event
            self.step = None


_STEP_EVENTS = (
    ApprovalAsked,
    ApprovalDecided,
    TextDelta,
    ReasoningDelta,
    ToolCallArgsDelta,
    ToolOutput,
    ToolCallStarted,
    ToolCallReady,
    ToolStarted,
    ToolFinished,
    ServerToolUsed,
    ResponseFinished,
    StepFinished,
)


def project(events: list[AgentEvent]) -> Projection:
    """A whole log, projected. Text deltas, nine events in ten, take a short path."""
    projection = Projection()
    for event in events:
        step = projection.step
        if step is not None and type(event) is TextDelta:
            step.text.append(event.text)
        else:
            projection.apply(event)
    return projection


def _note(event: Notice | ProviderSwitched | Compacted | SideRequest) -> str:
    """What an export says of an event between the steps: a notice, a switch and its cost, a compaction, a
    side request."""
    if isinstance(event, ProviderSwitched):
        return describe_switch(event)
    if isinstance(event, SideRequest):
        return side_request_summary(event)
    if isinstance(event, Compacted):
        return f"{compaction_summary(event)}; the summary that replaced them:\n{event.summary}"
    return f"{event.level}: {event.message}"
