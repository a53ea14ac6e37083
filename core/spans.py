"""Spans from one stream of events: a turn, its model requests (side requests too), and their tool calls.

`Spans` builds them after the fact from the events' own wall-clock `ts` (`start_time`/`end_time` in ns), so a
span says when the thing happened, not when the event was seen: parallel tool calls overlap as they ran. Names
and attributes follow the GenAI semantic conventions (`invoke_agent`, `chat {model}`, `execute_tool {name}`,
`gen_ai.*`); hotloop's own figures, which the conventions lack, go under `hotloop.`. A figure a provider didn't
report is left out, never 0. A session has one stream (`Telemetry.spans`); the watch has one per conversation
(`Telemetry.stream`), all sent by the one exporter of `telemetry.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    OwnRequest,
    ProviderSwitched,
    ResponseFinished,
    SideRequest,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.providers.events import TextDelta, UsageLedger

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span, Tracer
    from opentelemetry.util.types import AttributeValue

    from hotloop.agent.pricing import StepPricer
    from hotloop.config import Config
    from hotloop.sessions.masking import Masker

ENDED_BADLY = frozenset({"cancelled", "error", "interrupted"})


def _ns(ts: float) -> int:
    return int(ts * 1e9)


@dataclass
class _Step:
    span: Span
    provider: str
    model: str
    responded: float | None = None  # the ts of its ResponseFinished: the model's part ends there
    text: list[str] = field(default_factory=list)


class Spans:
    """One stream's spans: `observe` takes its events in order, `end_open` ends what they left open."""

    def __init__(
        self,
        tracer: Tracer,
        config: Config,
        pricer: StepPricer,
        masker: Masker,
        conversation: Callable[[], str | None] = lambda: None,
    ) -> None:
        """`pricer` prices the stream's requests as the printer does; `conversation` names the session, if any."""
        self.capture = config.telemetry.capture_content
        self._tracer = tracer
        self._config = config
        self._pricer = pricer
        self._masker = masker
        self._conversation = conversation
        self._turn: Span | None = None
        self._step: _Step | None = None
        self._tools: dict[str, Span] = {}
        self._last_ts = 0.0

    def observe(self, event: AgentEvent) -> None:
        """One event of the stream: a span begun, given its figures, or ended."""
        self._last_ts = max(self._last_ts, event.ts)
        if isinstance(event, TextDelta):
            if self.capture and self._step is not None:
                self._step.text.append(event.text)
        elif isinstance(event, TurnStarted):
            self._turn_started(event)
        elif isinstance(event, StepStarted):
            self._pricer.learn(event)
            self._step_started(event)
        elif isinstance(event, ResponseFinished):
            if self._step is not None:
                self._step.responded = event.ts
                if event.answered_by:
                    self._step.span.set_attribute("gen_ai.response.model", event.answered_by)
        elif isinstance(event, ToolStarted):
            self._tool_started(event)
        elif isinstance(event, ToolFinished):
            self._tool_finished(event)
        elif isinstance(event, StepFinished):
            self._step_finished(event)
        elif isinstance(event, TurnFinished):
            self._turn_finished(event)
        elif isinstance(event, ProviderSwitched):
            self._pricer.learn(event)
        elif isinstance(event, Compacted | SideRequest):
            self._own_request(event)

    def _turn_started(self, event: TurnStarted) -> None:
        from opentelemetry.trace import SpanKind

        self.end_open("a new turn began")
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.agent.name": "hotloop",
            "hotloop.turn": event.turn,
        }
        if (conversation := self._conversation()) is not None:
            attributes["gen_ai.conversation.id"] = conversation
        if self.capture:
            parts = [{"type": "text", "content": self._masked(text)} for text in (event.prompt, event.context) if text]
            attributes["gen_ai.input.messages"] = json.dumps([{"role": "user", "parts": parts}])
        self._turn = self._tracer.start_span(
            "invoke_agent hotloop", kind=SpanKind.INTERNAL, attributes=attributes, start_time=_ns(event.ts)
        )

    def _step_started(self, event: StepStarted) -> None:
        from opentelemetry.trace import SpanKind

        self._end_step(None, event.ts, "a new step began")
        attributes = self._request(event.provider, event.model) | {
            "hotloop.turn": event.turn,
            "hotloop.step": event.step,
        }
        span = self._tracer.start_span(
            f"chat {event.model}",
            context=self._under(self._turn),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(event.ts),
        )
        self._step = _Step(span, event.provider, event.model)

    def _request(self, provider: str, model: str) -> dict[str, AttributeValue]:
        """What a `chat` span says of where its request went."""
        settings = self._config.providers.get(provider)
        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "chat",
            # The conventions' names for the vendors' own APIs (`openai`, `anthropic`), else the configured one.
            "gen_ai.provider.name": settings.sdk if settings is not None and settings.key_required else provider,
            "gen_ai.request.model": model,
            "hotloop.provider": provider,
        }
        if settings is not None:
            attributes["hotloop.protocol"] = settings.protocol
        if tier := self._config.tier_of(provider, model):
            attributes["hotloop.tier"] = tier
        return attributes

    def _cost(self, event: StepFinished | OwnRequest) -> dict[str, AttributeValue]:
        """A request's dollars as the printer prices them; nothing when no price is known."""
        cost = self._pricer.cost(event)
        if cost is None:
            return {}
        priced = {"hotloop.cost.usd": float(cost.total), "hotloop.cost.source": cost.source}
        return priced | ({"hotloop.cost.priced_as": cost.priced_as} if cost.priced_as else {})

    def _tool_started(self, event: ToolStarted) -> None:
        from opentelemetry.trace import SpanKind

        attributes: dict[str, AttributeValue] = {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": event.name,
            "gen_ai.tool.call.id": event.call_id,
            "gen_ai.tool.type": "function",
            # Dispatched while the model was still answering: its arguments were complete in the stream.
            "hotloop.tool.early_dispatch": self._step is not None and self._step.responded is None,
        }
        if self.capture:
            attributes["gen_ai.tool.call.arguments"] = self._masked(event.arguments)
        parent = self._step.span if self._step is not None else self._turn
        self._tools[event.call_id] = self._tracer.start_span(
            f"execute_tool {event.name}",
            context=self._under(parent),
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            start_time=_ns(event.ts),
        )

    def _tool_finished(self, event: ToolFinished) -> None:
        from opentelemetry.trace import StatusCode

        span = self._tools.pop(event.call_id, None)
        if span is None:  # a result with no start seen (a memo or a prefetch): it ran for `duration` up to now
            self._tool_started(
                ToolStarted(call_id=event.call_id, name=event.name, arguments="", ts=event.ts - event.duration)
            )
            span = self._tools.pop(event.call_id)
        span.set_attribute("hotloop.tool.status", event.status)
        span.set_attribute("hotloop.tool.duration", event.duration)
        if event.reused:
            span.set_attribute("hotloop.tool.reused", event.reused)  # "memo" or "prefetch"
        if event.reused == "prefetch":
            span.set_attribute("hotloop.tool.prefetch_ahead", event.ahead)
        if self.capture:
            span.set_attribute("gen_ai.tool.call.result", self._masked(event.result))
        if event.status != "ok":
            span.set_attribute("error.type", event.status)
            span.set_status(StatusCode.ERROR, event.status)
        span.end(end_time=_ns(event.ts))

    def _step_finished(self, event: StepFinished) -> None:
        step = self._step
        if step is None:
            return
        step.span.set_attributes(_step_attributes(event) | self._cost(event))
        if self.capture and step.text:
            message = {"role": "assistant", "parts": [{"type": "text", "content": self._masked("".join(step.text))}]}
            step.span.set_attribute(
                "gen_ai.output.messages", json.dumps([{**message, "finish_reason": event.finish_reason}])
            )
        self._end_step(event.cut or None, event.ts)

    def _own_request(self, event: OwnRequest) -> None:
        """A compaction's summary request or a pre-warm: a `chat` span of its own, under the turn if one is open."""
        from opentelemetry.trace import SpanKind, StatusCode

        kind = event.kind if isinstance(event, SideRequest) else "compaction"
        attributes = self._request(event.provider, event.model) | _usage_attributes(event.usage)
        own: dict[str, AttributeValue] = {"hotloop.request.kind": kind, "hotloop.model_time": event.model_time}
        attributes |= own | self._cost(event)
        span = self._tracer.start_span(
            f"chat {event.model}",
            context=self._under(self._turn),
            kind=SpanKind.CLIENT,
            attributes=attributes,
            start_time=_ns(event.ts - event.model_time),
        )
        if isinstance(event, SideRequest) and event.outcome != "answered":
            span.set_attribute("error.type", event.outcome)
            span.set_status(StatusCode.ERROR, event.error or event.outcome)
        span.end(end_time=_ns(event.ts))

    def _turn_finished(self, event: TurnFinished) -> None:
        from opentelemetry.trace import StatusCode

        self._end_step("cancelled" if event.reason == "cancelled" else None, event.ts)
        self._end_tools(event.ts)
        if self._turn is None:
            return
        self._turn.set_attribute("hotloop.turn.end", event.reason)
        self._turn.set_attribute("hotloop.turn.steps", event.steps)
        if event.reason in ENDED_BADLY:
            self._turn.set_attribute("error.type", event.reason)
            self._turn.set_status(StatusCode.ERROR, event.reason)
        self._turn.end(end_time=_ns(event.ts))
        self._turn = None

    # -- spans still open ---------------------------------------------------------------------

    def _end_step(self, cut: str | None, ts: float, why: str = "") -> None:
        """End the open step's span where its model part ended (`cut`: how it stopped short, an error)."""
        from opentelemetry.trace import StatusCode

        step, self._step = self._step, None
        if step is None:
            return
        if cut or why:
            step.span.set_attribute("error.type", cut or "interrupted")
            step.span.set_status(StatusCode.ERROR, cut or why)
        step.span.end(end_time=_ns(step.responded if step.responded is not None else ts))

    def _end_tools(self, ts: float) -> None:
        from opentelemetry.trace import StatusCode

        for span in self._tools.values():
            span.set_status(StatusCode.ERROR, "ended with its turn")
            span.end(end_time=_ns(ts))
        self._tools.clear()

    def end_open(self, why: str) -> None:
        """End whatever is still open at the last event's time, as an error saying `why`."""
        from opentelemetry.trace import StatusCode

        self._end_step(None, self._last_ts, why)
        self._end_tools(self._last_ts)
        if self._turn is not None:
            self._turn.set_attribute("error.type", "interrupted")
            self._turn.set_status(StatusCode.ERROR, why)
            self._turn.end(end_time=_ns(self._last_ts))
            self._turn = None

    def _under(self, parent: Span | None) -> Context | None:
        from opentelemetry.trace import set_span_in_context

        return set_span_in_context(parent) if parent is not None else None

    def _masked(self, text: str) -> str:
        return self._masker.masked(text.encode()).decode(errors="replace")


