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

from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any, TypeVar

import msgspec

from hotloop.nesting import decoded
from hotloop.providers.base import ProviderOptions
from hotloop.providers.chat_chunks import OpenCall
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
    ProviderWarning,
    ReasoningDelta,
    ReasoningItemDone,
    ServerTimings,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.protocols import Wire
from hotloop.providers.sse import CallIds, malformed
from hotloop.providers.transport import OPENAI_URL, SdkProvider

_encode = msgspec.json.Encoder().encode
# Reasoning comes back as encrypted items, which a stateless request sends back as they came.
_STATELESS = b',"store":false,"include":["reasoning.encrypted_content"]'
_STORED = b',"store":true'
_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


class OpenAIResponsesProvider(SdkProvider[bytes]):
    """Streams one Responses API response per request as model events."""

    protocol = Wire.OPENAI_RESPONSES
    client_class = "AsyncOpenAI"
    path = "/responses"
    hosted_url = OPENAI_URL

    def __init__(
        self,
        options: ProviderOptions,
        *,
        prompt_cache_key: bool = False,
        user: bool = False,
        reasoning_summary: bool = False,
        previous_response_id: bool = False,
        max_tokens: int | None = None,
    ) -> None:
        super().__init__(options, max_tokens)
        self._prompt_cache_key = prompt_cache_key
        self._user = user
        self._reasoning_summary = reasoning_summary
        self._stored = previous_response_id
        # The last stored response and the messages its request held: a request whose messages
        # start with those and that answer sends only the rest.
        self._last: tuple[str, tuple[Message, ...]] | None = None
        self._tools: tuple[tuple[ToolSpec, ...], bytes] | None = None

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
        if (cap := self.cap(request)) is not None:
            head += b',"max_output_tokens":' + _encode(cap)
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
        sent = self._rendered.get(message)
        if sent is None:
            sent = self._rendered[message] = render_items(message)
        return sent

    async def _stream(self, request: ChatRequest) -> AsyncGenerator[ModelEvent, None]:
        parser = ResponsesParser(self._cache_min_tokens, self.where)
        body = self.request_body(request)
        self._last = None  # until this response completes, there is nothing to continue
        async with aclosing(self.stream_data(body, request.cache_key)) as stream:
            async for data in stream:
                if isinstance(data, bytes):
                    for event in parser.feed(data):
                        yield event
                else:
                    yield data
        for event in parser.finish():
            yield event
        if self._stored and parser.response_id:
            self._last = (parser.response_id, request.messages)


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
    """The parts of a Responses stream event hotloop reads; everything else is ignored.

    `item` and `response` stay as sent: a reasoning item goes back verbatim, and a response is
    read only by the events that end one.
    """

    type: str
    delta: str = ""
    item_id: str = ""
    arguments: str = ""
    item: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    response: msgspec.Raw = msgspec.field(default_factory=msgspec.Raw)
    message: str = ""  # an `error` event's
    code: str | None = None
    timings: dict[str, Any] | None = None  # llama.cpp's own measurements, beside `response` in `response.completed`


class _Item(msgspec.Struct, gc=False):
    type: str
    id: str = ""
    call_id: str = ""
    name: str = ""
    arguments: str | None = None  # a function call's, whole, once it is done


class _Response(msgspec.Struct, gc=False):
    id: str = ""
    model: str = ""
    status: str = ""
    usage: dict[str, Any] | None = None
    incomplete_details: dict[str, Any] | None = None
    error: Any = None  # read only to say why a response failed, whatever its shape


_S = TypeVar("_S", bound=msgspec.Struct)
_decode_event = msgspec.json.Decoder(StreamEvent).decode
_decode_fields = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
# The events the parser reads: any other, however malformed, is ignored.
_READ = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_summary_text.delta",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
        "response.incomplete",
        "response.failed",
        "error",
    }
)


