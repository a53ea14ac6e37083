"""The events of the agent loop, and the one typed stream that carries them with the model's.

The TUI, the headless printer, the session log and replay all consume `AgentEvent`s. Every
event has a wall-clock `ts`, so a logged session can be redrawn at its recorded pace.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Literal

import msgspec

from hotloop.agent.fingerprint import Fingerprint
from hotloop.nesting import decoded
from hotloop.providers.events import (
    Event,
    Finished,
    ReasoningDelta,
    ReasoningItemDone,
    ReasoningSignature,
    RedactedReasoning,
    ServerToolUsed,
    StreamStarted,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)

ToolStatus = Literal["ok", "error", "cancelled"]
# "interrupted": the process stopped mid-turn (killed); written when the session is resumed.
# "cut_off": the answer ended because the output limit (or the context) was reached, not because it was done.
TurnEnd = Literal["answer", "cut_off", "max_steps", "cancelled", "error", "interrupted"]


class TurnStarted(Event, frozen=True):
    """A user turn. The model receives `prompt` followed by `context` (the volatile facts)."""

    turn: int
    prompt: str
    context: str = ""


class StepStarted(Event, frozen=True):
    turn: int
    step: int
    provider: str
    model: str
    fingerprint: Fingerprint | None = None  # the request by segment, to explain a cache miss later


class ToolStarted(Event, frozen=True):
    call_id: str
    name: str
    arguments: str


class ToolOutput(Event, frozen=True):
    """Output a tool streams while it runs (shown live; the result is in `ToolFinished`)."""

    call_id: str
    text: str


class ToolFinished(Event, frozen=True):
    call_id: str
    name: str
    status: ToolStatus
    duration: float
    result: str
    reused: str = ""  # "memo": an identical read-only call's earlier result; "prefetch": run before it was asked for
    ahead: float = 0.0  # prefetch: seconds of the call's run that were done before the model asked


class ResponseFinished(Event, frozen=True):
    """The model's response to a step is complete: its usage and timings, before any tool runs."""

    turn: int
    step: int
    usage: UsageLedger | None
    ttft: float | None
    decode_tps: float | None
    model_time: float
    finish_reason: str
    route: str = ""  # the tier that answered and why, e.g. "auto: complex → strong"
    connect: float = 0.0  # seconds of opening the connection this request paid (the warm-up hadn't finished)
    # Why the cache read less than the unchanged prefix, e.g. "cache miss: system prompt changed …".
    cache_note: str = ""
    # The server's own figures, when it reports them (llama.cpp): who says so, and its prefill time.
    # `decode_tps` is then the server's too; otherwise hotloop measured it.
    figures_by: str = ""
    server_prefill: float | None = None
    answered_by: str = ""  # the model the server says answered ("": it said none)


class StepFinished(Event, frozen=True):
    """One model request and its tool phase. Times are seconds; `None` means not measured."""

    turn: int
    step: int
    usage: UsageLedger | None
    ttft: float | None
    decode_tps: float | None
    model_time: float
    wall: float
    tool_count: int
    tool_sum: float
    tool_wall: float
    finish_reason: str
    route: str = ""
    cache_note: str = ""
    figures_by: str = ""
    server_prefill: float | None = None
    cut: str = ""  # "cancelled": the step stopped before its end (Esc, Ctrl-C); what it streamed was billed


class TurnFinished(Event, frozen=True):
    turn: int
    reason: TurnEnd
    steps: int
    wall: float


class ProviderSwitched(Event, frozen=True):
    """The conversation moved to another provider or model, and what that will cost.

    `context_tokens` is the conversation's prompt size, estimated from the last reported
    usage; `cold_tokens` is the part of it the new provider has not cached and must prefill.
    Both are None while no usage has been reported.
    """

    provider: str
    model: str
    previous_provider: str
    previous_model: str
    context_tokens: int | None
    cold_tokens: int | None
    base_url: str = ""  # the new provider's server
    cost_per_hour: float | None = None  # what the config says that server costs an hour, to price its steps by


class SessionTitled(Event, frozen=True):
    """A short title for the session, written in the background after its first turn."""

    title: str
    model: str


class SideOf(Event, frozen=True):
    """A watched conversation turned out to be a side request of `parent` after its log began (a title request that
    arrived before the conversation it titles): it supersedes the header's `side_of`."""

    parent: str


