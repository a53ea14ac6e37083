"""The watch reads an answer the same however its bytes are cut into blocks: real recordings of every protocol, and
text whose characters are cut between blocks; bytes that are not UTF-8 are one warning, wherever they come."""

from __future__ import annotations

import json

import msgspec
import pytest

from hotloop.agent.step import StepAccumulator
from hotloop.providers.chat_chunks import ChunkParser, read_chunk
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import ModelEvent, ProviderWarning, StreamStarted, TextDelta
from hotloop.providers.protocols import Wire
from hotloop.providers.sse import SseSplitter
from hotloop.watch.reading import ResponseReader

from support import FIXTURES

RECORDED = [
    (Wire.OPENAI_CHAT, "llamacpp/01_plain_stream.sse"),
    (Wire.OPENAI_CHAT, "llamacpp/05_tool_call_stream_hermes_template.sse"),
    (Wire.OPENAI_CHAT, "openai_chat_parallel_tools.sse"),
    (Wire.OPENAI_RESPONSES, "openai_responses_tool_call.sse"),
    (Wire.OPENAI_RESPONSES, "llamacpp/07_responses_tool_call.sse"),
    (Wire.ANTHROPIC, "anthropic_tool_use.sse"),
    (Wire.ANTHROPIC, "llamacpp/10_anthropic_tool_call.sse"),
]


def untimed(events: list[ModelEvent]) -> list[dict[str, object]]:
    """Each event's fields but the clock's reading, which says when it was made, not what was read."""
    return [{**msgspec.structs.asdict(event), "ts": None, "type": type(event).__name__} for event in events]


def text_runs(events: list[ModelEvent]) -> list[ModelEvent]:
    """Consecutive text deltas as one: the watch's reading joins a block's run of text chunks, counted in `folded`."""
    joined: list[ModelEvent] = []
    for event in events:
        last = joined[-1] if joined else None
        if isinstance(event, TextDelta) and isinstance(last, TextDelta):
            joined[-1] = TextDelta(last.text + event.text)
        else:
            joined.append(event)
    return joined


def read(wire: Wire, data: bytes, size: int) -> tuple[list[ModelEvent], ResponseReader]:
    reader = ResponseReader(wire, "recorded", "the server", started=0.0, streamed=True)
    events: list[ModelEvent] = []
    for start in range(0, len(data), size):
        events += reader.feed(data[start : start + size], 1.0)
    return events + reader.end(1.0), reader


@pytest.mark.parametrize(("wire", "name"), RECORDED)
def test_a_recording_reads_the_same_in_blocks_of_any_size(wire: Wire, name: str) -> None:
    """A real recording fed whole, a byte at a time and in blocks of 7 and 64 bytes gives the same events (the
    stream's start at the same place among them), the same usage and no problem."""
    data = (FIXTURES / name).read_bytes()
    whole, reader = read(wire, data, len(data))
    assert not reader.problem and whole
    for size in (1, 7, 64):
        events, cut = read(wire, data, size)
        assert untimed(text_runs(events)) == untimed(text_runs(whole)), size
        assert cut.step.usage == reader.step.usage and cut.step.streamed == reader.step.streamed and not cut.problem