def _read_as(data: bytes | msgspec.Raw, kind: type[_S], at: str = "") -> tuple[_S | None, list[str]]:
    """`data` (valid JSON) as `kind`, with each field of the wrong JSON type left at its default, and what was
    wrong (`at` names where `data` sits); None if not even that can be read."""
    try:
        return msgspec.json.decode(data, type=kind), []
    except msgspec.ValidationError:
        pass
    try:
        fields = _decode_fields(data)
    except msgspec.ValidationError as error:
        return None, [f"`{at}`: {_described(error)}" if at else _described(error)]
    kept: dict[str, Any] = {}
    problems = []
    for field in msgspec.structs.fields(kind):
        name = f"{at}.{field.encode_name}" if at else field.encode_name
        try:
            if field.encode_name in fields:
                kept[field.name] = msgspec.json.decode(fields[field.encode_name], type=field.type)
            elif field.required:
                problems.append(f"`{name}` is missing")
        except msgspec.ValidationError as error:
            problems.append(f"`{name}`: {_described(error)}")
    try:
        return kind(**kept), problems
    except TypeError:  # a required field is missing or unreadable
        return None, problems


def _described(error: msgspec.ValidationError) -> str:
    text = str(error)
    return text[:1].lower() + text[1:]


def _reason(error: object) -> str:
    """Why a response failed, from its `error` of any shape."""
    message = error.get("message") if isinstance(error, dict) else error
    return message if isinstance(message, str) and message else "no reason given"


