"""A step's response as it streams in: the one place model events become an assistant message.

The live loop (`agent/loop.py`) and resume (`sessions/resume.py`) both feed a step's events
to a `StepAccumulator` and take the messages from it. A resumed conversation therefore sends
the bytes the original process would have sent, by construction, not by two copies agreeing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from hotloop.providers.conversation import AssistantMessage, Message, Thinking, ToolCall, ToolResultMessage
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)

CANCELLED_RESULT = "cancelled: the user stopped this call before it finished"
_FIRST_TOKEN_EVENTS = (TextDelta, ReasoningDelta, ToolCallStarted, ToolCallArgsDelta)


@dataclass
class StepAccumulator:
    """What one streamed response has produced so far; the times are set only when events come with one."""

    started: float = 0.0
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    thinking: list[Thinking] = field(default_factory=list)
    signed_upto: int = 0  # reasoning parts already closed into a signed block
    calls: list[ToolCall] = field(default_factory=list)
    usage: UsageLedger | None = None
    finish_reason: str = ""
    first_token: float | None = None
    last_token: float | None = None

    def take(self, event: ModelEvent, now: float | None = None) -> None:
        if now is not None and isinstance(event, _FIRST_TOKEN_EVENTS):
            if self.first_token is None:
                self.first_token = now
            self.last_token = now
        if isinstance(event, TextDelta):
            self.text.append(event.text)
        elif isinstance(event, ReasoningDelta):
            self.reasoning.append(event.text)
        elif isinstance(event, ReasoningSignature):
            self.thinking.append(Thinking("".join(self.reasoning[self.signed_upto :]), event.signature))
            self.signed_upto = len(self.reasoning)
        elif isinstance(event, RedactedReasoning):
            self.thinking.append(Thinking(redacted=event.data))
        elif isinstance(event, ToolCallReady):
            self.calls.append(ToolCall(event.call_id, event.name, event.arguments))
        elif isinstance(event, Usage):
            self.usage = event.ledger
        elif isinstance(event, Finished):
            self.finish_reason = event.reason

    @property
    def empty(self) -> bool:
        return not (self.text or self.reasoning or self.calls)

    def message(self, interrupted: bool = False) -> AssistantMessage:
        return AssistantMessage(
            "".join(self.text), "".join(self.reasoning), tuple(self.calls), interrupted, tuple(self.thinking)
        )

    def cut_short(self, results: Mapping[str, ToolResultMessage]) -> list[Message]:
        """What a step that stopped mid-stream leaves in the history.

        Its partial answer, marked interrupted, then every complete call's result: the one it
        got, if it ran (early dispatch), else a `cancelled` one, so the history stays valid.
        """
        if self.empty:
            return []
        closing: list[Message] = [self.message(interrupted=True)]
        closing += [results.get(call.id) or cancelled(call) for call in self.calls]
        return closing

    def decode_tps(self) -> float | None:
        """(output − 1) ÷ first-to-last token, from the reported output count; None when it can't be known."""
        output = self.usage.output if self.usage else None
        if not output or output < 2 or self.first_token is None or self.last_token is None:
            return None
        span = self.last_token - self.first_token
        return (output - 1) / span if span > 0 else None


def cancelled(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(call.id, call.name, CANCELLED_RESULT, is_error=True)
