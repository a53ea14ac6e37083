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

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any

import msgspec

from hotloop.providers.base import ProviderOptions
from hotloop.providers.chat_chunks import ChunkParser
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolResultMessage,
    ToolSpec,
    portable_call_id,
)
from hotloop.providers.errors import ProviderError, RequestRejected, StreamInterrupted
from hotloop.providers.events import ModelEvent, ProviderWarning, ServerHint, StreamStarted
from hotloop.providers.lanes import BACKGROUND_PRIORITY
from hotloop.providers.protocols import Wire
from hotloop.providers.server_fixes import fix_for, truncated_prompt
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
