"""A run of Chat Completions text chunks in their stream's shape, read by their bytes: exactly what decoding each
chunk reads, on real recordings and on chunks built to look like the shape and not be it."""

from __future__ import annotations

import json

import msgspec
import pytest
from test_watch_reading_blocks import read, text_runs, untimed

from hotloop.providers import chat_chunks
from hotloop.providers.chat_chunks import ChunkParser, read_chunk
from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import ModelEvent, TextDelta
from hotloop.providers.protocols import Wire
from hotloop.providers.sse import SseSplitter

from support import FIXTURES

# vLLM's layout, as hotloop's simulator sends it: every text chunk of an answer is these bytes around its text.
HEAD = (
    b'{"id":"chatcmpl-7","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"'
)
TAIL = b'"},"logprobs":null,"finish_reason":null}]}'
OPENING = b'{"id":"chatcmpl-7","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}'
CLOSING = [
    b'{"id":"chatcmpl-7","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
    b'{"id":"chatcmpl-7","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":12}}',
    b"[DONE]",
]
WORDS = [b"Hello", b" there", b",", b" how", b" are", b" you", b" today", b"?"]


def stream(*texts: bytes) -> list[bytes]:
    """The events' data of an answer whose text chunks are `texts`, each as written between `HEAD` and `TAIL`."""
    return [OPENING, *(HEAD + text + TAIL for text in texts), *CLOSING]


class Read(msgspec.Struct):
    events: list[dict[str, object]]
    tokens: int  # text deltas, each folded chunk counted
    usage: dict[str, object] | None
    streamed: int
    problem: str


def each(datas: list[bytes]) -> Read:
    """What the provider's calls read of `datas` decoded a chunk at a time (`read_chunk`, then `feed`)."""
    parser, events = ChunkParser(where="the server"), list[ModelEvent]()
    problem = ""
    try:
        for data in datas:
            if data != b"[DONE]":
                events += parser.feed(read_chunk(data, "the server"))
    except StreamInterrupted as error:
        problem = str(error)
    tokens = sum(isinstance(event, TextDelta) for event in events)
    return Read(untimed(text_runs(events)), tokens, parser.usage, parser._streamed, problem)


def at_once(datas: list[bytes]) -> Read:
    """What `ChunkParser.read` reads of `datas` taken together, as the watch takes a block's events."""
    parser, events = ChunkParser(where="the server"), list[ModelEvent]()
    problem = ""
    try:
        parser.read(datas, "the server", events)
    except StreamInterrupted as error:
        problem = str(error)
    tokens = sum(isinstance(event, TextDelta) for event in events) + parser.folded
    return Read(untimed(text_runs(events)), tokens, parser.usage, parser._streamed, problem)


@pytest.fixture
def decodes(monkeypatch: pytest.MonkeyPatch) -> list[bytes]:
    """The chunks `ChunkParser.read` decodes, counted."""
    decoded: list[bytes] = []
    decode = chat_chunks._decode_chunk

    def counted(data: bytes) -> chat_chunks.Chunk:
        decoded.append(data)
        return decode(data)

    monkeypatch.setattr(chat_chunks, "_decode_chunk", counted)
    return decoded


def test_a_run_in_the_shape_is_read_without_decoding_its_chunks(decodes: list[bytes]) -> None:
    """Of an answer's eight text chunks, the first is decoded and teaches the shape (with one canary in its place);
    the seven after it are read by their bytes, and the reading is the chunk-by-chunk one: one delta, eight
    tokens, the same usage."""
    datas = stream(*WORDS)
    expected = each(datas)
    decodes.clear()
    read = at_once(datas)
    assert read == expected and read.tokens == len(WORDS) and not read.problem
    assert read.events[0] == {"text": "Hello there, how are you today?", "ts": None, "type": "TextDelta"}
    text_chunks = [data for data in decodes if data.startswith(HEAD)]
    assert text_chunks == [HEAD + b"Hello" + TAIL, HEAD + b"a" + TAIL]  # the first, and the canary


