"""Chat Completions chunks read into model events: by hotloop's own provider, one event at a time, and by the
watch, a block of events at a time.

A chunk is decoded into msgspec structs of the parts hotloop reads. A stream's text chunks differ only in their
text (the same id, model and layout each time), so once one has been decoded, the others of its shape are read by
their bytes: a 64-token answer's chunks took ~5.6 k instructions each to decode, most of what the watch spends
reading an answer (`benchmarks/passthrough_instructions.py`).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from typing import Any

import msgspec

from hotloop.nesting import TooDeep, decoded, where_too_deep
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import (
    Finished,
    ModelEvent,
    ReasoningDelta,
    ServerTimings,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallReady,
    ToolCallStarted,
    Usage,
    UsageLedger,
)
from hotloop.providers.sse import CallIds, malformed


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


def _kept(chunk: Chunk) -> bool:
    """Whether a decoded chunk is read as it is: one with free-form JSON is read again by `read_chunk`, for what it
    checks of that."""
    return chunk.usage is None and chunk.timings is None and chunk.error is None


def read_chunk(data: bytes, where: str, decoded: Chunk | None = None) -> Chunk:
    """One event's data as a chunk; a StreamInterrupted naming `where` if it is malformed or an error. `decoded`: the
    chunk `data` was already decoded to, for the checks alone.

    Its depth is looked at only where the chunk keeps free-form JSON (`usage`, `timings`, `error`): the typed
    decoder keeps nothing else of what it doesn't know, and raises RecursionError (`TooDeep`) past its stack.
    Scanning every event cost as much as decoding it.
    """
    try:
        try:
            chunk = decoded if decoded is not None else _decode_chunk(data)
        except RecursionError:
            raise TooDeep(data, 0) from None
        if not _kept(chunk) and (past := where_too_deep(data)) is not None:
            raise TooDeep(data, past)
    except (msgspec.DecodeError, UnicodeDecodeError) as error:  # msgspec checks UTF-8 with Python's codec
        raise malformed(where, "chunk", error, data) from None
    if chunk.error is not None:
        message = chunk.error.get("message") if isinstance(chunk.error, dict) else chunk.error
        raise StreamInterrupted(f"{where} stream failed: {message}")
    return chunk


# The escapes JSON has, but a surrogate's: the halves of a pair in two chunks would join into one.
_ESCAPE = re.compile(rb'\\(?:["\\/bfnrt]|u(?![dD][89a-fA-F])[0-9a-fA-F]{4})')
_decode_text = msgspec.json.Decoder(str).decode
# Chunks a run must have to be read by their bytes: fewer are read as fast one by one.
_SHAPED_RUN = 4


def _text_alone(chunk: Chunk) -> str | None:
    """The text of a chunk that carries text alone, nothing else that is read."""
    if (
        _kept(chunk)
        and len(choices := chunk.choices) == 1
        and (choice := choices[0]).index == 0
        and choice.finish_reason is None
        and (delta := choice.delta) is not None
        and delta.tool_calls is None
        and delta.reasoning is None
        and delta.reasoning_content is None
    ):
        return delta.content
    return None


class OpenCall:
    """A tool call being streamed: its fragments so far, and whether it is ready to run."""

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
        self._by_index: dict[int, OpenCall] = {}
        self._calls: list[OpenCall] = []
        self._ids = CallIds(where)
        self._finish_reason: str | None = None
        self._streamed = 0  # characters of text, reasoning and arguments, to check the usage against
        self.folded = 0  # text deltas `read` joined into the one before them: tokens a per-token server streamed
        self.usage: dict[str, Any] | None = None  # the raw usage object, as the server sent it
        # A text chunk's bytes before its text and after it, once learned (`_learn`).
        self._head = b""
        self._tail = b""
        self._tries = 3

    def read(self, datas: Sequence[bytes], where: str, events: list[ModelEvent]) -> None:
        """The events of each event's data added to `events`, `[DONE]` skipped: `feed(read_chunk(data, where))`, but a
        chunk that carries text alone (all but two or three of an answer's) is read inline, and a run of them is one
        `TextDelta` (what came together, as the watch logs it), counted in `folded`: no event a token for the readers
        after. Once a text chunk has taught the parser its stream's shape, a run of chunks in that shape is read by
        their bytes (`_read_shaped`). A chunk that can't be read raises with the events before it added."""
        run: list[str] = []
        at = self._read_each(datas, 0, run, where, events)
        if at < len(datas):
            self._read_each(datas, self._read_shaped(datas, at, run), run, where, events)
        if run:
            self._fold(run, events)

    def _read_each(self, datas: Sequence[bytes], at: int, run: list[str], where: str, events: list[ModelEvent]) -> int:
        """`datas` from `at` read one at a time, up to the one that teaches the parser its shape: where it stopped."""
        for at in range(at, len(datas)):  # noqa: B020 -- the index reached is the answer
            data = datas[at]
            if data == b"[DONE]":
                continue
            try:
                chunk: Chunk | None = _decode_chunk(data)
            except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
                chunk = None  # `read_chunk` decodes it again, to say what is wrong with it
            if chunk is not None and (text := _text_alone(chunk)):
                self._streamed += len(text)
                run.append(text)
                # One chunk a call (hotloop's own provider) is never a run to read by its bytes: no canary for it.
                if self._tries and len(datas) > 1 and self._learn(data, text):
                    return at + 1
                continue
            if run:
                self._fold(run, events)
                run.clear()
            events += self.feed(read_chunk(data, where, chunk))
        return len(datas)

    def _learn(self, data: bytes, text: str) -> bool:
        """Whether `data`, a chunk of text alone, gives its stream's shape: its bytes before its text (to `"content":"`)
        and after it (as long as the text is written as it is). Taken where another text in their place (a canary, not
        this text) reads as that chunk with exactly that text: the place is then the whole of the string that is the
        delta's content, whatever else the chunk holds, and any valid JSON string there reads as the delta's text.
        A few chunks are tried, for a stream whose first texts need escapes."""
        self._tries -= 1
        at = data.find(b'"content":"') + 11
        if at == 10:
            return False
        head, tail = data[:at], data[at + len(text.encode()) :]
        canary = "a" if text != "a" else "b"
        try:
            if _text_alone(_decode_chunk(head + canary.encode() + tail)) != canary:
                return False
        except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
            return False
        self._head, self._tail, self._tries = head, tail, 0
        return True

    def _read_shaped(self, datas: Sequence[bytes], at: int, run: list[str]) -> int:
        """The run of chunks in the learned shape from `at` (to the last whose bytes end as the shape's do) added to
        `run` as one text: where it ended, or `at` where it isn't exactly such a run. Each chunk's text is cut from
        its bytes, and the run is rebuilt from the texts and the shape and compared with its bytes: equal, and with
        each text one that JSON reads as it is (not empty, no quote, control character, broken escape or character,
        or half of a surrogate pair, whose halves in two chunks would join), every chunk is that text in that shape."""
        head, tail = self._head, self._tail
        end = len(datas)
        while end > at and not datas[end - 1].endswith(tail):
            end -= 1
        if end - at < _SHAPED_RUN:
            return at
        chunks = datas[at:end]
        start, stop = len(head), -len(tail)
        texts = [data[start:stop] for data in chunks]
        joined = b"\n".join(texts)  # a newline, which no JSON string holds as it is: each text checked alone
        if (
            b"" in texts
            or (b"\\" in joined and b"\\" in _ESCAPE.sub(b"", joined))
            or head + joined.replace(b"\n", tail + b"\n" + head) + tail != b"\n".join(chunks)
        ):
            return at
        try:
            joined.decode()
            text = _decode_text(b'"' + b"".join(texts) + b'"')
        except (UnicodeDecodeError, msgspec.DecodeError):
            return at
        self._streamed += len(text)
        self.folded += len(texts) - 1
        run.append(text)
        return end

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
            current = OpenCall(call_delta.index, call_id, (function.name if function else None) or "")
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
    def _mark_ready(call: OpenCall, events: list[ModelEvent]) -> None:
        if not call.ready:
            call.ready = True
            events.append(ToolCallReady(call.index, call.call_id, call.name, "".join(call.parts)))
