"""OpenAI Chat Completions over the official `openai` SDK.

One module serves OpenAI, vLLM, SGLang, llama.cpp, Ollama and any other server that speaks
the protocol: only `base_url`, the key and the model differ.

The SDK's client does the transport: auth, retries, timeouts and typed status errors. The
request goes through its generic `post` as bytes we serialize, and the event stream is
parsed into msgspec structs. Two reasons (`benchmarks/transport.py`): the typed `create()`
re-walks the whole conversation with typing introspection on every request (~19 ms at 40
messages, growing with the session), and its stream builds each chunk for ~170–200 µs against
~2 µs here. The bytes also
make the request append-only on the wire: every message is serialized once and reused, and
the static part (model, options, tools) comes before the messages, so each request body,
minus its closing `]}`, is a byte prefix of the next.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncGenerator, Iterable
from contextlib import aclosing
from typing import Any

import msgspec

from hotloop.nesting import TooDeep, decoded, where_too_deep
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolResultMessage,
    ToolSpec,
    portable_call_id,
)
from hotloop.providers.errors import ProviderError, RequestRejected, StreamInterrupted
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ProviderWarning,
    ReasoningDelta,
    ServerHint,
    ServerTimings,
    StreamStarted,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.lanes import BACKGROUND_PRIORITY
from hotloop.providers.protocols import Wire
from hotloop.providers.server_fixes import fix_for, truncated_prompt
from hotloop.providers.sse import CallIds, malformed
from hotloop.providers.transport import OPENAI_URL, SdkProvider
from hotloop.providers.vllm import MissingDetails

_encode = msgspec.json.Encoder().encode


class OpenAIChatProvider(SdkProvider[bytes]):
    """Streams one Chat Completions response per request as model events."""

    protocol = Wire.OPENAI_CHAT
    client_class = "AsyncOpenAI"
    path = "/chat/completions"
    hosted_url = OPENAI_URL

    def __init__(
        self,
        options: ProviderOptions,
        *,
        prompt_cache_key: bool = False,
        user: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(options, max_tokens)
        self._prompt_cache_key = prompt_cache_key
        self._user = user
        self._tools: tuple[tuple[ToolSpec, ...], bytes] | None = None
        self.send_priority = False  # set for vLLM; cleared if the server rejects the field
        self._details = MissingDetails()
        self._problem_said = False

    def request_body(self, request: ChatRequest) -> bytes:
        """The request as sent: static part first, then the messages, each as first serialized."""
        head = b'{"model":' + _encode(self.model) + b',"stream":true,"stream_options":{"include_usage":true}'
        if (cap := self.cap(request)) is not None:
            head += b',"max_tokens":' + _encode(cap)
        if self._prompt_cache_key and request.cache_key:
            # Routes every request of the session to the same cache shard (OpenAI only).
            head += b',"prompt_cache_key":' + _encode(request.cache_key)
        if self._user and request.cache_key:
            head += b',"user":' + _encode(request.cache_key)
        if request.background and self.send_priority:
            head += b',"priority":' + _encode(BACKGROUND_PRIORITY)
        if request.tools:
            head += b',"tools":' + self._tools_bytes(request.tools)
        messages = [_encode(render_system(request.system))] if request.system else []
        messages.extend(self._message_bytes(message) for message in request.messages)
        return head + b',"messages":[' + b",".join(messages) + b"]}"

    def _tools_bytes(self, tools: tuple[ToolSpec, ...]) -> bytes:
        if self._tools is None or self._tools[0] is not tools:
            self._tools = (tools, _encode([render_tool(tool) for tool in tools]))
        return self._tools[1]

    def _message_bytes(self, message: Message) -> bytes:
        sent = self._rendered.get(message)
        if sent is None:
            sent = self._rendered[message] = _encode(render_message(message))
        return sent

    async def _stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        body = self.request_body(request)
        where = self.where  # once a stream: it formats the SDK's base URL, a cost per chunk otherwise
        parser = ChunkParser(self._cache_min_tokens, where)
        # Read to the end even after [DONE]: an HTTP/1.1 connection goes back to the pool only when drained.
        try:
            async with aclosing(self.stream_data(body, request.cache_key)) as stream:
                async for data in stream:
                    if isinstance(data, bytes):
                        events: list[ModelEvent] = []
                        parser.read((data,), where, events)
                        for event in events:
                            yield event
                        continue
                    yield data
                    problem = self.server.problem if self.server is not None else None
                    if isinstance(data, StreamStarted) and problem and not self._problem_said:
                        self._problem_said = True
                        yield ProviderWarning(problem)
        except StreamInterrupted as interrupted:  # a refusal may come inside a 200 stream, by build
            raise _with_fix(interrupted, self._kind) from None
        for event in parser.finish():
            yield event
        kind = self._kind  # read late: discovery runs beside the first requests
        hint = self._details.check(body, parser.usage, kind)
        if hint is not None:
            yield ServerHint(hint)
        prompt = parser.usage.get("prompt_tokens") if parser.usage else None
        if isinstance(prompt, int) and (cut := truncated_prompt(kind, prompt, len(body))) is not None:
            yield ProviderWarning(cut)

    def _refused(self, request: ChatRequest, rejected: RequestRejected) -> ChatRequest:
        if not (request.background and self.send_priority and "priority" in str(rejected).lower()):
            raise _with_fix(rejected, self._kind) from None
        # Started without priority scheduling: vLLM refuses a non-zero priority. Send none from now on.
        self.send_priority = False
        return request

    @property
    def _kind(self) -> str | None:
        return self.server.kind if self.server is not None else None


def _with_fix(error: ProviderError, kind: str | None) -> ProviderError:
    """The error, with the launch flag that fixes it when the server's words name one."""
    fix = fix_for(kind, error.status, str(error))
    if fix is None:
        return error
    return type(error)(f"{error}; {fix}", status=error.status, retry_after=error.retry_after, retryable=error.retryable)


