"""OpenAI's Responses API over the official `openai` SDK.

The same design as Chat Completions (`openai_chat.py`): the SDK's client does the transport,
hotloop builds the request bytes and parses the event stream with msgspec. Stateless by
default: `store: false`, with each reasoning item asked for as `encrypted_content` and sent back
verbatim in the next request, so a reasoning model carries its reasoning across steps and each
request is the previous one plus what was added (its prefix is what the server cached).

With `previous_response_id` (for a server that stores responses), a request that continues the
last one sends only what was added since, naming the last response: less upload, but the
server holds the conversation (OpenAI keeps stored responses 30 days; not for zero data
retention), and the response ids live in this process only: a resumed, forked, compacted or
switched conversation is sent whole once, then continues that way.

Static part first, then `input`: each request body, minus its closing `]}`, is a byte prefix
of the next.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import aclosing
from typing import Any

import msgspec

from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolResultMessage,
    ToolSpec,
    portable_call_id,
)
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ReasoningItemDone,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.transport import CallIds, RequestTimeout, SdkProvider

_encode = msgspec.json.Encoder().encode
# Reasoning comes back as encrypted items, which a stateless request sends back as they came.
_STATELESS = b',"store":false,"include":["reasoning.encrypted_content"]'
_STORED = b',"store":true'
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


class OpenAIResponsesProvider(SdkProvider):
    """Streams one Responses API response per request as model events."""

    protocol = "openai-responses"
    sdk = "openai"
    client_class = "AsyncOpenAI"
    path = "/responses"

    def __init__(
        self,
        *,
        name: str,
        model: str,
        base_url: str | None = None,
        api_key: str | None = None,
        max_retries: int = 2,
        timeout: RequestTimeout | None = None,
        location: str | None = None,
        prompt_cache_key: bool = False,
        cache_min_tokens: int | None = None,
        reasoning_summary: bool = False,
        previous_response_id: bool = False,
        affinity_header: str | None = None,
        user: bool = False,
    ) -> None:
        super().__init__(name, model, location, base_url, api_key, max_retries, timeout, affinity_header)
        self._prompt_cache_key = prompt_cache_key
        self._user = user
        self._cache_min_tokens = cache_min_tokens
        self._reasoning_summary = reasoning_summary
        self._stored = previous_response_id
        # The last stored response and the messages its request held: a request whose messages
        # start with those and that answer sends only the rest.
        self._last: tuple[str, tuple[Message, ...]] | None = None
        self._sent: dict[Message, bytes] = {}
        self._tools: tuple[tuple[ToolSpec, ...], bytes] | None = None

    @property
    def official(self) -> bool:
        return self.base_url.startswith("https://api.openai.com")

    def request_body(self, request: ChatRequest) -> bytes:
        """The request as sent: static part first, then the input items, each as first serialized."""
        messages, head = request.messages, b'{"model":' + _encode(self.model) + b',"stream":true'
        if not self._stored:
            head += _STATELESS
        else:
            head += _STORED
            continued = self._continued(messages)
            if continued is not None:
                head += b',"previous_response_id":' + _encode(continued[0])
                messages = continued[1]
        if request.max_tokens is not None:
            head += b',"max_output_tokens":' + _encode(request.max_tokens)
        if self._prompt_cache_key and request.cache_key:
            head += b',"prompt_cache_key":' + _encode(request.cache_key)
        if self._user and request.cache_key:
            head += b',"user":' + _encode(request.cache_key)
        if self._reasoning_summary:
            head += b',"reasoning":{"summary":"auto"}'
        if request.system:
            head += b',"instructions":' + _encode(request.system)
        if request.tools:
            head += b',"tools":' + self._tools_bytes(request.tools)
        items = b",".join(self._message_bytes(message) for message in messages)
        return head + b',"input":[' + items + b"]}"

    def _continued(self, messages: tuple[Message, ...]) -> tuple[str, tuple[Message, ...]] | None:
        """The last response's id and the messages after its answer, if `messages` continue it."""
        if self._last is None:
            return None
        response_id, sent = self._last
        answered = len(sent) + 1
        if len(messages) <= answered or messages[: len(sent)] != sent:
            return None
        if not isinstance(messages[len(sent)], AssistantMessage):
            return None
        return response_id, messages[answered:]

    def _tools_bytes(self, tools: tuple[ToolSpec, ...]) -> bytes:
        if self._tools is None or self._tools[0] is not tools:
            self._tools = (tools, _encode([render_tool(tool) for tool in tools]))
        return self._tools[1]

    def _message_bytes(self, message: Message) -> bytes:
        sent = self._sent.get(message)
        if sent is None:
            sent = self._sent[message] = render_items(message)
        return sent

    async def stream(self, request: ChatRequest) -> AsyncIterator[ModelEvent]:
        parser = ResponsesParser(self._cache_min_tokens, self.where)
        body = self.request_body(request)
        self._last = None  # until this response completes, there is nothing to continue
        async with aclosing(self.stream_data(body, request.cache_key)) as stream:
            async for data in stream:
                if isinstance(data, bytes):
                    for event in parser.feed(self._event(data)):
                        yield event
                else:
                    yield data
        for event in parser.finish():
            yield event
        if self._stored and parser.response_id:
            self._last = (parser.response_id, request.messages)

    def _event(self, data: bytes) -> StreamEvent:
        try:
            return _decode_event(data)
        except msgspec.DecodeError as error:
            shown = data[:120].decode(errors="replace")
            raise StreamInterrupted(f"{self.where} sent a malformed event ({error}): {shown}") from None