@pytest.mark.parametrize(
    "name", ["llamacpp/01_plain_stream.sse", "llamacpp/02_long_prompt_first.sse", "llamacpp/03_long_prompt_repeat.sse"]
)
def test_a_real_servers_run_is_read_by_its_bytes_as_it_reads_decoded(name: str, decodes: list[bytes]) -> None:
    """llama.cpp's recorded answers: their text chunks after the first few are read by their bytes, and the events,
    tokens, usage and characters are the chunk-by-chunk ones."""
    datas = [*SseSplitter().feed((FIXTURES / name).read_bytes()), b"[DONE]"]
    expected = each(datas)
    decodes.clear()
    assert at_once(datas) == expected
    assert len(decodes) < len(datas) - 4


ESCAPED = [b"\\n\\n", b'\\"quoted\\"', b"back\\\\slash", b"caf\\u00e9", b"\\/", b"tab\\t"]
# Each is a text chunk's bytes that the shape can't vouch for: read as decoding reads it, its line if it is broken.
HOSTILE = {
    "a quote that closes the text and adds a field": [b'a","x":"y'],
    "a quote that closes the text and the delta": [b'a"},"logprobs":null,"finish_reason":"stop"}]}'],
    "an empty text": [b""],
    "a raw control character": [b"a\x01b"],
    "a raw newline": [b"a\nb"],
    "an escape cut between two chunks": [b"a\\", b"nb"],
    "a broken escape": [b"\\x41"],
    "a short unicode escape": [b"\\u00e"],
    "a surrogate pair in two chunks": [b"\\ud83d", b"\\ude00"],
    "a lone surrogate": [b"\\udc00x"],
    "a character cut between two chunks": ["é".encode()[:1], "é".encode()[1:]],
    "bytes that are not UTF-8": [b"\xff\xfe"],
}


@pytest.mark.parametrize("escaped", ESCAPED)
def test_escaped_texts_in_the_shape_read_as_decoded(escaped: bytes) -> None:
    """A text with JSON's escapes (newlines, quotes, backslashes, a \\u escape) is read by its bytes as decoding
    reads it."""
    datas = stream(*WORDS[:3], escaped, *WORDS[3:])
    assert at_once(datas) == each(datas) and not each(datas).problem


@pytest.mark.parametrize("at", [1, 3, 7])
@pytest.mark.parametrize("texts", HOSTILE.values(), ids=HOSTILE.keys())
def test_a_text_the_shape_cant_vouch_for_reads_as_decoded(texts: list[bytes], at: int) -> None:
    """Among chunks in the shape, one (or two together) built to pass for it: a quote that ends the text early, an
    empty or raw text, an escape, surrogate pair or character cut between chunks, a broken escape, bytes that are
    not UTF-8, a chunk shorter than the shape's two ends. The run is read as each chunk decoded reads: the same
    events, tokens and usage, or the same line for the chunk that can't be read."""
    datas = stream(*WORDS[:at], *texts, *WORDS[at:])
    assert at_once(datas) == each(datas)


def test_a_chunk_shorter_than_its_shape_reads_as_decoded() -> None:
    """A chunk that starts as the shape's and ends as them, but shares its text's quotes between the two."""
    datas = stream(*WORDS)
    datas.insert(4, HEAD + TAIL[1:])
    assert at_once(datas) == each(datas) and each(datas).problem


def test_a_run_broken_by_another_chunk_reads_as_decoded() -> None:
    """A finish, a call, a chunk of another layout and one of another choice with the shape's length inside the
    run, each ending as the shape's chunks end: the run is read as decoded."""
    inside = [
        b'{"id":"chatcmpl-7","choices":[{"index":0,"delta":{"content":"done"},"finish_reason":"stop"}]}',
        b'{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c","function":{"name":"f"}}]}}],'
        + b'"x":{"content":"'
        + TAIL,
        b'{"id":"other","choices":[{"index":0,"delta":{"content":"' + b"mid" + TAIL,
        HEAD.replace(b'"index":0', b'"index":1') + b"another choice's" + TAIL,  # as long as the shape's, no quote
    ]
    for chunk in inside:
        datas = stream(*WORDS)
        datas.insert(4, chunk)
        assert at_once(datas) == each(datas), chunk


