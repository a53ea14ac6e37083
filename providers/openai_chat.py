"""OpenAI Chat Completions over the official `openai` SDK.

One module serves OpenAI, vLLM, SGLang, llama.cpp, Ollama and any other server that speaks
the protocol: only `base_url`, the key and the model differ.

The SDK's client does the transport: auth, retries, timeouts and typed status errors. The
request goes through its generic `post` as bytes we serialize, and the event stream is
parsed into msgspec structs. Two reasons: the typed `create()` re-walks the whole
conversation with typing introspection on every request (17 ms at 40 messages, growing with
the session), and its pydantic chunks cost ~190 µs each against ~2 µs here. The bytes also
make the request append-only on the wire: every message is serialized once and reused, and
the static part (model, options, tools) comes before the messages, so each request body,
minus its closing `]}`, is a byte prefix of the next.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Any

import msgspec

from hotloop.providers.conversation import AssistantMessage, ChatRequest, Message, ToolResultMessage, ToolSpec
from hotloop.providers.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    ProviderError,
    RequestRejected,
    StreamInterrupted,
    UnknownModel,
)
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)

_encode = msgspec.json.Encoder().encode


class OpenAIChatProvider:
    """Streams one Chat Completions response per request as model events."""

    protocol = "openai"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        location: str | None = None,
    ) -> None:
        import httpx2
        from openai import AsyncOpenAI, DefaultAioHttpClient

        self.name = name
        self.model = model
        self._location = location
        # Servers such as vLLM and Ollama accept any key; the SDK refuses to start without one.
        # The SDK's aiohttp transport costs ~40% less CPU per request than its default.
        self._client = AsyncOpenAI(
            api_key=api_key or "no-key",
            base_url=base_url,
            max_retries=max_retries,
            timeout=httpx2.Timeout(600.0, connect=10.0),
            http_client=DefaultAioHttpClient(),
        )
        self._sent: dict[Message, bytes] = {}
        self._tools: tuple[tuple[ToolSpec, ...], bytes] | None = None

    @property
    def base_url(self) -> str:
        return str(self._client.base_url).rstrip("/")

    def request_body(self, request: ChatRequest) -> bytes:
        """The request as sent: static part first, then the messages, each as first serialized."""
        head = b'{"model":' + _encode(self.model) + b',"stream":true,"stream_options":{"include_usage":true}'
        if request.max_tokens is not None:
            head += b',"max_tokens":' + _encode(request.max_tokens)
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
        sent = self._sent.get(message)
        if sent is None:
            sent = self._sent[message] = _encode(render_message(message))
        return sent

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        import httpx2
        import openai

        parser = ChunkParser()
        try:
            response = await self._client.post(
                "/chat/completions", content=self.request_body(request), cast_to=httpx2.Response, stream=True
            )
        except openai.APIError as error:
            raise await self._explain(error) from None
        try:
            # Read to the end even after [DONE]: an HTTP/1.1 connection goes back to the pool only when drained.
            async for data in server_sent_data(response):
                if data != b"[DONE]":
                    for event in parser.feed(self._chunk(data)):
                        yield event
        except httpx2.TransportError as error:
            raise StreamInterrupted(f"{self._where()} stream broke off: {_root_cause(error)}") from None
        finally:
            await response.aclose()
        for event in parser.finish():
            yield event

    def _chunk(self, data: bytes) -> Chunk:
        try:
            chunk = _decode_chunk(data)
        except msgspec.DecodeError as error:
            shown = data[:120].decode(errors="replace")
            raise StreamInterrupted(f"{self._where()} sent a malformed chunk ({error}): {shown}") from None
        if chunk.error is not None:
            message = chunk.error.get("message") if isinstance(chunk.error, dict) else chunk.error
            raise StreamInterrupted(f"{self._where()} stream failed: {message}")
        return chunk

    async def list_models(self) -> list[str]:
        """The models the server serves, in its own order (vLLM lists the base model first)."""
        import openai

        try:
            page = await self._client.models.list()
        except openai.APIError as error:
            raise await self._explain(error, listing=True) from None
        return [model.id for model in page.data]

    async def aclose(self) -> None:
        await self._client.close()

    def _where(self) -> str:
        return f"{self.name} ({self._location or self.base_url})"

    async def _explain(self, error: Exception, listing: bool = False) -> ProviderError:
        import openai

        where, detail = self._where(), _error_detail(error)
        if isinstance(error, openai.APIConnectionError):
            # The aiohttp transport reports a refused connection as a connect timeout; the root cause tells.
            root = _root_exception(error)
            if isinstance(root, OSError) and not isinstance(root, TimeoutError):
                return ConnectionFailed(f"cannot reach {where}: {_root_cause(error)}")
            if isinstance(error, openai.APITimeoutError):
                return ConnectionFailed(f"{where} timed out")
            return ConnectionFailed(f"cannot reach {where}: {_root_cause(error)}")
        if isinstance(error, openai.AuthenticationError):
            return AuthenticationFailed(f"{where} rejected the API key (401): {detail}")
        if isinstance(error, openai.NotFoundError) and not listing:
            return UnknownModel(f"unknown model {self.model!r} at {where}{await self._available_models()}")
        if isinstance(error, openai.APIStatusError):
            return RequestRejected(f"{where} answered {error.status_code}: {detail}")
        return StreamInterrupted(f"{where} failed: {detail}")

    async def _available_models(self) -> str:
        try:
            models = await self.list_models()
        except ProviderError:  # the listing only decorates an error message
            return ""
        return f" (available: {', '.join(sorted(models))})" if models else ""


async def server_sent_data(response: Any) -> AsyncIterator[bytes]:
    """The `data` of each server-sent event in an HTTP response, as bytes (multi-line data joined by newlines).

    Working on bytes skips text decoding and line objects: msgspec decodes JSON from bytes directly.
    """
    pending = b""
    data: list[bytes] = []
    async for block in response.aiter_bytes():
        *lines, pending = (pending + block).split(b"\n")
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:
                if data:
                    yield b"\n".join(data)
                    data = []
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    if pending.startswith(b"data:"):
        data.append(pending[6:] if pending.startswith(b"data: ") else pending[5:])
    if data:
        yield b"\n".join(data)


def _error_detail(error: Exception) -> str:
    body = getattr(error, "body", None)
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return inner["message"]
    return getattr(error, "message", None) or str(error) or type(error).__name__


def _root_exception(error: BaseException) -> BaseException:
    while error.__cause__ is not None or error.__context__ is not None:
        error = error.__cause__ or error.__context__  # type: ignore[assignment]
    return error


def _root_cause(error: BaseException) -> str:
    root = _root_exception(error)
    text = str(root).strip()
    return text.splitlines()[-1] if text else type(root).__name__


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
                {"id": call.id, "type": "function", "function": {"name": call.name, "arguments": call.arguments}}
                for call in message.tool_calls
            ]
        elif rendered["content"] is None:
            rendered["content"] = ""
        return rendered
    if isinstance(message, ToolResultMessage):
        return {"role": "tool", "tool_call_id": message.call_id, "content": message.content}
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
    usage: dict[str, Any] | None = None
    error: Any = None


_decode_chunk = msgspec.json.Decoder(Chunk).decode


class _OpenCall:
    __slots__ = ("index", "call_id", "name", "parts", "ready")

    def __init__(self, index: int, call_id: str, name: str) -> None:
        self.index = index
        self.call_id = call_id
        self.name = name
        self.parts: list[str] = []
        self.ready = False


class ChunkParser:
    """Turns Chat Completions chunks into model events.

    Calls are keyed by `index`, and a new `id` on an index already in use starts a new call
    (Ollama reuses index 0 for a whole parallel batch). A call is ready once the choice
    finishes, or once another call takes over its index.
    """

    def __init__(self) -> None:
        self._by_index: dict[int, _OpenCall] = {}
        self._calls: list[_OpenCall] = []
        self._finish_reason: str | None = None

    def feed(self, chunk: Chunk) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for choice in chunk.choices:
            if choice.index == 0:
                self._feed_choice(choice, events)
        if chunk.usage is not None:
            events.append(Usage(ledger=UsageLedger.from_openai(chunk.usage), raw=chunk.usage))
        return events

    def finish(self) -> list[ModelEvent]:
        if self._finish_reason is None:
            raise StreamInterrupted("the stream ended before the model finished its message")
        return [Finished(self._finish_reason)]

    def _feed_choice(self, choice: Choice, events: list[ModelEvent]) -> None:
        delta = choice.delta
        if delta is not None:
            reasoning = delta.reasoning_content if delta.reasoning_content is not None else delta.reasoning
            if reasoning:
                events.append(ReasoningDelta(reasoning))
            if delta.content:
                events.append(TextDelta(delta.content))
            for call_delta in delta.tool_calls or ():
                self._feed_call(call_delta, events)
        if choice.finish_reason is not None:
            self._finish_reason = choice.finish_reason
            for call in self._calls:
                self._mark_ready(call, events)

    def _feed_call(self, call_delta: ToolCallDelta, events: list[ModelEvent]) -> None:
        function = call_delta.function
        current = self._by_index.get(call_delta.index)
        if current is None or (call_delta.id and call_delta.id != current.call_id):
            if current is not None:
                self._mark_ready(current, events)
            call_id = call_delta.id or f"call_{uuid.uuid4().hex[:24]}"
            current = _OpenCall(call_delta.index, call_id, (function.name if function else None) or "")
            self._by_index[call_delta.index] = current
            self._calls.append(current)
            events.append(ToolCallStarted(current.index, current.call_id, current.name))
        elif function is not None and function.name and not current.name:
            current.name = function.name
        fragment = function.arguments if function is not None else None
        if fragment:
            current.parts.append(fragment)
            events.append(ToolCallArgsDelta(current.index, current.call_id, fragment))

    @staticmethod
    def _mark_ready(call: _OpenCall, events: list[ModelEvent]) -> None:
        if not call.ready:
            call.ready = True
            events.append(ToolCallReady(call.index, call.call_id, call.name, "".join(call.parts)))
