"""`SseSplitter` against the spec's line-by-line reading, on streams cut into blocks anywhere."""

from __future__ import annotations

import random

import pytest

from hotloop.providers.sse import SseSplitter

EVENTS = [
    b'data: {"a":1}\n\n',
    b"data:{}\n\n",
    b"data: one\ndata: two\n\n",
    b": keep-alive\n\n",
    b"event: ping\ndata: {}\n\n",
    b"data: \n\n",
    b"data:   \n\n",
    b"\n\n\n",
    b"id: 7\n\n",
    b'data: {"b":2}\r\n\r\n',
    b"data: cr\r\rdata: x\r\n\n",
    b"data: [DONE]\n\n",
    b"data: no blank line after",
    b'data: {"text":"a\\n\\nb"}\n\n',
]


def by_the_spec(stream: bytes) -> list[bytes]:
    """Each event's data as the spec reads a whole stream: lines end in CRLF, LF or CR; a blank line ends an
    event; blank data is a keep-alive. The last event counts without its blank line (hotloop's reading)."""
    lines = stream.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
    events: list[bytes] = []
    data: list[bytes] = []
    for line in [*lines, b""]:
        if not line:
            if (event := b"\n".join(data)) and not event.isspace():
                events.append(event)
            data = []
        elif line.startswith(b"data:"):
            data.append(line[6:] if line.startswith(b"data: ") else line[5:])
    return events


def split(stream: bytes, cuts: list[int]) -> list[bytes]:
    splitter = SseSplitter()
    found: list[bytes] = []
    for start, end in zip([0, *cuts], [*cuts, len(stream)], strict=True):
        found += splitter.feed(stream[start:end])
    return found + splitter.end()


@pytest.mark.parametrize("seed", range(200))
def test_any_cut_of_any_stream_reads_as_the_spec_does(seed: int) -> None:
    """Streams of every kind of event (one-line data, multi-line, comments, CR and CRLF, blank and whitespace data,
    runs of blank lines, an unended last event) cut at random places, a CR's LF in the next block among them, give
    exactly the events the spec's reading of the whole stream gives."""
    chance = random.Random(seed)
    stream = b"".join(chance.choice(EVENTS) for _ in range(chance.randint(1, 12)))
    if chance.random() < 0.5:
        stream = stream.removesuffix(b"data: no blank line after")
    cuts = sorted(chance.sample(range(1, len(stream)), min(len(stream) - 1, chance.randint(0, 8))))
    assert split(stream, cuts) == by_the_spec(stream)


def test_an_event_cut_byte_by_byte_is_one_event() -> None:
    """A multi-line event fed a byte at a time comes out once, whole, at its blank line."""
    stream = b'data: {"a":\ndata: 1}\n\ndata: x\r\n\r\n'
    assert split(stream, list(range(1, len(stream)))) == [b'{"a":\n1}', b"x"]


ONE_LINE = [
    b'data: {"a":1}\n\n',
    b"data: \n\n",
    b"data:   \n\n",
    b"data: data: nested\n\n",
    b'data: {"text":"a\\n\\ndata: b"}\n\n',
    b"data: [DONE]\n\n",
]


@pytest.mark.parametrize("seed", range(100))
def test_a_block_of_whole_events_reads_as_the_spec_does(seed: int) -> None:
    """A block of one-line `data: ` events (blank, whitespace, data that says `data: `), as a server that writes an
    answer at once sends it, cut in one split, gives the spec's events; one other kind of line among them (a
    comment, a second data line, a CR, a run of blank lines) is read line by line, and gives them too."""
    chance = random.Random(seed)
    events = [chance.choice(ONE_LINE) for _ in range(chance.randint(1, 12))]
    if seed % 2:
        odd = chance.choice([b": keep-alive\n\n", b"data: one\ndata: two\n\n", b"data: cr\r\n\r\n", b"\n\n\n"])
        events.insert(chance.randint(0, len(events)), odd)
    stream = b"".join(events)
    assert split(stream, []) == by_the_spec(stream)
    assert split(stream, [len(stream) // 2]) == by_the_spec(stream)