def test_chunks_written_over_several_lines_read_as_decoded() -> None:
    """Chunks whose JSON spans lines (multi-line `data:`, joined by newlines) read as decoding reads them; in a run
    where one chunk holds two chunks' bytes joined by a newline, that chunk is the error decoding finds, not two
    texts of the run."""
    lines = [OPENING, *(HEAD.replace(b'"choices":', b'\n"choices":') + word + TAIL for word in WORDS), *CLOSING]
    assert at_once(lines) == each(lines) and not each(lines).problem
    datas = stream(*WORDS)
    datas[4:6] = [datas[4] + b"\n" + datas[5]]
    assert at_once(datas) == each(datas) and each(datas).problem


@pytest.mark.parametrize(
    "first",
    [
        # `"content":"` first where it is not the delta's text: the canary sees its text stay.
        b'{"meta":{"content":"Hello"},"choices":[{"index":0,"delta":{"content":"Hello"}}]}',
        # The delta's key written with an escape, and an escaped quote before a `content` in another key.
        b'{"choices":[{"index":0,"delta":{"\\u0063ontent":"Hello","a\\"content":"Hello"}}]}',
    ],
)
def test_a_shape_is_learned_only_where_its_text_is_the_deltas(first: bytes) -> None:
    """A first chunk whose `"content":"` is another field's, or whose delta names its content with an escape: the
    shape learned from it (if any) reads the rest as decoding does."""
    rest = [json.dumps({"choices": [{"index": 0, "delta": {"content": word.decode()}}]}).encode() for word in WORDS]
    datas = [first, *rest, *CLOSING]
    assert at_once(datas) == each(datas)


def test_a_field_that_holds_the_deltas_text_is_not_taken_for_it() -> None:
    """Another field's `"content"` first, holding the delta's text, then changing while the delta's stays: its place
    passes for the text's with a canary of the same text, and not with another. Read as decoded, the delta's."""
    datas = [
        b'{"x":{"content":"' + word + b'"},"choices":[{"index":0,"delta":{"content":"a"}}]}' for word in [b"a", *WORDS]
    ]
    assert at_once(datas) == each(datas) and each(datas).events[0]["text"] == "a" * (len(WORDS) + 1)


def test_a_stream_that_gives_no_shape_costs_three_canaries(decodes: list[bytes]) -> None:
    """Texts that are never written as they are (each starts with an escape): each chunk is decoded once, and only
    the first three are tried for a shape, a canary each."""
    datas = stream(*(b"\\n" + word for word in WORDS * 3))
    expected = each(datas)
    decodes.clear()
    assert at_once(datas) == expected
    # [DONE] is never decoded, the usage chunk once (`read_chunk` looks at its free-form JSON without decoding it
    # again), and three canaries.
    assert len(decodes) == len(datas) - 1 + 3


def test_a_whole_answer_in_one_block_is_one_delta_through_the_watch() -> None:
    """The simulator's stream as the watch gets it (a 64-token answer in one block, its role chunk first): one
    text delta, 64 tokens, and what the chunk-by-chunk reading gives."""
    texts = [f" word{n}".encode() for n in range(64)]
    block = b"".join(b"data: " + data + b"\n\n" for data in stream(*texts))
    events, reader = read(Wire.OPENAI_CHAT, block, len(block))
    assert not reader.problem and reader.step.streamed == 64
    assert sum(isinstance(event, TextDelta) for event in events) == 1
    assert "".join(reader.step.text) == "".join(text.decode() for text in texts)


def test_a_chunk_read_alone_costs_no_canary(decodes: list[bytes]) -> None:
    """hotloop's own provider reads a chunk a call: there is never a run to read by bytes, so no chunk is tried for
    a shape, and each is decoded once (the usage chunk too: `read_chunk` looks at its free-form JSON, not decoding it
    again)."""
    datas = stream(*WORDS)
    parser, events = ChunkParser(where="the server"), list[ModelEvent]()
    for data in datas:
        parser.read([data], "the server", events)
    assert len(decodes) == len(datas) - 1
    assert "".join(event.text for event in events if isinstance(event, TextDelta)) == b"".join(WORDS).decode()