def chat(*texts: str) -> bytes:
    chunks = [{"choices": [{"index": 0, "delta": {"content": text}}]} for text in texts]
    chunks.append({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    return b"".join(b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n" for chunk in chunks)


def text(events: list[ModelEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


def test_characters_cut_between_blocks_are_read_whole() -> None:
    """Multi-byte characters (é, ✓, an emoji) cut at every byte between two blocks read as written: no U+FFFD, no
    warning."""
    data = chat("héllo ", "✓ done ", "😀")
    for cut in range(1, len(data)):
        reader = ResponseReader(Wire.OPENAI_CHAT, "m", "the server", started=0.0, streamed=True)
        events = reader.feed(data[:cut], 1.0) + reader.feed(data[cut:], 1.0) + reader.end(1.0)
        assert text(events) == "héllo ✓ done 😀", cut
        assert not any(isinstance(event, ProviderWarning) for event in events) and not reader.problem


@pytest.mark.parametrize("where", ["first", "last"])
def test_bytes_that_are_not_utf8_are_one_warning_in_any_block(where: str) -> None:
    """A byte that is no UTF-8 (in the first event, or the last after clean blocks) shows as U+FFFD, with one
    warning, fed whole or a byte at a time."""
    texts = ["bad \xff byte", "fine"] if where == "first" else ["fine", "still fine", "bad \xff byte"]
    data = chat(*texts).replace("\xff".encode(), b"\xff")
    for size in (1, len(data)):
        events, _ = read(Wire.OPENAI_CHAT, data, size)
        assert text(events) == "".join(texts).replace("\xff", "\ufffd")
        warnings = [event for event in events if isinstance(event, ProviderWarning)]
        assert [warning.message for warning in warnings] == ["the server sent bytes that are not UTF-8; they show as �"]


DEEP = b"[" * 100_000 + b"]" * 100_000
HOSTILE_CHUNKS = [
    b'{"choices": [{"index": 0, "delta": {"content": "cut',
    b'{"error": {"message": "overloaded"}}',
    b'{"choices": [], "usage": {"prompt_tokens": 3, "deep": ' + DEEP + b"}}",
    b'{"choices": [], "extra": ' + DEEP + b"}",
    b'{"choices": [{"index": 0, "delta": {"content": 7}}]}',
    b"[1, 2]",
]


def one_by_one(data: bytes) -> tuple[list[ModelEvent], str]:
    """A chat stream read an event at a time by the provider's own calls (`read_chunk`, then `feed`)."""
    parser, events = ChunkParser(where="the server"), list[ModelEvent]()
    try:
        for event in SseSplitter().feed(data):
            if event != b"[DONE]":
                read = parser.feed(read_chunk(event, "the server"))
                events += read if events else [StreamStarted(), *read]  # the start comes with the first chunk read
        events += parser.finish()
    except StreamInterrupted as error:
        return events, str(error)
    return events, ""


@pytest.mark.parametrize("at", [0, 1, 2])
@pytest.mark.parametrize(
    "hostile", HOSTILE_CHUNKS, ids=["cut", "error", "deep usage", "deep unread field", "wrong type", "no object"]
)
def test_a_bad_chunk_in_a_block_reads_as_one_chunk_at_a_time(hostile: bytes, at: int) -> None:
    """A chunk that is cut, an error, nested past the stack (in its usage, or a field no one reads), of the wrong
    type or no object, among good ones in one block: the watch's reading keeps every event before it and says the
    same line as the provider's chunk-by-chunk reading; the client's bytes are not what it changes."""
    texts = [f"token {n} " for n in range(3)]
    good = chat(*texts).split(b"\n\n")[:-1]
    data = b"".join(event + b"\n\n" for event in [*good[:at], b"data: " + hostile, *good[at:]])
    events, reader = read(Wire.OPENAI_CHAT, data, len(data))
    expected, problem = one_by_one(data)
    assert problem and reader.problem == problem
    assert untimed(text_runs(events)) == untimed(text_runs(expected))


@pytest.mark.parametrize(("wire", "name"), RECORDED)
def test_the_step_of_a_block_is_the_step_of_its_events_taken_one_by_one(wire: Wire, name: str) -> None:
    """The reader's figures of a real recording read in one block (texts, calls, usage, token count and times) are
    those of its events taken one at a time; a run of text chunks read as one delta still counts a token a chunk."""
    data = (FIXTURES / name).read_bytes()
    events, reader = read(wire, data, len(data))
    step = StepAccumulator(started=0.0)
    for event in events:
        step.take(event, 1.0)
    if wire is Wire.OPENAI_CHAT:
        chunks = sum(isinstance(event, TextDelta) for event in one_by_one(data)[0])
        step.streamed += chunks - sum(isinstance(event, TextDelta) for event in events)
    assert step == reader.step and step.streamed and step.first_token == step.last_token == 1.0


MIXED_CHUNKS = [
    {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]},
    {"choices": [{"index": 0, "delta": {"reasoning_content": "think "}}]},
    {"choices": [{"index": 0, "delta": {"reasoning": "more", "content": "and say"}}]},
    {"choices": [{"index": 1, "delta": {"content": "another choice"}}]},
    {"choices": [{"index": 0, "delta": {"content": "two"}}, {"index": 1, "delta": {"content": "at once"}}]},
    {"choices": [{"index": 0, "delta": {"content": " call", "tool_calls": [{"index": 0, "id": "c1"}]}}]},
    {"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f", "arguments": "{}"}}]}}]},
    {"choices": [{"index": 0, "delta": {"content": "last"}, "finish_reason": "tool_calls"}]},
    {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 9}},
]
CHAT_RECORDINGS = [
    "llamacpp/01_plain_stream.sse",
    "llamacpp/05_tool_call_stream_hermes_template.sse",
    "llamacpp/13_chat_tool_call_cut_mid_arguments.sse",
    "openai_chat_parallel_tools.sse",
]


@pytest.mark.parametrize("name", [*CHAT_RECORDINGS, "deepseek_tool_call.chunks.jsonl", "mixed"])
def test_the_parser_reads_a_run_of_chunks_as_it_reads_each(name: str) -> None:
    """`ChunkParser.read`, which takes a chunk of text alone inline and a run of them as one delta, gives the events
    (the run joined), the usage and the counts of feeding each chunk, every chunk folded into a run counted: real
    recordings (llama.cpp, OpenAI, DeepSeek's reasoning) and chunks that mix text with reasoning, other choices,
    calls and a finish."""
    if name == "mixed":
        datas = [json.dumps(chunk).encode() for chunk in MIXED_CHUNKS]
    elif name.endswith(".jsonl"):
        datas = (FIXTURES / name).read_bytes().splitlines()
    else:
        datas = [*SseSplitter().feed((FIXTURES / name).read_bytes()), b"[DONE]"]
    each, run = ChunkParser(where="the server"), ChunkParser(where="the server")
    expected = [event for data in datas if data != b"[DONE]" for event in each.feed(read_chunk(data, "the server"))]
    events: list[ModelEvent] = []
    run.read(datas, "the server", events)
    assert events and untimed(text_runs(events)) == untimed(text_runs(expected))
    deltas = sum(isinstance(event, TextDelta) for event in events)
    assert deltas + run.folded == sum(isinstance(event, TextDelta) for event in expected)
    assert run.usage == each.usage and run._streamed == each._streamed