def render_system(system: str) -> dict[str, Any]:
    return {"role": "system", "content": system}


def render_tool(tool: ToolSpec) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters},
    }


def render_message(message: Message) -> dict[str, Any]:
    if isinstance(message, AssistantMessage):
        rendered: dict[str, Any] = {"role": "assistant", "content": message.text or None}
        if message.tool_calls:
            rendered["tool_calls"] = [
                {
                    "id": portable_call_id(call.id),
                    "type": "function",
                    "function": {"name": call.name, "arguments": call.arguments},
                }
                for call in message.tool_calls
            ]
        elif rendered["content"] is None:
            rendered["content"] = ""
        return rendered
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": portable_call_id(message.call_id), "content": message.content}
    return {"role": "user", "content": message.content}


class FunctionDelta(msgspec.Struct, gc=False):
    name: str | None = None
    arguments: str | None = None


class ToolCallDelta(msgspec.Struct, gc=False):
    index: int = 0
    id: str | None = None
    function: FunctionDelta | None = None


class Delta(msgspec.Struct, gc=False):
    content: str | None = None
    # DeepSeek and older vLLM send `reasoning_content`; newer vLLM sends `reasoning`.
    reasoning_content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCallDelta] | None = None


class Choice(msgspec.Struct, gc=False):
    index: int = 0
    delta: Delta | None = None
    finish_reason: str | None = None


class Chunk(msgspec.Struct, gc=False):
    """The parts of a `chat.completion.chunk` hotloop reads; everything else is ignored."""

    choices: list[Choice] = []
    model: str = ""
    usage: dict[str, Any] | None = None
    timings: dict[str, Any] | None = None  # llama.cpp's own measurements, in its last chunk
    error: Any = None


_decode_chunk = msgspec.json.Decoder(Chunk).decode


def read_chunk(data: bytes, where: str) -> Chunk:
    """One event's data as a chunk; a StreamInterrupted naming `where` if it is malformed or an error.

    Its depth is looked at only where the chunk keeps free-form JSON (`usage`, `timings`, `error`): the typed
    decoder keeps nothing else of what it doesn't know, and raises RecursionError (`TooDeep`) past its stack.
    Scanning every event cost as much as decoding it.
    """
    try:
        try:
            chunk = _decode_chunk(data)
        except RecursionError:
            raise TooDeep(data, 0) from None
        if (chunk.usage is not None or chunk.timings is not None or chunk.error is not None) and (
            past := where_too_deep(data)
        ) is not None:
            raise TooDeep(data, past)
    except msgspec.DecodeError as error:
        raise malformed(where, "chunk", error, data) from None
    if chunk.error is not None:
        message = chunk.error.get("message") if isinstance(chunk.error, dict) else chunk.error
        raise StreamInterrupted(f"{where} stream failed: {message}")
    return chunk


class _OpenCall:
    __slots__ = ("call_id", "index", "name", "parts", "ready")

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index = index
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.ready = False


def _is_whole_object(arguments: str) -> bool:
    try:
        return isinstance(decoded(msgspec.json.decode, arguments), dict)
    except msgspec.DecodeError:
        return False