def _step_attributes(step: StepFinished) -> dict[str, AttributeValue]:
    """A finished step's figures as attributes: the conventions' where they have one, `hotloop.` otherwise."""
    usage = step.usage
    figures: dict[str, int | float | str | None] = {
        "gen_ai.response.time_to_first_chunk": step.ttft,
        "hotloop.decode.tokens_per_second": step.decode_tps,
        "hotloop.decode.measured_by": (step.figures_by or "hotloop") if step.decode_tps is not None else None,
        "hotloop.server_prefill_time": step.server_prefill,
        "hotloop.model_time": step.model_time,
        "hotloop.step.wall": step.wall,
        "hotloop.step.tool_count": step.tool_count,
        "hotloop.step.tool_wall": step.tool_wall,
        "hotloop.step.tool_sum": step.tool_sum,
        "hotloop.cache.verdict": step.cache_note or None,
        "hotloop.route": step.route or None,
    }
    attributes: dict[str, AttributeValue] = {name: value for name, value in figures.items() if value is not None}
    attributes |= _usage_attributes(usage)
    if step.finish_reason:
        attributes["gen_ai.response.finish_reasons"] = (step.finish_reason,)
    return attributes


def _usage_attributes(usage: UsageLedger | None) -> dict[str, AttributeValue]:
    """A request's usage, the figures it reported; none of them when it reported no usage."""
    if usage is None:
        return {}
    figures = {
        "gen_ai.usage.input_tokens": usage.prompt_total,  # cached tokens included, as the conventions ask
        "gen_ai.usage.output_tokens": usage.output,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_write,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning,
        "hotloop.usage.uncached_input_tokens": usage.uncached,  # prefilled from scratch
        "hotloop.usage.cache_creation_1h.input_tokens": usage.cache_write_1h,
        "hotloop.usage.below_cache_min": usage.below_cache_min,
        "hotloop.usage.distrust": usage.distrust,
    }
    return {name: value for name, value in figures.items() if value is not None}
