"""A step's response as it streams in: the one place model events become an assistant message.

The live loop (`agent/loop.py`) and resume (`sessions/resume.py`) both feed a step's events
to a `StepAccumulator` and take the messages from it. A resumed conversation therefore sends
the bytes the original process would have sent, by construction, not by two copies agreeing.

A call that can't be run as written (arguments that aren't a JSON object, arguments larger than
hotloop takes, a call the output limit or the context window cut off) is never run, and goes back to
the server with `{}` as its arguments: every server accepts that, while the raw text would make some
(llama.cpp) reject every later request of the session. Its error result tells the model what happened.
A cut message's last call whose arguments are a whole object runs: the cut fell after them (on the
closing markup of a `<tool_call>`, say).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import msgspec

from hotloop.nesting import decoded
from hotloop.providers.conversation import AssistantMessage, Message, Thinking, ToolCall, ToolResultMessage
from hotloop.providers.events import (
    CUT_SHORT,
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
# Tokens short of the window a stop is still the window's: llama.cpp stops once prompt, answer and the next
# token fill a slot's context.
WINDOW_SLACK = 2


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
        arguments = decoded(json.loads, call.arguments)
    except json.JSONDecodeError as error:
        raise ArgumentError(
            f"the arguments for {call.name} are not valid JSON ({error.msg} at character {error.pos}): "
            f"{call.arguments[:200]}"
        ) from None
    if not isinstance(arguments, dict):
        raise ArgumentError(f"the arguments for {call.name} must be a JSON object, not {type(arguments).__name__}")
    return arguments


def problem_with(call: ToolCall, cut: str = "") -> str | None:
    """Why `call` can't be run as written, or None if it can. `cut`: the finish reason of a message that was cut
    short in it (`length`, `context_window`); its arguments tell whether the cut fell in them."""
    if cut in CUT_SHORT and not call.arguments.strip():
        return _cut_in(call, cut)  # cut before its arguments began: `{}` would run it with none
    try:
        parse_arguments(call)
    except ArgumentError as error:
        if cut in CUT_SHORT and len(call.arguments) <= MAX_ARGUMENTS:
            return _cut_in(call, cut)
        return str(error)
    return None


def _cut_in(call: ToolCall, reason: str) -> str:
    by, advice = (
        ("the output limit", "ask again with less output, or raise max_tokens")
        if reason == "length"
        else ("the context window", "the context is full: it must be compacted (/compact) before more can be written")
    )
    return (
        f"{call.name} was cut off by {by} before its arguments were complete, so it was not run "
        f"(the arguments as written: {call.arguments[:200]}); {advice}"
    )


_FIRST_TOKEN_EVENTS = frozenset({TextDelta, ReasoningDelta, ToolCallStarted, ToolCallArgsDelta})


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
    answered_by: str = ""  # the model the server says answered
    finish_reason: str = ""
    first_byte: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    streamed: int = 0  # deltas that carried tokens: the tokens a server that streams one at a time sent
    cap: int | None = None  # the output cap the request was sent with, if any
    window: int | None = None  # the context window the request went to, if known

    def take(self, event: ModelEvent, now: float | None = None) -> None:
        # By type, not `isinstance`: every event of a step passes here, and an `isinstance` that fails on a struct
        # class costs four times one that holds (none of these has a subclass).
        kind = type(event)
        if now is not None and kind is StreamStarted and self.first_byte is None:
            self.first_byte = now
        if kind in _FIRST_TOKEN_EVENTS:
            self.streamed += 1
            if now is not None:
                if self.first_token is None:
                    self.first_token = now
                self.last_token = now
        if kind is TextDelta:
            self.text.append(cast(TextDelta, event).text)
        elif kind is ReasoningDelta:
            self.reasoning.append(cast(ReasoningDelta, event).text)
        elif kind is ReasoningSignature:
            signature = cast(ReasoningSignature, event).signature
            self.thinking.append(Thinking("".join(self.reasoning[self.signed_upto :]), signature))
            self.signed_upto = len(self.reasoning)
        elif kind is RedactedReasoning:
            self.thinking.append(Thinking(redacted=cast(RedactedReasoning, event).data))
        elif kind is ReasoningItemDone:
            self.reasoning_items.append(cast(ReasoningItemDone, event).item)
        elif kind is ToolCallReady:
            ready = cast(ToolCallReady, event)
            self.calls.append(ToolCall(ready.call_id, ready.name, ready.arguments))
        elif kind is Usage:
            usage = cast(Usage, event)
            self.usage, self.timings, self.answered_by = usage.ledger, usage.timings, usage.model
            self._stop_named()
        elif kind is Finished:
            self.finish_reason = cast(Finished, event).reason
            self._stop_named()

    def take_all(self, events: list[ModelEvent], now: float | None = None) -> None:
        """`take` of each event: once the first token has come, a text delta (most of an answer's events) inline."""
        text = self.text
        for event in events:
            if type(event) is TextDelta and now is not None and self.first_token is not None:
                self.streamed += 1
                self.last_token = now
                text.append(event.text)
            else:
                self.take(event, now)

    def _stop_named(self) -> None:
        """What stopped the answer, from the counts where a server's reason doesn't say it.

        An answer as long as its cap was cut by it (llama.cpp's Responses side says `completed`
        then). One short of the cap whose prompt and answer fill the window was cut by the window:
        llama.cpp and vLLM say `length` for both (OpenAI's `length` means either), llama.cpp's
        Anthropic side `max_tokens`, its Responses side `completed`.
        """
        usage, window = self.usage, self.window
        if self.finish_reason not in ("stop", "tool_calls", "length") or usage is None or usage.output is None:
            return
        filled = window is not None and (usage.prompt_total or 0) + usage.output >= window - WINDOW_SLACK
        if self.cap is not None and usage.output >= self.cap:
            self.finish_reason = "length"
        elif filled:
            self.finish_reason = "context_window"

    @property
    def empty(self) -> bool:
        return not (self.text or self.reasoning or self.calls)

    def problems(self) -> dict[str, str]:
        """The calls that can't be run as written, by id, and why; a cut message's last call may be one."""
        last = len(self.calls) - 1
        return {
            call.id: problem
            for n, call in enumerate(self.calls)
            if (problem := problem_with(call, self.finish_reason if n == last else "")) is not None
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
        """Seconds from the request to the answer's first event (`StreamStarted`: keep-alives and preambles aside).

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
        (Anthropic sends several tokens a delta) the reported output count is used, over the time
        from the first byte: llama.cpp's Anthropic side sends no timings and holds a tool call's
        markup back, so the deltas' own span read 73 tok/s for its 18.8.
        """
        if self.timings is not None and self.timings.decode_tps is not None:
            return self.timings.decode_tps
        tokens = self.streamed if per_delta else (self.usage.output if self.usage else None)
        if not tokens or tokens < 2 or self.first_token is None or self.last_token is None:
            return None
        # Counting every token the server wrote, count the time it wrote them: from the first byte, which a
        # server sends once it starts decoding, not from the first delta, which markup it holds back delays.
        start = self.first_token if per_delta or self.first_byte is None else min(self.first_byte, self.first_token)
        span = self.last_token - start
        return (tokens - 1) / span if span > 0 else None


def cancelled(call: ToolCall) -> ToolResultMessage:
    return ToolResultMessage(call.id, call.name, CANCELLED_RESULT, is_error=True)
