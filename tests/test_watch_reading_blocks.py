"""The watch reads an answer the same however its bytes are cut into blocks: real recordings of every protocol, and
text whose characters are cut between blocks; bytes that are not UTF-8 are one warning, wherever they come."""

from __future__ import annotations

import json

import msgspec
import pytest

from hotloop.providers.events import ModelEvent, ProviderWarning, TextDelta
from hotloop.providers.protocols import Wire
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
        assert untimed(events) == untimed(whole), size
        assert cut.step.usage == reader.step.usage and not cut.problem


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
