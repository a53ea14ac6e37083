"""What a provider yields while it streams one response: model events and the usage ledger.

Every event is a small immutable msgspec struct with a wall-clock timestamp, tagged by a
snake_case `type` so the whole event stream encodes to JSON lines and decodes back. The
structs opt out of the garbage collector (`gc=False`): they never form reference cycles,
and a long session holds hundreds of thousands of them.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable
from typing import Any

import msgspec

_CAMEL_BOUNDARY = re.compile(r"(?<!^)(?=[A-Z])")


def snake_case(name: str) -> str:
    return _CAMEL_BOUNDARY.sub("_", name).lower()


class Event(msgspec.Struct, frozen=True, kw_only=True, gc=False, tag_field="type", tag=snake_case):
    """Base of every event hotloop emits. `ts` is seconds since the epoch."""

    ts: float = msgspec.field(default_factory=time.time)


class UsagePart(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One server-side iteration of a response (Anthropic's `usage.iterations`: a compaction, the message)."""

    kind: str
    uncached: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    output: int | None = None


class UsageLedger(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """One step's token usage, normalized across providers.

    `None` means the provider did not report the figure. It is never silently 0.
    `uncached` is the prompt part that was prefilled from scratch. `below_cache_min` is set
    when nothing was cached because the prompt was shorter than the provider's minimum
    cacheable length (the minimum it fell short of): that is not a cache miss.
    `cache_write_1h` is the part of `cache_write` kept for an hour (Anthropic's 1 h TTL, billed at
    2× input against 1.25× for 5 minutes); `reported_cost` is what the provider says it charged,
    in dollars (OpenRouter's `cost`, xAI's `cost_in_usd_ticks`).
    """

    prompt_total: int | None = None
    cache_read: int | None = None
    cache_write: int | None = None
    uncached: int | None = None
    output: int | None = None
    reasoning: int | None = None
    below_cache_min: int | None = None
    distrust: str | None = None  # what the server said that can't be true; every figure is then None
    # The iterations the figures add up, when the server ran several (Anthropic's server-side compaction).
    parts: tuple[UsagePart, ...] = ()
    cache_write_1h: int | None = None
    reported_cost: float | None = None

    @classmethod
    def from_openai(cls, usage: dict[str, Any]) -> UsageLedger:
        """Read an OpenAI-style `usage` object (OpenAI, vLLM, SGLang, llama.cpp, Ollama, DeepSeek)."""
        prompt = _int_or_none(usage.get("prompt_tokens"))
        details = usage.get("prompt_tokens_details")
        cache_read = cache_write = None
        if isinstance(details, dict):
            cache_read = _int_or_none(details.get("cached_tokens"))
            cache_write = _int_or_none(details.get("cache_write_tokens"))
        completion_details = usage.get("completion_tokens_details")
        reasoning = None
        if isinstance(completion_details, dict):
            reasoning = _int_or_none(completion_details.get("reasoning_tokens"))
        uncached = None
        if prompt is not None and cache_read is not None:
            uncached = max(prompt - cache_read - (cache_write or 0), 0)
        return cls(
            prompt_total=prompt,
            cache_read=cache_read,
            cache_write=cache_write,
            uncached=uncached,
            output=_int_or_none(usage.get("completion_tokens")),
            reasoning=reasoning,
            reported_cost=_reported_cost(usage),
        )

    @classmethod
    def from_openai_responses(cls, usage: dict[str, Any]) -> UsageLedger:
        """Read the Responses API's `usage`: `input_tokens` is the whole prompt, cached tokens included."""
        details, output_details = usage.get("input_tokens_details"), usage.get("output_tokens_details")
        return cls.from_openai(
            {
                **usage,  # a provider's own cost, if it says one
                "prompt_tokens": usage.get("input_tokens"),
                "completion_tokens": usage.get("output_tokens"),
                "prompt_tokens_details": details,
                "completion_tokens_details": output_details,
            }
        )

    @classmethod
    def from_parts(
        cls,
        uncached: int | None,
        cache_read: int | None,
        cache_write: int | None,
        output: int | None,
        reasoning: int | None = None,
        parts: tuple[UsagePart, ...] = (),
        cache_write_1h: int | None = None,
    ) -> UsageLedger:
        """A prompt reported by its parts (Anthropic's way, opencode's): uncached, read and written add up to it,
        which is unknown when the uncached part is."""
        prompt = uncached + (cache_read or 0) + (cache_write or 0) if uncached is not None else None
        return cls(
            prompt_total=prompt,
            cache_read=cache_read,
            cache_write=cache_write,
            uncached=uncached,
            output=output,
            reasoning=reasoning,
            parts=parts,
            cache_write_1h=cache_write_1h,
        )

    @classmethod
    def from_anthropic(cls, start: dict[str, Any] | None, delta: dict[str, Any] | None) -> UsageLedger:
        """Read Anthropic's usage: `message_start`'s, overwritten by the cumulative values of `message_delta`.

        `input_tokens` is the uncached part only; the prompt is input + cache read + cache creation.
        When the server ran several iterations (`usage.iterations`: a compaction, then the message),
        the top-level figures describe only the last one: the ledger sums them all, and keeps each.
        """
        merged = {**(start or {}), **{key: value for key, value in (delta or {}).items() if value is not None}}
        iterations = merged.get("iterations")
        if isinstance(iterations, list) and iterations and all(isinstance(i, dict) for i in iterations):
            return cls._from_iterations(iterations, merged)
        uncached = _int_or_none(merged.get("input_tokens"))
        cache_read = _int_or_none(merged.get("cache_read_input_tokens"))
        cache_write = _int_or_none(merged.get("cache_creation_input_tokens"))
        details = merged.get("output_tokens_details")
        reasoning = _int_or_none(details.get("thinking_tokens")) if isinstance(details, dict) else None
        output = _int_or_none(merged.get("output_tokens"))
        hour = _hour_writes([merged], cache_write)
        return cls.from_parts(uncached, cache_read, cache_write, output, reasoning, cache_write_1h=hour)

    @classmethod
    def _from_iterations(cls, iterations: list[dict[str, Any]], merged: dict[str, Any]) -> UsageLedger:
        parts = tuple(
            UsagePart(
                kind=str(item.get("type", "iteration")),
                uncached=_int_or_none(item.get("input_tokens")),
                cache_read=_int_or_none(item.get("cache_read_input_tokens")),
                cache_write=_int_or_none(item.get("cache_creation_input_tokens")),
                output=_int_or_none(item.get("output_tokens")),
            )
            for item in iterations
        )
        uncached, read, write, output = (
            _total(getattr(part, name) for part in parts)
            for name in ("uncached", "cache_read", "cache_write", "output")
        )
        details = merged.get("output_tokens_details")
        reasoning = _int_or_none(details.get("thinking_tokens")) if isinstance(details, dict) else None
        return cls.from_parts(uncached, read, write, output, reasoning, parts, _hour_writes(iterations, write))

    def checked(self, streamed_chars: int) -> UsageLedger:
        """This ledger, or, if it can't be true, one with no figures that says what the server claimed.

        Can't be true: a negative count; a cache read or write above the prompt; output far above
        what streamed (reasoning a provider doesn't stream aside; a token is rarely less than half a
        character, so twice the characters plus some markup is the most a stream can hold). The
        prompt is not checked against the request's size: a provider's server-side tools add
        prompt tokens the request never carried (tests/fixtures/anthropic_prompt_cache).
        """
        claims = {
            "uncached input": self.uncached,  # Anthropic's input_tokens: its prompt is derived from it
            "prompt": self.prompt_total,
            "cache read": self.cache_read,
            "cache write": self.cache_write,
            "output": self.output,
            "reasoning": self.reasoning,
        }
        negative = [f"{name} {value:,}" for name, value in claims.items() if value is not None and value < 0]
        problem = ", ".join(negative)
        prompt, cached = self.prompt_total, (self.cache_read or 0) + (self.cache_write or 0)
        if not problem and prompt is not None and cached > prompt:
            problem = f"cache read and write {cached:,} of a {prompt:,}-token prompt"
        visible = (self.output or 0) - (self.reasoning or 0)
        if not problem and visible > 2 * streamed_chars + 256:
            problem = f"output {self.output:,} for {streamed_chars:,} characters streamed"
        return UsageLedger(distrust=problem) if problem else self

    def with_cache_minimum(self, minimum: int | None) -> UsageLedger:
        """This ledger, marked if nothing was cached because the prompt was below `minimum` tokens."""
        if minimum is None or self.prompt_total is None or self.prompt_total >= minimum:
            return self
        if self.cache_read is None or self.cache_read or self.cache_write:
            return self
        return msgspec.structs.replace(self, below_cache_min=minimum)

    @property
    def cache_reported(self) -> bool:
        return self.cache_read is not None


def _total(values: Iterable[int | None]) -> int | None:
    """The sum, or None if no value was reported."""
    reported = [value for value in values if value is not None]
    return sum(reported) if reported else None


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _hour_writes(usages: list[dict[str, Any]], written: int | None) -> int | None:
    """The cache write tokens kept for an hour (`cache_creation.ephemeral_1h_input_tokens`), None if not split.

    `message_delta` updates the write total but not its split, so the split is `message_start`'s:
    the hour's part is capped at the total.
    """
    split = [usage.get("cache_creation") for usage in usages]
    hours = _total(_int_or_none(part.get("ephemeral_1h_input_tokens")) for part in split if isinstance(part, dict))
    return None if hours is None or written is None else min(hours, written)


def _reported_cost(usage: dict[str, Any]) -> float | None:
    """Dollars the provider says the request cost: OpenRouter's `cost` (credits, a dollar each), xAI's ticks."""
    ticks = _int_or_none(usage.get("cost_in_usd_ticks"))
    if ticks is not None and ticks >= 0:
        return ticks / 10**10  # xAI: 10^10 ticks to the dollar
    cost = usage.get("cost")
    if isinstance(cost, int | float) and not isinstance(cost, bool) and cost >= 0:
        return float(cost)
    return None


class TextDelta(Event, frozen=True):
    text: str


class ReasoningDelta(Event, frozen=True):
    text: str


class ToolCallStarted(Event, frozen=True):
    index: int
    call_id: str
    name: str


class ToolCallArgsDelta(Event, frozen=True):
    index: int
    call_id: str
    fragment: str


class ToolCallReady(Event, frozen=True):
    """A tool call whose arguments are complete. `arguments` is the raw JSON text as streamed."""

    index: int
    call_id: str
    name: str
    arguments: str


class ReasoningSignature(Event, frozen=True):
    """Closes a reasoning block the provider signed; the block must go back with its signature (Anthropic)."""

    signature: str


class RedactedReasoning(Event, frozen=True):
    """A reasoning block the provider sent encrypted; it is kept and sent back as is."""

    data: str


class ReasoningItemDone(Event, frozen=True):
    """A Responses API reasoning item, as its JSON came (`encrypted_content` included): it goes back verbatim."""

    item: str


class ServerToolUsed(Event, frozen=True):
    """A tool the provider ran on its own side (web search, code execution); hotloop only shows it."""

    call_id: str
    name: str
    arguments: str


class ServerTimings(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """What a server measured of a response itself (llama.cpp's `timings`): shown beside, or instead of, hotloop's."""

    source: str  # the server that says so, e.g. "llama.cpp"
    prefill: float | None = None  # seconds it took to process the uncached prompt
    decode_tps: float | None = None  # output tokens per second while it generated
    prompt: int | None = None  # prompt tokens it processed (the uncached part)
    cached: int | None = None  # prompt tokens it took from its cache

    @classmethod
    def from_llama_cpp(cls, timings: dict[str, Any]) -> ServerTimings:
        prompt_ms, rate = timings.get("prompt_ms"), timings.get("predicted_per_second")
        return cls(
            source="llama.cpp",
            prefill=prompt_ms / 1000 if isinstance(prompt_ms, int | float) and prompt_ms >= 0 else None,
            decode_tps=rate if isinstance(rate, int | float) and rate > 0 else None,
            prompt=_int_or_none(timings.get("prompt_n")),
            cached=_int_or_none(timings.get("cache_n")),
        )


class Usage(Event, frozen=True):
    ledger: UsageLedger
    raw: dict[str, Any] = msgspec.field(default_factory=dict)
    timings: ServerTimings | None = None
    model: str = ""  # the model the server says answered ("": it said none)


class StreamStarted(Event, frozen=True):
    """The answer's first event arrived, keep-alives and preambles aside (`sse.opens_answer`): before its first token,
    for a server that holds tokens back."""


class Finished(Event, frozen=True):
    """The model ended its message: `stop`, `tool_calls`, `length` (the output cap), `context_window`,
    `content_filter`, or a reason of the server's own."""

    reason: str


# The reasons that end an answer before the model did: the output cap, and the context window.
CUT_SHORT = frozenset({"length", "context_window"})


class ServerHint(Event, frozen=True):
    """Something the provider noticed about the server that the user can fix, said once per session."""

    message: str


class ProviderWarning(Event, frozen=True):
    """Something went wrong that the provider worked around (a retry, bytes that aren't UTF-8, a repaired id)."""

    message: str


ModelEvent = (
    StreamStarted
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
    | ServerHint
    | ProviderWarning
)
