"""Server-sent events read as the protocols need them: each event's `data` as bytes, valid UTF-8, tool-call
ids made unique, and the one line for data that isn't the JSON it should be. The watch reads its copy of a
stream with the same splitter.
"""

from __future__ import annotations

import re

import msgspec

from hotloop.providers.errors import StreamInterrupted
from hotloop.providers.events import ProviderWarning


class SseSplitter:
    """Cuts server-sent events out of blocks of bytes as they arrive: the `data` of each event, as bytes
    (multi-line data joined by newlines).

    Working on bytes skips text decoding and line objects: msgspec decodes JSON from bytes
    directly. Lines end in LF, CRLF or CR, as the spec allows (a CR ending a block is held: its
    LF may come with the next). `end` delivers a last event not ended by a blank line. An event
    whose data is empty or blank is a keep-alive, as a comment is: no protocol's event, so none is delivered.
    """

    __slots__ = ("_data", "_pending")

    def __init__(self) -> None:
        self._pending = b""
        self._data: list[bytes] = []

    def feed(self, block: bytes) -> list[bytes]:
        # A block of whole one-line `data: ` events, as servers send nearly always (a token a write, or a whole
        # answer at once): cut in one split, where every newline is one of theirs.
        if not self._pending and not self._data and block.startswith(b"data: ") and block.endswith(b"\n\n"):
            whole = block[6:-2].split(b"\n\ndata: ")
            # No newline of an event's own. Searched for in the events joined (a memchr over a copy), not counted over
            # the block: Python counts a byte a byte, and the count was half of the split.
            if b"\r" not in block and b"\n" not in b"".join(whole):
                # A blank event (a keep-alive) starts with a byte at or under a space: none, where the least doesn't.
                if (least := min(whole)) and least[0] > 32:
                    return whole
                return [event for event in whole if event and not event.isspace()]
        text = self._pending + block
        if b"\r" in text:
            held = b"\r" if text.endswith(b"\r") else b""
            text = text[: len(text) - len(held)].replace(b"\r\n", b"\n").replace(b"\r", b"\n") + held
        # Cut at the blank lines first: an event that is one `data: ` line (every protocol's, nearly always) is
        # taken whole, without a line object of its own. What follows the last blank line is read line by line.
        *ended, rest = text.split(b"\n\n")
        events: list[bytes] = []
        for piece in ended:
            if not self._data and piece.startswith(b"data: ") and b"\n" not in piece:
                if (event := piece[6:]) and not event.isspace():
                    events.append(event)
            else:
                self._lines([*piece.split(b"\n"), b""], events)
        *lines, self._pending = rest.split(b"\n")
        self._lines(lines, events)
        return events

    def _lines(self, lines: list[bytes], events: list[bytes]) -> None:
        data = self._data
        for line in lines:
            if not line:
                if data:
                    if (event := b"\n".join(data)) and not event.isspace():
                        events.append(event)
                    data.clear()
            elif line.startswith(b"data:"):
                data.append(line[6:] if line.startswith(b"data: ") else line[5:])

    def end(self) -> list[bytes]:
        pending, self._pending = self._pending.removesuffix(b"\r"), b""
        if pending.startswith(b"data:"):
            self._data.append(pending[6:] if pending.startswith(b"data: ") else pending[5:])
        last = b"\n".join(self._data)
        self._data = []
        return [last] if last and not last.isspace() else []


class CallIds:
    """Tool-call ids made unique within a response: a repeated id gets a suffix, and a warning says so.

    Two calls with one id would pair with one result, and the other's result would be dropped.
    """

    def __init__(self, where: str) -> None:
        self._where = where
        self._seen: set[str] = set()

    def unique(self, call_id: str) -> tuple[str, ProviderWarning | None]:
        if call_id not in self._seen:
            self._seen.add(call_id)
            return call_id, None
        number = 2
        while f"{call_id}-{number}" in self._seen:
            number += 1
        renamed = f"{call_id}-{number}"
        self._seen.add(renamed)
        return renamed, ProviderWarning(
            f"{self._where} sent two tool calls with the id {call_id}; the later is {renamed}"
        )


class _Typed(msgspec.Struct, gc=False):
    type: str = ""


_decode_typed = msgspec.json.Decoder(_Typed).decode
# Events a server sends before, or beside, its answer: none says when the model's first token came (real Anthropic
# pings at once, OpenAI's Responses creates the response before its prefill).
_PREAMBLE = frozenset({"ping", "response.created", "response.in_progress", "response.queued"})
# One search for any of their names (the four `in` tests of a generator took ~3 µs a data on this VM, 0.4 the search).
_PREAMBLE_MARK = re.compile(rb'"(?:ping|response\.(?:created|in_progress|queued))"')


def opens_answer(data: bytes) -> bool:
    """Whether an event's `data` is the answer's first content, where TTFT ends: a preamble event (`_PREAMBLE`)
    names no token, and keep-alives (comments, empty events) never leave `SseSplitter`. A role-only chunk counts:
    servers send it with their first token (llama.cpp as its prefill ends, then holds a call's first fragment
    back)."""
    if _PREAMBLE_MARK.search(data) is None:
        return True
    try:
        return _decode_typed(data).type not in _PREAMBLE
    except (msgspec.DecodeError, RecursionError):
        return True  # not JSON, or not this shape: the parser says what it is


def utf8(data: bytes) -> tuple[bytes, bool]:
    """`data` as valid UTF-8 (bytes that aren't become U+FFFD), and whether any had to."""
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return data.decode("utf-8", errors="replace").encode(), True
    return data, False


def malformed(where: str, what: str, error: Exception, data: bytes) -> StreamInterrupted:
    """The error for event data that is not the JSON it should be, quoting the start of it."""
    return StreamInterrupted(f"{where} sent a malformed {what} ({error}): {data[:120].decode(errors='replace')}")
