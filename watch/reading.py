"""A copy of a watched response, read with the providers' own parsers as its bytes arrive.

A stream is cut into server-sent events (`SseSplitter`) and each event goes to the protocol's
parser (`ChunkParser`, `ResponsesParser`, `MessageParser`), so a watched step's text, calls and
usage are read exactly as hotloop reads its own. A whole (non-streamed) JSON answer is handed to
the same parsers as the events it would have streamed.

TTFT ends at the answer's first content, by the rule hotloop's own provider uses (`opens_answer`): a keep-alive
comment, an empty event or a preamble (a ping, a Responses `response.created`) is no token. A server that reports
its own prefill is believed over a first byte that came before it. A whole answer has a first byte but no
stream to time a rate by: its rate is the server's, or none. What can't be read ends the reading with
one line (`problem`), a whole answer nested past the decoder's stack too (the providers' parsers refuse
an event nested past `nesting.LIMIT`); the bytes the client gets are never touched.

Every event of every answer goes through `_events`, so it does only what reading needs: UTF-8 is checked once a
block while every block has been clean, not once an event (a 64-token answer is 67 events).
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import msgspec

from hotloop.agent.step import StepAccumulator
from hotloop.providers.anthropic import MessageParser, min_cacheable_tokens, read_event
from hotloop.providers.anthropic import StreamEvent as AnthropicEvent
from hotloop.providers.chat_chunks import Chunk, ChunkParser, read_chunk
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import ModelEvent, ProviderWarning, StreamStarted
from hotloop.providers.openai_responses import ResponsesParser
from hotloop.providers.protocols import Wire
from hotloop.providers.sse import SseSplitter, opens_answer, utf8

MAX_WHOLE = 64 * 1024 * 1024  # bytes of a non-streamed answer kept to read it
_encode = msgspec.json.Encoder().encode


class _Diagnostics(msgspec.Struct, gc=False):
    cache_miss_reason: dict[str, Any] | None = None


class _WithDiagnostics(msgspec.Struct, gc=False):
    diagnostics: _Diagnostics | None = None
    message: _WithDiagnostics | None = None  # `message_start` carries the message


_decode_diagnostics = msgspec.json.Decoder(_WithDiagnostics).decode


class ResponseReader:
    """Reads one response's bytes into model events, timed into a `StepAccumulator`.

    `feed` takes each block as it arrives (with its arrival time) and returns the events it
    completed; `end` the rest. `problem` is the first thing that couldn't be read. `cap` is the request's own
    output cap: an answer that reached it was cut by it, whatever stop the server names.
    """

    def __init__(
        self,
        protocol: Wire,
        model: str,
        where: str,
        started: float,
        streamed: bool,
        encoding: str = "",
        cap: int | None = None,
    ) -> None:
        self.protocol = protocol
        self.where = where
        self.step = StepAccumulator(started=started, cap=cap)
        self.streamed = streamed
        self._opened = False  # the answer's first content has come: TTFT ends there
        self.problem = ""
        self.cache_miss_reason = ""  # Anthropic's cache diagnostics, when the agent asked for them
        self._splitter = SseSplitter()
        self._whole: list[bytes] = []
        self._size = 0
        self._mangled = False
        # Every block so far was UTF-8: so is every event cut from them (at ASCII bytes), unchecked one by one.
        self._clean = True
        self._inflate = zlib.decompressobj(wbits=47) if encoding in ("gzip", "deflate") else None
        if encoding and self._inflate is None and encoding != "identity":
            self.problem = f"{where} answered in {encoding} encoding, which hotloop can't read"
        self._model = model

    # Made when first read: an answer needs only its own protocol's parser.
    @functools.cached_property
    def _chat(self) -> ChunkParser:
        return ChunkParser(where=self.where)

    @functools.cached_property
    def _responses(self) -> ResponsesParser:
        return ResponsesParser(where=self.where)

    @functools.cached_property
    def _messages(self) -> MessageParser:
        return MessageParser(self.where, min_cacheable_tokens(self._model))

    def feed(self, block: bytes, now: float) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        if self.problem or not self.streamed:
            self._open(events)  # unreadable, or a whole answer: its first byte is all there is to time
        if self.problem:
            return self._taken(events, now)
        if self._inflate is not None:
            try:
                block = self._inflate.decompress(block)
            except zlib.error as error:
                self.problem = f"{self.where} sent a compressed body hotloop can't inflate ({error})"
                return self._taken(events, now)
        if not self.streamed:
            self._size += len(block)
            if self._size <= MAX_WHOLE:
                self._whole.append(block)
            return self._taken(events, now)
        if self._clean:
            try:
                block.decode()
            except UnicodeDecodeError:
                self._clean = False
        try:
            self._events(self._splitter.feed(block), events)
        except StreamInterrupted as error:
            self.problem = str(error)
        return self._taken(events, now)

    def _open(self, events: list[ModelEvent]) -> None:
        if not self._opened:
            self._opened = True
            events.append(StreamStarted())

    def end(self, now: float) -> list[ModelEvent]:
        """The events the response's end completes; after a stream cut short, `problem` says so."""
        events: list[ModelEvent] = []
        if self.problem:
            return events
        try:
            if self.streamed:
                self._events(self._splitter.end(), events)
            else:
                events += self._whole_answer()
            events += self._parser_end()
        except StreamInterrupted as error:
            self.problem = str(error)
        return self._taken(events, now)

    def _taken(self, events: list[ModelEvent], now: float) -> list[ModelEvent]:
        step = self.step
        if self.streamed:
            step.take_all(events, now)
        else:
            for event in events:
                # A whole answer's tokens all came at once: timing them would make a rate of the body's transfer.
                step.take(event, now if isinstance(event, StreamStarted) else None)
        prefill = step.timings.prefill if step.timings is not None else None
        if prefill is not None and step.first_byte is not None and step.first_byte - step.started < prefill:
            step.first_byte = step.started + prefill  # what came first was no token: the server's own figure holds
        return events

    def _events(self, datas: list[bytes], events: list[ModelEvent]) -> None:
        """Each event's data read into `events`. An event that can't be read adds nothing, not even the start or the
        warning it would have come with."""
        chat = self.protocol is Wire.OPENAI_CHAT
        for n, data in enumerate(datas):
            if chat and self._opened and self._clean:
                self._chat_events(datas[n:], events)
                return
            self._event(data, chat, events)

    def _chat_events(self, datas: list[bytes], events: list[ModelEvent]) -> None:
        """A clean Chat Completions stream's events once its answer has opened, nearly every event of every answer:
        nothing is left to test but the chunk (`_event` reads the others)."""
        chat, step = self._chat, self.step
        folded = chat.folded
        try:
            chat.read(datas, self.where, events)
        finally:
            step.streamed += chat.folded - folded  # one delta stands for several chunks: each was a token

    def _event(self, data: bytes, chat: bool, events: list[ModelEvent]) -> None:
        opens = not self._opened and opens_answer(data)
        self._opened = self._opened or opens
        warned = None
        if not self._clean:
            data, replaced = utf8(data)
            if replaced and not self._mangled:
                self._mangled = True
                warned = ProviderWarning(f"{self.where} sent bytes that are not UTF-8; they show as �")
        if chat:
            read = self._chat.feed(read_chunk(data, self.where)) if data != b"[DONE]" else []
        elif self.protocol is Wire.OPENAI_RESPONSES:
            read = self._responses.feed(data)
        else:
            event = read_event(data, self.where)
            if event.type == "message_start" and b'"diagnostics"' in data:
                self._diagnosed(data)
            read = self._messages.feed(event)
        if opens:
            events.append(StreamStarted())
        if warned is not None:
            events.append(warned)
        events += read

    def _parser_end(self) -> list[ModelEvent]:
        if self.protocol is Wire.OPENAI_CHAT:
            return self._chat.finish()
        if self.protocol is Wire.OPENAI_RESPONSES:
            return self._responses.finish()
        return self._messages.finish()

    def _diagnosed(self, data: bytes) -> None:
        try:
            found = _decode_diagnostics(data)
        except msgspec.DecodeError:
            return
        diagnostics = found.diagnostics or (found.message.diagnostics if found.message else None)
        reason = diagnostics.cache_miss_reason if diagnostics is not None else None
        if reason:
            missed = reason.get("cache_missed_input_tokens")
            tokens = f", {missed:,} tokens" if isinstance(missed, int) else ""
            self.cache_miss_reason = f"{reason.get('type', 'unknown')}{tokens}"

    def _whole_answer(self) -> list[ModelEvent]:
        """A non-streamed answer, handed to the parser as the events that would have streamed it."""
        if self._size > MAX_WHOLE:
            raise StreamInterrupted(
                f"{self.where} answered with {self._size:,} bytes; hotloop reads up to {MAX_WHOLE:,}"
            )
        body, _ = utf8(b"".join(self._whole))
        try:
            return self._whole_events(body)
        except RecursionError:  # not `nesting.decoded`: its bracket count costs ten times the decode of a big answer
            raise StreamInterrupted(f"{self.where} answered with JSON nested too deep to read") from None

    def _whole_events(self, body: bytes) -> list[ModelEvent]:
        try:
            answer = msgspec.json.decode(body)
        except msgspec.DecodeError as error:
            raise StreamInterrupted(f"{self.where} answered with a body that is not JSON ({error})") from None
        if not isinstance(answer, dict):
            raise StreamInterrupted(f"{self.where} answered with a JSON {type(answer).__name__}, not an object")
        try:
            if self.protocol is Wire.OPENAI_CHAT:
                return self._whole_chat(answer)
            if self.protocol is Wire.OPENAI_RESPONSES:
                return self._whole_responses(answer)
            self._diagnosed(body)
            return self._whole_message(answer)
        except (msgspec.ValidationError, TypeError, AttributeError) as error:
            raise StreamInterrupted(f"{self.where} answered with an unexpected shape ({error})") from None

    def _whole_chat(self, answer: dict[str, Any]) -> list[ModelEvent]:
        choices = []
        for choice in answer.get("choices") or ():
            message = dict(choice.get("message") or {})
            message["tool_calls"] = [{**call, "index": n} for n, call in enumerate(message.get("tool_calls") or ())]
            choices.append(
                {"index": choice.get("index", 0), "delta": message, "finish_reason": choice.get("finish_reason")}
            )
        chunk = {"choices": choices, "model": answer.get("model") or "", "usage": answer.get("usage")}
        chunk["timings"] = answer.get("timings")
        return self._chat.feed(msgspec.convert(chunk, Chunk))

    def _whole_responses(self, answer: dict[str, Any]) -> list[ModelEvent]:
        events: list[ModelEvent] = []
        for item in answer.get("output") or ():
            for part in item.get("content") or () if item.get("type") == "message" else ():
                if part.get("type") == "output_text":
                    events += self._responses.feed(
                        _encode({"type": "response.output_text.delta", "delta": part.get("text", "")})
                    )
            for part in item.get("summary") or () if item.get("type") == "reasoning" else ():
                delta = {"type": "response.reasoning_summary_text.delta", "delta": part.get("text", "")}
                events += self._responses.feed(_encode(delta))
            events += self._responses.feed(_encode({"type": "response.output_item.done", "item": item}))
        ended = "response.incomplete" if answer.get("status") == "incomplete" else "response.completed"
        return events + self._responses.feed(_encode({"type": ended, "response": answer}))

    def _whole_message(self, answer: dict[str, Any]) -> list[ModelEvent]:
        usage = answer.get("usage")
        feed = self._messages.feed
        head = {"usage": usage, "model": answer.get("model") or ""}
        events = feed(msgspec.convert({"type": "message_start", "message": head}, AnthropicEvent))
        for index, block in enumerate(answer.get("content") or ()):
            events += feed(
                msgspec.convert({"type": "content_block_start", "index": index, "content_block": block}, AnthropicEvent)
            )
            events += feed(msgspec.convert({"type": "content_block_stop", "index": index}, AnthropicEvent))
        delta = {"type": "message_delta", "delta": {"stop_reason": answer.get("stop_reason")}, "usage": usage}
        return events + feed(msgspec.convert(delta, AnthropicEvent))
