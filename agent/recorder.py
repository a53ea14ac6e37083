"""A step as events, in their one order: `StepStarted`, the model's events, `ResponseFinished`, the tool phase,
`StepFinished`; every figure of them computed here, once.

Three producers feed it what a step produced: the loop as it runs (`agent/loop.py`, its tool runner the tool
events), the watch as it reads traffic (`watch/conversation.py`) and the importers as they read a transcript
(`sessions/imports/writer.py`). Each hands over the step's `StepAccumulator`, its clock readings and what only it
knows (a cache note, the route); the recorder turns them into events. `StepFinished` repeats its response's
figures: a field the two share is carried over whatever it is, so a new one is computed in `response` alone.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    ToolStatus,
)
from hotloop.agent.fingerprint import Fingerprint
from hotloop.agent.step import StepAccumulator
from hotloop.providers.protocols import Wire

Emit = Callable[[AgentEvent], None]
# The figures a step's end repeats from its response.
_CARRIED = tuple(set(StepFinished.__struct_fields__) & set(ResponseFinished.__struct_fields__) - {"ts"})


@dataclass
class ToolPhase:
    """A step's tool runs, as (start, end) spans."""

    count: int = 0
    spans: list[tuple[float, float]] = field(default_factory=list)

    @property
    def durations(self) -> list[float]:
        return [end - start for start, end in self.spans]

    @property
    def wall(self) -> float:
        """Seconds during which at least one tool ran.

        Not first start to last end: with early dispatch a call starts while the model still writes
        the next, and that writing is the model's time, not the tools'.
        """
        ran, reached = 0.0, float("-inf")
        for start, end in sorted(self.spans):
            ran += max(end - max(start, reached), 0.0)
            reached = max(reached, end)
        return ran


class StepRecorder:
    """One step's events to `emit`. `wire`: the protocol the step spoke, which says how its decode rate is read."""

    def __init__(self, emit: Emit, wire: Wire, turn: int, step: int) -> None:
        self.emit = emit
        self.wire = wire
        self.turn = turn
        self.step = step
        self.phase = ToolPhase()
        self.stream: StepAccumulator | None = None
        self.response: ResponseFinished | None = None

    def start(self, provider: str, model: str, fingerprint: Fingerprint | None, ts: float | None = None) -> None:
        self.emit(
            StepStarted(
                turn=self.turn,
                step=self.step,
                provider=provider,
                model=model,
                fingerprint=fingerprint,
                ts=_now(ts),
            )
        )

    def respond(
        self,
        stream: StepAccumulator,
        now: float,
        cache_note: str,
        *,
        route: str = "",
        connect: float = 0.0,
        finish_reason: str | None = None,
        ts: float | None = None,
        said: bool = True,
    ) -> ResponseFinished:
        """The response's figures as far as it came, `now` its end (on the clock `stream.started` read), kept for
        the step's end; `said` False keeps it unsaid: a step cancelled mid-stream ends without its response."""
        timings = stream.timings
        self.stream = stream
        self.response = ResponseFinished(
            turn=self.turn,
            step=self.step,
            usage=stream.usage,
            ttft=stream.ttft(),
            decode_tps=stream.decode_tps(per_delta=self.wire.traits.per_delta),
            model_time=max(now - stream.started, 0.0),
            finish_reason=stream.finish_reason if finish_reason is None else finish_reason,
            route=route,
            connect=connect,
            cache_note=cache_note,
            figures_by=timings.source if timings is not None else "",
            server_prefill=timings.prefill if timings is not None else None,
            answered_by=stream.answered_by,
            ts=_now(ts),
        )
        if said:
            self.emit(self.response)
        return self.response

    def tool_started(self, call_id: str, name: str, arguments: str, ts: float | None = None) -> None:
        self.emit(ToolStarted(call_id=call_id, name=name, arguments=arguments, ts=_now(ts)))

    def tool_finished(
        self,
        call_id: str,
        name: str,
        status: ToolStatus,
        result: str,
        span: tuple[float, float],
        *,
        reused: str = "",
        ahead: float = 0.0,
        ts: float | None = None,
    ) -> None:
        """A call's end; `span` its start and end on the clock the step's own times read."""
        started, ended = span
        self.phase.spans.append(span)
        self.emit(
            ToolFinished(
                call_id=call_id,
                name=name,
                status=status,
                duration=ended - started,
                result=result,
                reused=reused,
                ahead=ahead,
                ts=_now(ts),
            )
        )

    def finish(self, now: float, cut: str = "", ts: float | None = None) -> StepFinished:
        """The step's end at `now`, with its response's figures and its tools'; `cut`: why it stopped before its end.

        A step cut short is finished all the same: the provider billed what it streamed.
        """
        assert self.response is not None and self.stream is not None, "a step ends after its response"
        response, phase = self.response, self.phase
        finished = StepFinished(
            **{name: getattr(response, name) for name in _CARRIED},
            wall=max(now - self.stream.started, 0.0),
            tool_count=phase.count,
            tool_sum=sum(phase.durations),
            tool_wall=phase.wall,
            cut=cut,
            ts=_now(ts),
        )
        self.emit(finished)
        return finished


def _now(ts: float | None) -> float:
    """An event's time: the one a source recorded, else now (what an event left to its default reads)."""
    return time.time() if ts is None else ts
