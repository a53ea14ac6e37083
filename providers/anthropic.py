"""Anthropic Messages over the official `anthropic` SDK.

As with the OpenAI provider, the SDK's client does the transport (auth, retries, typed status
errors) while hotloop serializes the request itself, static part first and every message
once, and parses the event stream into msgspec structs.

Anthropic caches only what a `cache_control` breakpoint marks. hotloop places up to four, in
this order of value: on the newest message (each step writes its whole prefix), on the system
prompt (the static part), on the message that was newest one step earlier (so reading the
previous step's prefix never depends on the API's 20-block lookback), and on the last tool.
A breakpoint is a marker, not content: moving it does not change what the prefix hashes to.

With `cache_diagnostics` on, every request carries the beta header and names the previous response
(`diagnostics.previous_message_id`); the server says in `message_start` why its cache could not reuse that
request's prefix (`cache_miss_reason`), which the usage carries (`DiagnosedUsage`) to the cache explainer.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import replace
from typing import Any

import msgspec

from hotloop.nesting import decoded
from hotloop.providers.anthropic_blocks import merged_turns, render_blocks
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import (
    ChatRequest,
    Message,
    ToolSpec,
)
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ReasoningSignature,
    RedactedReasoning,
    ServerToolUsed,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.protocols import Ttl, Wire
from hotloop.providers.sse import CallIds, malformed
from hotloop.providers.transport import ANTHROPIC_URL, SdkProvider

BREAKPOINT_LIMIT = Wire.ANTHROPIC.traits.cache.breakpoints
CACHE_DIAGNOSIS_BETA = "cache-diagnosis-2026-04-07"
BREAKPOINT_ORDER = ("newest", "system", "previous", "tools")

_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "tool_use": "tool_calls",
    "max_tokens": "length",
    "model_context_window_exceeded": "context_window",
    "refusal": "content_filter",
}
# The documented minimum cacheable prompt, by model-name prefix; the first match wins.
_CACHE_MINIMUMS = (
    ("claude-opus-4-6", 4096),
    ("claude-opus-4-5", 4096),
    ("claude-haiku-4-5", 4096),
    ("claude-opus-4", 1024),
    ("claude-sonnet-4", 1024),
    ("claude-3-7-sonnet", 1024),
    ("claude-3-5-haiku", 2048),
    ("claude-3-haiku", 2048),
)

_encode = msgspec.json.Encoder().encode
_CACHE_CONTROL = {"5m": _encode({"type": "ephemeral"}), "1h": _encode({"type": "ephemeral", "ttl": "1h"})}


def min_cacheable_tokens(model: str) -> int | None:
    """The minimum prompt length a Claude model caches, when hotloop knows it."""
    return next((minimum for prefix, minimum in _CACHE_MINIMUMS if model.startswith(prefix)), None)


class AnthropicProvider(SdkProvider[list[bytes]]):
    """Streams one Messages response per request as model events."""

    protocol = Wire.ANTHROPIC
    client_class = "AsyncAnthropic"
    path = "/v1/messages"
    hosted_url = ANTHROPIC_URL

    def __init__(
        self,
        options: ProviderOptions,
        *,
        max_tokens: int | None = None,
        thinking_budget: int | None = None,
        cache_ttl: str | Callable[[], Ttl] = "5m",
        cache_breakpoints: int = BREAKPOINT_LIMIT,
        cache_diagnostics: bool = False,
    ) -> None:
        # Without a URL the SDK would read ANTHROPIC_BASE_URL; hotloop's config decides instead.
        super().__init__(options if options.base_url else replace(options, base_url=ANTHROPIC_URL), max_tokens)
        self._thinking_budget = thinking_budget
        self._breakpoints = frozenset(BREAKPOINT_ORDER[: min(cache_breakpoints, BREAKPOINT_LIMIT)])
        # Asked at each request: "auto" is the session's choice as it stands (`core/prewarm.py`, from the pauses).
        fixed: Ttl = "1h" if cache_ttl == "1h" else "5m"
        self._lifetime: Callable[[], Ttl] = cache_ttl if callable(cache_ttl) else lambda: fixed
        self._tools: tuple[tuple[ToolSpec, ...], list[bytes]] | None = None
        self._diagnostics = cache_diagnostics
        self._previous_id: str | None = None  # the last foreground response's id, for the server to compare with
        if cache_diagnostics:
            self._client = self._client.with_options(default_headers={"anthropic-beta": CACHE_DIAGNOSIS_BETA})

    @property
    def cache_ttl(self) -> Ttl:
        return self._lifetime()

    def request_body(self, request: ChatRequest) -> bytes:
        """The request as sent: static part first, then the messages, breakpoints placed."""
        head = b'{"model":' + _encode(self.model) + b',"max_tokens":' + _encode(self.cap(request)) + b',"stream":true'
        if self._thinking_budget:
            head += b',"thinking":{"type":"enabled","budget_tokens":' + _encode(self._thinking_budget) + b"}"
        if self._diagnostics and not request.background:
            # A title or a summary has a prefix of its own: compared with it, every step would look changed.
            head += b',"diagnostics":{"previous_message_id":' + _encode(self._previous_id) + b"}"
        if request.tools:
            tools = list(self._tool_blocks(request.tools))
            if "tools" in self._breakpoints:
                tools[-1] = self._marked(tools[-1])
            head += b',"tools":[' + b",".join(tools) + b"]"
        if request.system:
            system = _encode({"type": "text", "text": request.system})
            head += b',"system":[' + (self._marked(system) if "system" in self._breakpoints else system) + b"]"
        return head + b',"messages":[' + b",".join(self._messages(request.messages, request.warms)) + b"]}"

    def _tool_blocks(self, tools: tuple[ToolSpec, ...]) -> list[bytes]:
        if self._tools is None or self._tools[0] is not tools:
            rendered = [
                _encode({"name": t.name, "description": t.description, "input_schema": t.parameters}) for t in tools
            ]
            self._tools = (tools, rendered)
        return self._tools[1]

    def _messages(self, messages: tuple[Message, ...], warms: bool = False) -> list[bytes]:
        turns = merged_turns((message, self._message_blocks(message)) for message in messages)
        # A pre-warm's newest mark is the next step's too: the step reads all it wrote, its own ask not written.
        newest = len(turns) - 1 - warms
        marks = {newest} if "newest" in self._breakpoints and newest >= 0 else set()
        # The previous step's request ended with the user message before the latest reply.
        if "previous" in self._breakpoints and len(turns) >= 3 and turns[-3][0] == "user":
            marks.add(len(turns) - 3)
        wire = []
        for n, (role, blocks, _) in enumerate(turns):
            if n in marks:
                blocks = [*blocks[:-1], self._marked(blocks[-1])]
            wire.append(b'{"role":"' + role.encode() + b'","content":[' + b",".join(blocks) + b"]}")
        return wire

    def _message_blocks(self, message: Message) -> list[bytes]:
        blocks = self._rendered.get(message)
        if blocks is None:
            blocks = self._rendered[message] = [_encode(block) for block in render_blocks(message)]
        return blocks

    def _marked(self, block: bytes) -> bytes:
        return block[:-1] + b',"cache_control":' + _CACHE_CONTROL[self.cache_ttl] + b"}"

    # Not `_stream`: `SdkProvider.stream` retries within the room vLLM's and SGLang's OpenAI endpoints say is left.
    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        body = self.request_body(request)
        where = self.where  # once a stream: it formats the SDK's base URL, a cost per event otherwise
        parser = MessageParser(where, self._cache_min_tokens or min_cacheable_tokens(self.model))
        async with aclosing(self.stream_data(body, request.cache_key)) as stream:
            async for data in stream:
                if isinstance(data, bytes):
                    for event in parser.feed(read_event(data, where)):
                        yield event
                else:
                    yield data
        if parser.message_id and not request.background:
            self._previous_id = parser.message_id
        for event in parser.finish():
            yield event


class Block(msgspec.Struct, gc=False):
    type: str
    id: str = ""
    name: str = ""
    text: str = ""
    thinking: str = ""
    signature: str = ""
    data: str = ""
    input: Any = None


class Delta(msgspec.Struct, gc=False):
    type: str = ""
    text: str = ""
    partial_json: str = ""
    thinking: str = ""
    signature: str = ""
    stop_reason: str | None = None


class Diagnostics(msgspec.Struct, gc=False):
    cache_miss_reason: dict[str, Any] | None = None


class MessageHead(msgspec.Struct, gc=False):
    id: str = ""
    model: str = ""
    usage: dict[str, Any] | None = None
    diagnostics: Diagnostics | None = None


class DiagnosedUsage(UsageLedger, frozen=True, gc=False, omit_defaults=True):
    """A step's usage with the server's word on its cache (Anthropic's cache-diagnostics beta): `miss_reason` is the
    `cache_miss_reason`'s type (`system_changed`, `tools_changed`, `messages_changed`, `model_changed`,
    `previous_message_not_found`, …; "" when nothing diverged), `missed` the tokens after the divergence, if said."""

    miss_reason: str = ""
    missed: int | None = None


class StreamEvent(msgspec.Struct, gc=False):
    """The parts of a Messages stream event hotloop reads; everything else is ignored."""

    type: str
    index: int = 0
    message: MessageHead | None = None
    content_block: Block | None = None
    delta: Delta | None = None
    usage: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


_decode_event = msgspec.json.Decoder(StreamEvent).decode


def read_event(data: bytes, where: str) -> StreamEvent:
    """One event's data; a StreamInterrupted naming `where` if it is malformed."""
    try:
        return decoded(_decode_event, data)
    except msgspec.DecodeError as error:
        raise malformed(where, "event", error, data) from None


