"""A step's response as it streams in: the one place model events become an assistant message.

The live loop (`agent/loop.py`) and resume (`sessions/resume.py`) both feed a step's events
to a `StepAccumulator` and take the messages from it. A resumed conversation therefore sends
the bytes the original process would have sent, by construction, not by two copies agreeing.

A call that can't be run as written (arguments that aren't a JSON object, arguments larger than
hotloop takes, a call the output limit cut off) is never run, and goes back to the server with
`{}` as its arguments: every server accepts that, while the raw text would make some (llama.cpp)
reject every later request of the session. Its error result tells the model what happened.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import msgspec

from hotloop.providers.conversation import AssistantMessage, Message, Thinking, ToolCall, ToolResultMessage
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ReasoningItemDone,
    ReasoningSignature,
    RedactedReasoning,
    ServerTimings,
    StreamStarted,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)

CANCELLED_RESULT = "cancelled: the user stopped this call before it finished"
MAX_ARGUMENTS = 100_000  # characters of one call's arguments that hotloop runs, logs and sends back
STAND_IN = "{}"  # the arguments an unusable call is sent back with


class ArgumentError(ValueError):
    """A call's arguments can't be used; the message says why, for the model to read."""


def parse_arguments(call: ToolCall) -> dict[str, Any]:
    """The call's arguments as an object, or an ArgumentError the model can learn from."""
    if len(call.arguments) > MAX_ARGUMENTS:
        raise ArgumentError(
            f"the arguments for {call.name} are {len(call.arguments):,} characters, more than the "
            f"{MAX_ARGUMENTS:,} hotloop takes; split the work into smaller calls"
        )
    if not call.arguments.strip():
        return {}
    try:
        arguments = json.loads(call.arguments)
    except json.JSONDecodeError as error:
        raise ArgumentError(
            f"the arguments for {call.name} are not valid JSON ({error.msg} at character {error.pos}): "
            f"{call.arguments[:200]}"
        ) from None
    if not isinstance(arguments, dict):
        raise ArgumentError(f"the arguments for {call.name} must be a JSON object, not {type(arguments).__name__}")
    return arguments


def problem_with(call: ToolCall, cut: bool = False) -> str | None:
    """Why `call` can't be run as written, or None if it can. `cut`: the output limit ended the message in it."""
    if cut:
        return (
            f"{call.name} was cut off by the output limit before its arguments were complete, so it was not run "
            f"(the arguments as written: {call.arguments[:200]}); ask again with less output, or raise max_tokens"
        )
    try:
        parse_arguments(call)
    except ArgumentError as error:
        return str(error)
    return None


_FIRST_TOKEN_EVENTS = (TextDelta, ReasoningDelta, ToolCallStarted, ToolCallArgsDelta)


@dataclass
class StepAccumulator:
    """What one streamed response has produced so far; the times are set only when events come with one."""

    started: float = 0.0
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    thinking: list[Thinking] = field(default_factory=list)
    reasoning_items: list[str] = field(default_factory=list)
    signed_upto: int = 0  # reasoning parts already closed into a signed block
    calls: list[ToolCall] = field(default_factory=list)
    usage: UsageLedger | None = None
    timings: ServerTimings | None = None  # what the server measured itself, when it says
    finish_reason: str = ""
    first_byte: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    streamed: int = 0  # deltas that carried tokens: the tokens a server that streams one at a time sent

    def take(self, event: ModelEvent, now: float | None = None) -> None:
        if now is not None and isinstance(event, StreamStarted) and self.first_byte is None:
            self.first_byte = now
        if isinstance(event, _FIRST_TOKEN_EVENTS):
            self.streamed += 1
            if now is not None:
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
        elif isinstance(event, ReasoningItemDone):
            self.reasoning_items.append(event.item)
        elif isinstance(event, ToolCallReady):
            self.calls.append(ToolCall(event.call_id, event.name, event.arguments))
        elif isinstance(event, Usage):
            self.usage, self.timings = event.ledger, event.timings
        elif isinstance(event, Finished):
            self.finish_reason = event.reason

    @property
    def empty(self) -> bool:
        return not (self.text or self.reasoning or self.calls)

    def problems(self) -> dict[str, str]:
        """The calls that can't be run as written, by id, and why; a message cut by the output limit ends in one."""
        cut = self.finish_reason == "length"
        last = len(self.calls) - 1
        return {
            call.id: problem
            for n, call in enumerate(self.calls)
            if (problem := problem_with(call, cut and n == last)) is not None
        }

    def message(self, interrupted: bool = False) -> AssistantMessage:
        problems = self.problems()
        calls = tuple(
            msgspec.structs.replace(call, arguments=STAND_IN) if call.id in problems else call for call in self.calls
        )
        return AssistantMessage(
            "".join(self.text),
            "".join(self.reasoning),
            calls,
            interrupted,
            tuple(self.thinking),
            tuple(self.reasoning_items),
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

    def ttft(self) -> float | None:
        """Seconds from the request to the response's first byte of any kind.

        Not to its first token: a server that holds a tool call's first fragment back (llama.cpp)
        has done its prefill long before.
        """
        first = self.first_byte if self.first_byte is not None else self.first_token
        return first - self.started if first is not None else None

    def decode_tps(self, per_delta: bool) -> float | None:
        """The server's own decode rate if it reports one, else hotloop's: (tokens − 1) ÷ first-to-last token.

        `per_delta`: the server streams a token a delta (vLLM, llama.cpp, SGLang, Ollama, OpenAI), so
        the deltas are the tokens that streamed; its reported count also holds tokens it never sends
        (the end of the turn, tool-call markup), which made the rate 15–50% too high. Otherwise
        (Anthropic sends several tokens a delta) the reported output count is used.
        """
        if self.timings is not None and self.timings.decode_tps is not None:
            return self.timings.decode_tps
        tokens = self.streamed if per_delta else (self.usage.output if self.usage else None)
        if not tokens or tokens < 2 or self.first_token is None or self.last_token is None:
            return None
        span = self.last_token - self.first_token
        return (tokens - 1) / span if span > 0 else None


def cancelled(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(call.id, call.name, CANCELLED_RESULT, is_error=True)