def render_tool(tool: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "name": tool.name, "description": tool.description, "parameters": tool.parameters}


def render_items(message: Message) -> bytes:
    """A message as Responses input items, joined by commas: an answer is its reasoning items, its
    text and its calls, in the order the API produces them."""
    if isinstance(message, AssistantMessage):
        items = [item.encode() for item in message.reasoning_items]
        if message.text or not (message.tool_calls or items):
            items.append(_encode({"type": "message", "role": "assistant", "content": message.text}))
        items.extend(
            _encode(
                {
                    "type": "function_call",
                    "call_id": portable_call_id(call.id),
                    "name": call.name,
                    "arguments": call.arguments,
                }
            )
            for call in message.tool_calls
        )
        return b",".join(items)
    if isinstance(message, ToolResultMessage):
        return _encode(
            {"type": "function_call_output", "call_id": portable_call_id(message.call_id), "output": message.content}
        )
    return _encode({"type": "message", "role": "user", "content": message.content})


class StreamEvent(msgspec.Struct, gc=False):
    """The parts of a Responses stream event hotloop reads; everything else is ignored."""

    type: str
    delta: str | None = None
    item_id: str | None = None
    arguments: str | None = None
    item: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)  # as sent: a reasoning item goes back verbatim
    response: dict[str, Any] | None = None
    message: str | None = None  # an `error` event's
    code: str | None = None


class _Item(msgspec.Struct, gc=False):
    type: str
    id: str = ""
    call_id: str = ""
    name: str = ""


_decode_event = msgspec.json.Decoder(StreamEvent).decode
_decode_item = msgspec.json.Decoder(_Item).decode


class ResponsesParser:
    """Turns Responses stream events into model events.

    A function call is ready at its `function_call_arguments.done`: early dispatch starts it
    there, while the model may still write other calls or text.
    """

    def __init__(self, cache_min_tokens: int | None = None, where: str = "the server") -> None:
        self._cache_min_tokens = cache_min_tokens
        self._where = where
        self._calls: dict[str, tuple[int, str, str]] = {}  # by item id: index, call id, name
        self._ids = CallIds(where)
        self._finished = False
        self.response_id = ""  # the completed response's, to continue it
        self._streamed = 0  # characters of text, reasoning and arguments, to check the usage against

    def feed(self, event: StreamEvent) -> list[ModelEvent]:
        kind = event.type
        if kind == "response.output_text.delta" and event.delta:
            self._streamed += len(event.delta)
            return [TextDelta(event.delta)]
        if kind == "response.reasoning_summary_text.delta" and event.delta:
            self._streamed += len(event.delta)
            return [ReasoningDelta(event.delta)]
        if kind == "response.output_item.added" and event.item:
            return self._item_added(_decode_item(event.item))
        if kind == "response.function_call_arguments.delta" and event.delta and event.item_id in self._calls:
            index, call_id, _ = self._calls[event.item_id]
            self._streamed += len(event.delta)
            return [ToolCallArgsDelta(index, call_id, event.delta)]
        if kind == "response.function_call_arguments.done" and event.item_id in self._calls:
            index, call_id, name = self._calls[event.item_id]
            return [ToolCallReady(index, call_id, name, event.arguments or "")]
        if kind == "response.output_item.done" and event.item:
            if _decode_item(event.item).type == "reasoning":
                return [ReasoningItemDone(bytes(event.item).decode())]
            return []
        if kind in ("response.completed", "response.incomplete"):
            return self._ended(event.response or {})
        if kind == "response.failed":
            error = (event.response or {}).get("error") or {}
            raise StreamInterrupted(f"{self._where} response failed: {error.get('message', 'no reason given')}")
        if kind == "error":
            raise StreamInterrupted(f"{self._where} stream failed: {event.message or event.code or 'no reason given'}")
        return []

    def _item_added(self, item: _Item) -> list[ModelEvent]:
        if item.type != "function_call":
            return []
        call_id, repeated = self._ids.unique(item.call_id or item.id)
        self._calls[item.id] = (len(self._calls), call_id, item.name)
        started = ToolCallStarted(len(self._calls) - 1, call_id, item.name)
        return [started] if repeated is None else [repeated, started]

    def _ended(self, response: dict[str, Any]) -> list[ModelEvent]:
        self._finished = True
        self.response_id = str(response.get("id") or "")
        events: list[ModelEvent] = []
        usage = response.get("usage")
        if isinstance(usage, dict):
            ledger = UsageLedger.from_openai_responses(usage).checked(self._streamed)
            events.append(Usage(ledger=ledger.with_cache_minimum(self._cache_min_tokens), raw=usage))
        details = response.get("incomplete_details")
        if response.get("status") == "incomplete":
            reason = details.get("reason") if isinstance(details, dict) else None
            events.append(Finished(_INCOMPLETE.get(str(reason), "length")))
        else:
            events.append(Finished("tool_calls" if self._calls else "stop"))
        return events

    def finish(self) -> list[ModelEvent]:
        if not self._finished:
            raise StreamInterrupted("the stream ended before the response completed")
        return []