class ApprovalAsked(Event, frozen=True):
    """A call with side effects waits for the user: `preview` is what it would do (a diff, a command)."""

    call_id: str
    name: str
    subject: str  # what rules match against: the command, the path, or the arguments
    preview: str = ""


class ApprovalDecided(Event, frozen=True):
    """Whether a call with side effects may run, and who said so (a rule, the user, a flag, a hook)."""

    call_id: str
    name: str
    allowed: bool
    by: str
    reason: str = ""  # a denial's, passed on to the model
    preview: str = ""  # what the call does, where no question carried it


class HookRan(Event, frozen=True):
    """A configured hook ran (`ts` is its end): for the waterfall, and the log of what it decided."""

    hook_event: str  # PreToolUse, PostToolUse, UserPromptSubmit or Stop
    command: str
    seconds: float
    call_id: str = ""  # the call a tool event's hook ran for
    decision: str = ""  # allow, ask or deny; "" said nothing


class Compacted(Event, frozen=True):
    """The conversation now goes on from `summary` in place of its first `turns` turns (the log keeps them all).

    The summary came from the conversation's own model, asked at the end of the conversation's
    exact request (so it read the cache); `usage` and the times are that request's.
    `context_tokens` is how full the context was before (the last step's prompt and answer, as the
    server counted them; `before_estimated`: plus an estimate of what a turn added since), and
    `after_tokens` the compacted conversation's size: the server's counts of the system prompt and
    tools (from the conversation's first request) and of the summary, plus an estimate of the
    opening's few tokens (`agent/compaction.py`); `window` the context window, if known.
    """

    trigger: Literal["manual", "auto"]
    turns: int
    summary: str
    provider: str
    model: str
    usage: UsageLedger | None
    ttft: float | None
    model_time: float
    context_tokens: int | None = None
    after_tokens: int | None = None
    window: int | None = None
    cache_note: str = ""
    before_estimated: bool = False


class SideRequest(Event, frozen=True):
    """A request the session sent beside its conversation (a pre-warm), counted and priced with it, never a step.

    `why` is what sent it (a pre-warm's: "start", "switch" or "idle"). "cancelled": a prompt went out first; it
    had reached the server and may be billed in part, its usage unknown. "failed": `error` says why. `shared`: the
    tokens its prompt has in common with the conversation's next request (all but its own ask), what a cache can
    keep for that request; None where unknown (a log from before it was recorded).
    """

    kind: str
    why: str
    provider: str
    model: str
    usage: UsageLedger | None
    model_time: float
    outcome: Literal["answered", "cancelled", "failed"] = "answered"
    error: str = ""
    shared: int | None = None


# The requests that carry their own provider and model, priced as those rather than as the step in progress.
OwnRequest = Compacted | SideRequest


class Notice(Event, frozen=True):
    """Something the user should read: a failed MCP server, a provider error, a step cap."""

    level: Literal["info", "warning", "error"]
    message: str


AgentEvent = (
    TurnStarted
    | StepStarted
    | StreamStarted
    | TextDelta
    | ReasoningDelta
    | ReasoningSignature
    | RedactedReasoning
    | ReasoningItemDone
    | ToolCallStarted
    | ToolCallArgsDelta
    | ToolCallReady
    | ServerToolUsed
    | Usage
    | Finished
    | ResponseFinished
    | ApprovalAsked
    | ApprovalDecided
    | HookRan
    | ToolStarted
    | ToolOutput
    | ToolFinished
    | StepFinished
    | TurnFinished
    | ProviderSwitched
    | SessionTitled
    | SideOf
    | Compacted
    | SideRequest
    | Notice
)

_encoder = msgspec.json.Encoder()
_decoder: msgspec.json.Decoder[AgentEvent] = msgspec.json.Decoder(AgentEvent)


def encode(event: AgentEvent) -> bytes:
    """One event as a line of JSON, without the newline."""
    return _encoder.encode(event)


def encode_lines(events: Iterable[AgentEvent]) -> bytes:
    """Events as lines of JSON, each with its newline: one call for a batch of them."""
    return _encoder.encode_lines(events)


def decode(line: bytes | str) -> AgentEvent:
    """One line of a log as its event; a `msgspec.DecodeError` if it is none (`TooDeep` if nested too deep)."""
    return decoded(_decoder.decode, line)


def fan_out(*sinks: Callable[[AgentEvent], None]) -> Callable[[AgentEvent], None]:
    """One sink that hands each event to every one of `sinks`, in order."""

    def emit(event: AgentEvent) -> None:
        for sink in sinks:
            sink(event)

    return emit
