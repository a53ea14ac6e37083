"""One watched conversation as a hotloop session: each request a step, emitted as the agent's own events.

A request that ends with a new user prompt starts a turn (`TurnStarted`); each request is a step
(`StepStarted` with its wire fingerprint, the model events as they stream, `ResponseFinished`
with the usage, TTFT, decode rate and the cache explainer's verdict against the conversation's
previous request). The calls the model made are shown (`ToolCallReady`), never run. The agent
runs them between this response and its next request, so a step with calls stays open until that
request arrives: its tool results become `ToolStarted`/`ToolFinished` (each call's duration is the
observed gap, since how the agent spent it is not visible on the wire), then `StepFinished` with
the tool phase, exactly as hotloop's loop finishes a step after its tools: both record through `StepRecorder`.
An answer without calls ends its step and turn at once.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Concatenate, ParamSpec, TypeVar

import msgspec

from hotloop.agent.cache_explainer import CacheExplainer, cache_block
from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ResponseFinished,
    ToolStatus,
    TurnEnd,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.pricing import StepPricer
from hotloop.agent.recorder import StepRecorder
from hotloop.agent.step import CANCELLED_RESULT
from hotloop.providers.conversation import portable_call_id
from hotloop.providers.events import (
    CUT_SHORT,
    ModelEvent,
    ProviderWarning,
    ReasoningDelta,
    ServerHint,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
)
from hotloop.sessions.log import SessionLog
from hotloop.sessions.masking import Masker
from hotloop.watch.reading import ResponseReader
from hotloop.watch.wire import WatchedRequest

Sink = Callable[[str, AgentEvent], None]
_P = ParamSpec("_P")
_R = TypeVar("_R")

if TYPE_CHECKING:
    from hotloop.providers.server_metrics import Residency


@dataclass
class ConversationInfo:
    """What a frontend shows of a watched conversation beside its events."""

    id: str  # its session's id
    agent: str  # the client, from its user-agent: `claude-cli/2.1.332`
    origin: str  # as the session header says it: `watch:claude-cli/2.1.332`
    parent: str  # the conversation a side request branched from, or ""
    title: str  # its first prompt's first line
    provider: str
    model: str
    base_url: str  # the upstream's, to price its steps by
    cost_per_hour: float | None  # the configured provider's, for a self-hosted upstream
    path: str  # the session log

    def pricer(self) -> StepPricer:
        """Prices the conversation's requests: by the upstream's URL, or the configured cost of its hour."""
        hourly = {self.provider: self.cost_per_hour} if self.cost_per_hour is not None else {}
        return StepPricer(servers={self.provider: self.base_url}, hourly=hourly)


@dataclass
class _Open:
    """A step whose response has ended but whose tool calls the agent is still running."""

    step: StepRecorder
    reader: ResponseReader
    calls: list[ToolCallReady]
    ended: float  # perf_counter at the response's end


@dataclass
class _Turn:
    number: int = 0
    steps: int = 0
    started: float = 0.0
    open: bool = False
    step: StepRecorder | None = None
    pending: _Open | None = None


def _in_one_burst(method: Callable[Concatenate[Conversation, _P], _R]) -> Callable[Concatenate[Conversation, _P], _R]:
    """What `method` emits, masked and sent on together at its end: a step's start, or its end, is one burst."""

    def bursting(self: Conversation, /, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        if self._burst is not None:  # within another: its end sends them all, in order
            return method(self, *args, **kwargs)
        burst: list[AgentEvent] = []
        self._burst = burst
        try:
            return method(self, *args, **kwargs)
        finally:
            self._burst = None
            self._send(burst)

    return bursting


class Conversation:
    """Emits a conversation's events to its session log, then to the sink, in order."""

    def __init__(
        self,
        info: ConversationInfo,
        log: SessionLog,
        sink: Sink,
        residency: Callable[[], Residency | None] = lambda: None,
        masker: Masker | None = None,
    ) -> None:
        """`residency` is the upstream's KV residency as last scraped, for the explainer to quote (the watch app's);
        `masker` knows the keys to mask (the watch adds each one a client sends)."""
        self.info = info
        self.log = log
        self.masker = masker or Masker([])
        self._sink = sink
        self._residency = residency
        self._explainer = CacheExplainer()
        self._turn = _Turn()
        self._burst: list[AgentEvent] | None = None  # what a method that emits several events has emitted so far

    def emit(self, event: AgentEvent) -> None:
        """`event` to the log, then the sink, its secrets masked: whatever either writes (a line, a span) is. Within
        a burst (`_burst`), with the burst's other events at its end."""
        if self._burst is not None:
            self._burst.append(event)
        else:
            self._send([event])

    def _send(self, events: list[AgentEvent]) -> None:
        if events:  # most answers' end completes nothing more: their last block had it all
            self._deliver(self.masker.burst(events))

    def _deliver(self, events: list[AgentEvent]) -> None:
        for event in events:
            self.log.write(event)
            self._sink(self.info.id, event)

    @_in_one_burst
    def begin(self, request: WatchedRequest, started: float, started_at: float) -> None:
        """The request was answered: close what it settles (the last step's tools, a turn), open its step."""
        turn = self._turn
        if turn.pending is not None:
            self._close_step(turn.pending, request, started, started_at)
        if request.prompt is not None or not turn.open:
            if turn.open:
                self._end_turn("cancelled" if turn.pending is not None else "answer", started)
            turn.number, turn.steps, turn.started, turn.open = turn.number + 1, 0, started, True
            self.emit(TurnStarted(turn=turn.number, prompt=request.prompt or "", ts=started_at))
        turn.pending = None
        turn.steps += 1
        fingerprint = self._explainer.fingerprint_wire(request.segments, self.info.provider, request.model, started_at)
        turn.step = StepRecorder(self.emit, request.protocol, turn.number, turn.steps)
        turn.step.start(self.info.provider, request.model, fingerprint, ts=started_at)

    def model_events(self, events: list[ModelEvent]) -> None:
        """A received block's events, each run of deltas of one stream joined into one: what arrived at once is one
        log line and one masking, not one per token (a 64-token answer was 72 events)."""
        self._send(
            [
                Notice(level="warning" if isinstance(event, ProviderWarning) else "info", message=event.message)
                if isinstance(event, (ProviderWarning, ServerHint))
                else event
                for event in _joined(events)
            ]
        )

    @_in_one_burst
    def finish(self, reader: ResponseReader, cut: str = "") -> ResponseFinished:
        """The response ended (`cut`: "cancelled" if the client left before its end): its figures, and the step's end
        unless the agent has calls to run."""
        turn, stream = self._turn, reader.step
        assert turn.step is not None, "a response ends the step its request began"
        if cut and stream.finish_reason:
            # The answer had ended (Codex hangs up once it reads `response.completed`, before the stream's own
            # end): the step is whole, and the agent runs its calls.
            cut = ""
        if reader.problem:
            self.emit(Notice(level="error", message=reader.problem))
        timings = stream.timings
        block = cache_block(None, timings.source if timings else "")
        lifetimes = bool(reader.protocol.traits.cache.lifetimes)
        note = self._explainer.explain(stream.usage, [], lifetimes, block, self._residency())
        if reader.cache_miss_reason:
            note = (
                f"{note}; Anthropic's diagnostics: {reader.cache_miss_reason}"
                if note
                else (f"Anthropic's diagnostics: {reader.cache_miss_reason}")
            )
        now = time.perf_counter()
        finish_reason = stream.finish_reason or ("error" if reader.problem else "")
        response = turn.step.respond(stream, now, note, finish_reason=finish_reason)
        calls = [ToolCallReady(n, call.id, call.name, call.arguments) for n, call in enumerate(stream.calls)]
        if calls and not cut and not reader.problem:
            turn.pending = _Open(turn.step, reader, calls, now)
            return response
        turn.step.finish(time.perf_counter(), cut=cut)
        if cut:
            self._end_turn("cancelled", now)
        elif reader.problem:
            self._end_turn("error", now)
        else:
            self._end_turn("cut_off" if stream.finish_reason in CUT_SHORT else "answer", now)
        return response

    def close(self) -> None:
        """The watch ends: a step still waiting for its tools ends without them, its turn interrupted."""
        turn = self._turn
        if turn.pending is not None:
            pending, turn.pending = turn.pending, None
            pending.step.finish(time.perf_counter())
            self._end_turn("interrupted", time.perf_counter())
        self._deliver(self.masker.release())
        self.log.close()

    def _close_step(self, pending: _Open, request: WatchedRequest, started: float, started_at: float) -> None:
        """The calls of the last step ran between its response and this request: their results, then its end.

        A call's time is that gap, from the answer that asked for it to the request that carried its result,
        measured once and placed by it: its start is `started_at` less the gap, not a clock read after the answer
        was logged (a loop held by a slow write had put the start beside the end). The calls start together, then
        end together, as the wire shows them: a replay runs them side by side.
        """
        results = {result.call_id: result for result in request.results}
        # An agent may send a call's id back as every provider takes it (hotloop does: vLLM's are too long).
        answered = [
            (call, results.get(call.call_id) or results.get(portable_call_id(call.call_id)))
            for call in pending.calls
            # A call this request doesn't answer (and no prompt gave up on): not one the wire shows an end for.
            if call.call_id in results or portable_call_id(call.call_id) in results or request.prompt is not None
        ]
        gap, step = max(started - pending.ended, 0.0), pending.step
        for call, _ in answered:
            step.tool_started(call.call_id, call.name, call.arguments, ts=started_at - gap)
        step.phase.count = len(answered)
        for call, result in answered:
            status: ToolStatus = "cancelled" if result is None else "error" if result.is_error else "ok"
            content = CANCELLED_RESULT if result is None else result.content
            step.tool_finished(call.call_id, call.name, status, content, (started - gap, started), ts=started_at)
        # The step's wall ends where the next request began, not when this one was read.
        step.finish(started)

    def _end_turn(self, reason: TurnEnd, now: float) -> None:
        turn = self._turn
        turn.open = False
        self.emit(TurnFinished(turn=turn.number, reason=reason, steps=turn.steps, wall=now - turn.started))


def _joined(events: list[ModelEvent]) -> list[ModelEvent]:
    """Consecutive deltas of one stream (the answer, the reasoning, one call's arguments) as one delta.

    Every event of every answer passes here: the test of each is inline, not a call per event."""
    joined: list[ModelEvent] = []
    run: list[str] = []  # the pieces of the deltas `joined[-1]` stands for
    last: type | None = None  # the type of `joined[-1]` while it is a delta
    for event in events:
        piece: str | None = None
        continues = False
        if isinstance(event, (TextDelta, ReasoningDelta)):
            piece, continues = event.text, type(event) is last
        elif isinstance(event, ToolCallArgsDelta):
            piece, previous = event.fragment, joined[-1] if last is ToolCallArgsDelta else None
            continues = (
                isinstance(previous, ToolCallArgsDelta)
                and previous.index == event.index
                and previous.call_id == event.call_id
            )
        if continues and piece is not None:
            run.append(piece)
            continue
        if len(run) > 1:
            joined[-1] = _whole(joined[-1], run)
        joined.append(event)
        run = [piece] if piece is not None else []
        last = type(event) if piece is not None else None
    if len(run) > 1:
        joined[-1] = _whole(joined[-1], run)
    return joined


def _whole(first: ModelEvent, pieces: list[str]) -> ModelEvent:
    field = "fragment" if isinstance(first, ToolCallArgsDelta) else "text"
    return msgspec.structs.replace(first, **{field: "".join(pieces)})