class _OpenBlock:
    __slots__ = ("call_id", "call_index", "kind", "name", "parts", "signature")

    def __init__(self, block: Block, call_index: int) -> None:
        self.kind = block.type
        self.call_id = block.id
        self.name = block.name
        self.parts: list[str] = []
        self.signature = block.signature
        self.call_index = call_index


class MessageParser:
    """Turns Messages stream events into model events.

    Blocks are keyed by their `index`. A tool call is ready when its block stops. Usage is
    `message_start`'s, overwritten by the cumulative figures of `message_delta`.
    """

    def __init__(self, where: str = "the provider", cache_min_tokens: int | None = None) -> None:
        self._where = where
        self._cache_min_tokens = cache_min_tokens
        self._blocks: dict[int, _OpenBlock] = {}
        self._calls = 0
        self._ids = CallIds(where)
        self._streamed = 0  # characters of text, thinking and arguments, to check the usage against
        self._head = MessageHead()  # message_start's message: its usage, the model that answered, diagnostics
        self._delta_usage: dict[str, Any] | None = None
        self._stop_reason: str | None = None
        self.message_id = ""

    def feed(self, event: StreamEvent) -> list[ModelEvent]:
        kind = event.type
        if kind == "content_block_delta" and event.delta is not None:
            return self._delta(event.index, event.delta)
        if kind == "content_block_start" and event.content_block is not None:
            return self._start(event.index, event.content_block)
        if kind == "content_block_stop":
            return self._stop(event.index)
        if kind == "message_start" and event.message is not None:
            self._head, self.message_id = event.message, event.message.id
        elif kind == "message_delta":
            return self._message_delta(event)
        elif kind == "error":
            raise StreamInterrupted(self._error_line(event.error or {}))
        return []

    def finish(self) -> list[ModelEvent]:
        """`Finished`, then any tool call whose block never closed: the message's end says it is written (after
        `Finished`, so that one the output limit cut off is never started early)."""
        if self._stop_reason is None:
            raise StreamInterrupted("the stream ended before the model finished its message")
        events: list[ModelEvent] = [Finished(_STOP_REASONS.get(self._stop_reason, self._stop_reason))]
        for index in [index for index, block in self._blocks.items() if block.kind == "tool_use"]:
            events += self._stop(index)
        return events

    def _start(self, index: int, block: Block) -> list[ModelEvent]:
        opened = self._blocks[index] = _OpenBlock(block, self._calls)
        self._streamed += len(block.text) + len(block.thinking) + len(block.data)
        if block.type == "tool_use":
            self._calls += 1
            opened.call_id, repeated = self._ids.unique(block.id)
            events: list[ModelEvent] = [repeated] if repeated is not None else []
            events.append(ToolCallStarted(opened.call_index, opened.call_id, block.name))
            # A block may arrive whole, with its input already filled in.
            if block.input:
                opened.parts.append(_encode(block.input).decode())
                self._streamed += len(opened.parts[0])
                events.append(ToolCallArgsDelta(opened.call_index, opened.call_id, opened.parts[0]))
            return events
        if block.type == "text" and block.text:
            return [TextDelta(block.text)]
        if block.type == "thinking" and block.thinking:
            return [ReasoningDelta(block.thinking)]
        if block.type == "redacted_thinking":
            opened.parts.append(block.data)
        elif block.type == "server_tool_use" and block.input:
            opened.parts.append(_encode(block.input).decode())
        return []

    def _delta(self, index: int, delta: Delta) -> list[ModelEvent]:
        kind = delta.type
        self._streamed += len(delta.text) + len(delta.partial_json) + len(delta.thinking)
        if kind == "text_delta":
            return [TextDelta(delta.text)] if delta.text else []
        block = self._blocks.get(index)
        if block is None:
            raise StreamInterrupted(f"{self._where} sent a delta for block {index}, which never started")
        if kind == "input_json_delta" and delta.partial_json:
            block.parts.append(delta.partial_json)
            if block.kind == "tool_use":
                return [ToolCallArgsDelta(block.call_index, block.call_id, delta.partial_json)]
        elif kind == "thinking_delta" and delta.thinking:
            return [ReasoningDelta(delta.thinking)]
        elif kind == "signature_delta":
            block.signature += delta.signature
        return []

    def _stop(self, index: int) -> list[ModelEvent]:
        block = self._blocks.pop(index, None)
        if block is None:
            return []
        if block.kind == "tool_use":
            return [ToolCallReady(block.call_index, block.call_id, block.name, "".join(block.parts) or "{}")]
        if block.kind == "thinking" and block.signature:
            return [ReasoningSignature(block.signature)]
        if block.kind == "redacted_thinking":
            return [RedactedReasoning("".join(block.parts))]
        if block.kind == "server_tool_use":
            return [ServerToolUsed(block.call_id, block.name, "".join(block.parts) or "{}")]
        return []

    def _message_delta(self, event: StreamEvent) -> list[ModelEvent]:
        if event.delta is not None and event.delta.stop_reason is not None:
            self._stop_reason = event.delta.stop_reason
        if event.usage is None:
            return []
        self._delta_usage = event.usage
        ledger = UsageLedger.from_anthropic(self._head.usage, self._delta_usage).checked(self._streamed)
        raw = {"message_start": self._head.usage or {}, "message_delta": self._delta_usage}
        ledger = self._diagnosed(ledger.with_cache_minimum(self._cache_min_tokens))
        return [Usage(ledger=ledger, raw=raw, model=self._head.model)]

    def _diagnosed(self, ledger: UsageLedger) -> UsageLedger:
        """The ledger, with the server's cache diagnostics if the response carries them."""
        if (diagnosis := self._head.diagnostics) is None:
            return ledger
        reason = diagnosis.cache_miss_reason or {}
        kind, missed = reason.get("type"), reason.get("cache_missed_input_tokens")
        return DiagnosedUsage(
            **msgspec.structs.asdict(ledger),
            miss_reason=kind if isinstance(kind, str) else "",
            missed=missed if isinstance(missed, int) and not isinstance(missed, bool) else None,
        )

    def _error_line(self, error: dict[str, Any]) -> str:
        kind, message = error.get("type", "error"), error.get("message", "no details")
        if kind == "overloaded_error":
            return (
                f"{self._where} is overloaded and stopped mid-answer ({message}); try again, or switch with /provider"
            )
        return f"{self._where} stream failed: {kind}: {message}"