class ChunkParser:
    """Turns Chat Completions chunks into model events.

    Calls are keyed by `index`, and a new `id` on an index already in use starts a new call
    (Ollama reuses index 0 for a whole parallel batch). A call is ready once the choice
    finishes, or once another call takes over its index.
    """

    def __init__(self, cache_min_tokens: int | None = None, where: str = "the server") -> None:
        self._cache_min_tokens = cache_min_tokens
        self._by_index: dict[int, _OpenCall] = {}
        self._calls: list[_OpenCall] = []
        self._ids = CallIds(where)
        self._finish_reason: str | None = None
        self._streamed = 0  # characters of text, reasoning and arguments, to check the usage against
        self.folded = 0  # text deltas `read` joined into the one before them: tokens a per-token server streamed
        self.usage: dict[str, Any] | None = None  # the raw usage object, as the server sent it

    def read(self, datas: Iterable[bytes], where: str, events: list[ModelEvent]) -> None:
        """The events of each event's data added to `events`, `[DONE]` skipped: `feed(read_chunk(data, where))`, but a
        chunk that carries text alone (all but two or three of an answer's) is read inline, and a run of them is one
        `TextDelta` (what came together, as the watch logs it), counted in `folded`: a third of the cost, and no event
        a token for the readers after. A chunk that can't be read raises with the events before it added."""
        run: list[str] = []
        for data in datas:
            if data == b"[DONE]":
                continue
            try:
                chunk: Chunk | None = _decode_chunk(data)
            except (msgspec.DecodeError, RecursionError):
                chunk = None  # `read_chunk` decodes it again, to say what is wrong with it
            if chunk is not None and (chunk.usage is not None or chunk.timings is not None or chunk.error is not None):
                chunk = None  # free-form JSON: read again by `read_chunk`, for what it checks of that
            if (
                chunk is not None
                and len(choices := chunk.choices) == 1
                and (choice := choices[0]).index == 0
                and choice.finish_reason is None
                and (delta := choice.delta) is not None
                and (text := delta.content)
                and delta.tool_calls is None
                and delta.reasoning is None
                and delta.reasoning_content is None
            ):
                self._streamed += len(text)
                run.append(text)
                continue
            if run:
                self._fold(run, events)
                run = []
            events += self.feed(chunk if chunk is not None else read_chunk(data, where))
        if run:
            self._fold(run, events)

    def _fold(self, run: list[str], events: list[ModelEvent]) -> None:
        self.folded += len(run) - 1
        events.append(TextDelta(run[0] if len(run) == 1 else "".join(run)))

    def feed(self, chunk: Chunk) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for choice in chunk.choices:
            if choice.index == 0:
                self._feed_choice(choice, events)
        if chunk.usage is not None:
            self.usage = chunk.usage
            ledger = UsageLedger.from_openai(chunk.usage).checked(self._streamed)
            timings = ServerTimings.from_llama_cpp(chunk.timings) if chunk.timings else None
            raw = {**chunk.usage, "timings": chunk.timings} if chunk.timings else chunk.usage
            ledger = ledger.with_cache_minimum(self._cache_min_tokens)
            events.append(Usage(ledger=ledger, raw=raw, timings=timings, model=chunk.model))
        return events

    def finish(self) -> list[ModelEvent]:
        """Nothing more to say at the stream's end (`Finished` came with the finish chunk), unless it never came."""
        if self._finish_reason is None:
            raise StreamInterrupted("the stream ended before the model finished its message")
        return []

    def _feed_choice(self, choice: Choice, events: list[ModelEvent]) -> None:
        delta = choice.delta
        if delta is not None:
            reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
            if reasoning:
                self._streamed += len(reasoning)
                events.append(ReasoningDelta(reasoning))
            if delta.content:
                self._streamed += len(delta.content)
                events.append(TextDelta(delta.content))
            for call_delta in delta.tool_calls or ():
                self._feed_call(call_delta, events)
        if choice.finish_reason is not None:
            # Said before the last calls are ready, so a call the output limit cut off is never started early.
            self._finish_reason = choice.finish_reason
            events.append(Finished(choice.finish_reason))
            for call in self._calls:
                self._mark_ready(call, events)

    def _feed_call(self, call_delta: ToolCallDelta, events: list[ModelEvent]) -> None:
        function = call_delta.function
        current = self._by_index.get(call_delta.index)
        if current is None:
            # Servers stream parallel calls one after another: a new index means the earlier calls are
            # written, so they can start before the message ends. One whose JSON isn't closed waits for the end.
            for earlier in self._calls:
                if not earlier.ready and _is_whole_object("".join(earlier.parts)):
                    self._mark_ready(earlier, events)
        if current is None or (call_delta.id and call_delta.id != current.call_id):
            if current is not None:
                self._mark_ready(current, events)
            call_id, repeated = self._ids.unique(call_delta.id or f"call_{uuid.uuid4().hex[:24]}")
            if repeated is not None:
                events.append(repeated)
            current = _OpenCall(call_delta.index, call_id, (function.name if function else None) or "")
            self._by_index[call_delta.index] = current
            self._calls.append(current)
            events.append(ToolCallStarted(current.index, current.call_id, current.name))
        elif function is not None and function.name and not current.name:
            current.name = function.name
        fragment = function.arguments if function is not None else None
        if fragment:
            self._streamed += len(fragment)
            current.parts.append(fragment)
            events.append(ToolCallArgsDelta(current.index, current.call_id, fragment))

    @staticmethod
    def _mark_ready(call: _OpenCall, events: list[ModelEvent]) -> None:
        if not call.ready:
            call.ready = True
            events.append(ToolCallReady(call.index, call.call_id, call.name, "".join(call.parts)))