class ResponsesParser:
    """Turns Responses stream events (each event's JSON) into model events.

    A function call is ready at its `function_call_arguments.done` or its `output_item.done`,
    whichever comes first (llama.cpp sends only the latter): early dispatch starts it there,
    while the model may still write other calls or text. A call never closed is ready when the
    response ends, with the arguments streamed so far, so that one the output limit cut off is
    reported, not dropped. A malformed event is one warning that names it, and the stream goes on.
    """

    def __init__(self, cache_min_tokens: int | None = None, where: str = "the server") -> None:
        self._cache_min_tokens = cache_min_tokens
        self._where = where
        self._calls: dict[str, OpenCall] = {}  # by item id
        self._started: list[OpenCall] = []
        self._ids = CallIds(where)
        self._finished = False
        self._said: set[str] = set()  # warnings given: a server that mangles every delta is said once
        self.response_id = ""  # the completed response's, to continue it
        self._streamed = 0  # characters of text, reasoning and arguments, to check the usage against

    def feed(self, data: bytes) -> list[ModelEvent]:
        problems: list[str] = []
        try:
            event = decoded(_decode_event, data)
        except msgspec.ValidationError:
            salvaged, problems = _read_as(data, StreamEvent)
            if salvaged is None:
                return self._warned("an unreadable event", problems, "it")
            event = salvaged
        except msgspec.DecodeError as error:
            raise malformed(self._where, "event", error, data) from None
        if event.type not in _READ:
            return []
        events = self._read(event, problems)
        if problems:
            events[:0] = self._warned(f"a malformed {event.type} event", problems, "what it couldn't read")
        return events

    def _read(self, event: StreamEvent, problems: list[str]) -> list[ModelEvent]:
        """The event's model events; what of it can't be read goes into `problems`."""
        kind = event.type
        if kind == "response.output_text.delta" and event.delta:
            self._streamed += len(event.delta)
            return [TextDelta(event.delta)]
        if kind == "response.reasoning_summary_text.delta" and event.delta:
            self._streamed += len(event.delta)
            return [ReasoningDelta(event.delta)]
        if kind == "response.output_item.added":
            item = self._item(event.item, problems)
            return self._start(item) if item is not None and item.type == "function_call" else []
        if kind == "response.function_call_arguments.delta":
            call = self._call(event.item_id, problems)
            if call is None or call.ready or not event.delta:
                return []
            call.parts.append(event.delta)
            self._streamed += len(event.delta)
            return [ToolCallArgsDelta(call.index, call.call_id, event.delta)]
        if kind == "response.function_call_arguments.done":
            call = self._call(event.item_id, problems)
            return self._ready(call, event.arguments) if call is not None else []
        if kind == "response.output_item.done":
            return self._item_done(event.item, problems)
        if kind in ("response.completed", "response.incomplete"):
            return self._ended(kind, self._response(event.response, problems), event.timings)
        if kind == "response.failed":
            error = self._response(event.response, problems).error
            raise StreamInterrupted(f"{self._where} response failed: {_reason(error)}")
        if kind == "error":
            raise StreamInterrupted(f"{self._where} stream failed: {event.message or event.code or 'no reason given'}")
        return []

    def _warned(self, what: str, problems: list[str], skipped: str) -> list[ModelEvent]:
        message = f"{self._where} sent {what} ({'; '.join(problems)}); hotloop skipped {skipped}"
        if message in self._said:
            return []
        self._said.add(message)
        return [ProviderWarning(message)]

    def _item(self, raw: msgspec.Raw, problems: list[str]) -> _Item | None:
        """The event's item, if it can be read whole: a call with its id or name lost is no call to start."""
        if not raw:
            problems.append("no `item`")
            return None
        item, found = _read_as(raw, _Item, "item")
        problems += found
        return None if found else item

    def _response(self, raw: msgspec.Raw, problems: list[str]) -> _Response:
        if not raw:
            problems.append("no `response`")
            return _Response()
        response, found = _read_as(raw, _Response, "response")
        problems += found
        return response or _Response()

    def _call(self, item_id: str, problems: list[str]) -> OpenCall | None:
        call = self._calls.get(item_id)
        if call is None and item_id:
            problems.append(f"no function call has the `item_id` {item_id!r}")
        return call

    def _start(self, item: _Item) -> list[ModelEvent]:
        call_id, repeated = self._ids.unique(item.call_id or item.id)
        call = self._calls[item.id] = OpenCall(len(self._started), call_id, item.name)
        self._started.append(call)
        started = ToolCallStarted(call.index, call_id, item.name)
        return [started] if repeated is None else [repeated, started]

    def _item_done(self, raw: msgspec.Raw, problems: list[str]) -> list[ModelEvent]:
        item = self._item(raw, problems)
        if item is None:
            return []
        if item.type == "reasoning":
            return [ReasoningItemDone(bytes(raw).decode())]
        if item.type != "function_call":
            return []
        events = [] if item.id in self._calls else self._start(item)
        return events + self._ready(self._calls[item.id], item.arguments)

    def _ready(self, call: OpenCall, arguments: str | None) -> list[ModelEvent]:
        """The call ready, once: with the arguments the closing event gives, else those streamed."""
        if call.ready:
            return []
        call.ready = True
        if arguments and not call.parts:
            self._streamed += len(arguments)
        return [ToolCallReady(call.index, call.call_id, call.name, arguments or "".join(call.parts))]

    def _ended(self, kind: str, response: _Response, timings: dict[str, Any] | None) -> list[ModelEvent]:
        self._finished = True
        self.response_id = response.id
        events: list[ModelEvent] = []
        if response.usage is not None:
            ledger = UsageLedger.from_openai_responses(response.usage).checked(self._streamed)
            raw, server = (
                ({**response.usage, "timings": timings}, ServerTimings.from_llama_cpp(timings))
                if timings
                else (response.usage, None)
            )
            ledger = ledger.with_cache_minimum(self._cache_min_tokens)
            events.append(Usage(ledger=ledger, raw=raw, timings=server, model=response.model))
        if kind == "response.incomplete" or response.status == "incomplete":
            reason = (response.incomplete_details or {}).get("reason")
            events.append(Finished(_INCOMPLETE.get(str(reason), "length")))
        else:
            events.append(Finished("tool_calls" if self._started else "stop"))
        # After `Finished`: a call the output limit cut off is then never started early.
        for call in self._started:
            events += self._ready(call, None)
        return events

    def finish(self) -> list[ModelEvent]:
        if not self._finished:
            raise StreamInterrupted("the stream ended before the response completed")
        return []
