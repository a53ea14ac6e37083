"""JSON and TOML nested past a parser's stack, refused in one line rather than a RecursionError.

msgspec, json and tomllib recurse once per level, so a document 100,000 levels deep (`[[[[…]]]]`
from a hostile server, an MCP server, a file) raises RecursionError: no decode error, so the
`except` meant for malformed input lets it through, and a traceback ends the program. `decoded`
refuses anything nested deeper than `LIMIT` levels before the parser sees it, with `TooDeep`, which
is both a `msgspec.DecodeError` and a `json.JSONDecodeError`: the handler a caller already has for
malformed input catches it, and its message says what it is. No API nests a tenth as deep; MCP's SDK
(pydantic's parser) stops at 200 as well. A fixed limit, not the stack's room, so the same document
reads the same everywhere, and what reads it next (an encoder, a walker) has room too. Like
`paths.py`, this imports nothing of hotloop, so any layer may use it (the simulator, which imports
nothing of hotloop at all, keeps its own check).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any, Literal, TypeVar

import msgspec

LIMIT = 200  # levels of arrays and objects (tables): one `[` or `{` each, or in TOML one part of a dotted key

_Text = TypeVar("_Text", bound=bytes | str)
_Value = TypeVar("_Value")
Syntax = Literal["json", "toml"]

# A string (skipped whole: brackets inside it are text), or one bracket. TOML's strings come in four kinds, a
# comment runs to the end of its line, and a dotted key (`a.b.c = 1`, `[a.b.c]`) nests a table a dot: its dots
# count until the `=`, the bracket, the comma or the line's end that ends the key.
_JSON = r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]'
_TOML = r'"""[\s\S]*?"""|\'\'\'[\s\S]*?\'\'\'|"[^"\\\n]*(?:\\.[^"\\\n]*)*"|\'[^\'\n]*\'|#[^\n]*|[\[\]{}.=,\n]'
_TOKENS: dict[tuple[type, str], re.Pattern[Any]] = {
    (kind, syntax): re.compile(pattern.encode() if kind is bytes else pattern, re.DOTALL)
    for kind in (bytes, str)
    for syntax, pattern in (("json", _JSON), ("toml", _TOML))
}


class TooDeep(msgspec.DecodeError, json.JSONDecodeError):
    """A document nested deeper than `LIMIT` levels; `pos` is where it went past (0 when unknown)."""

    def __init__(self, document: bytes | str, pos: int) -> None:
        message = f"nested deeper than {LIMIT} levels"
        ValueError.__init__(self, message)  # str(): the message alone, without JSONDecodeError's position suffix
        self.msg, self.pos = message, pos
        self.doc = document if isinstance(document, str) else document.decode("utf-8", "replace")
        self.lineno = self.doc.count("\n", 0, pos) + 1
        self.colno = pos - self.doc.rfind("\n", 0, pos)


def decoded(decode: Callable[[_Text], _Value], data: _Text, syntax: Syntax = "json") -> _Value:
    """`decode(data)`, or `TooDeep` if `data` nests deeper than `LIMIT` levels.

    `decode` is any parser of the text: `json.loads`, `msgspec.json.decode`, a typed `Decoder(...).decode`,
    `tomllib.loads` or `msgspec.toml.decode` (with `syntax="toml"`).
    """
    if len(data) > LIMIT and (past := where_too_deep(data, syntax)) is not None:  # a short one can't be too deep
        raise TooDeep(data, past)
    try:
        return decode(data)
    except RecursionError:
        # Within the limit, yet the stack had no room left for it (called from very deep): refused all the same.
        raise TooDeep(data, 0) from None


def where_too_deep(data: bytes | str, syntax: Syntax = "json") -> int | None:
    """Where `data` first nests deeper than `LIMIT` levels (an index into it), or None if it never does.

    Counting brackets (and TOML's dots) costs next to nothing; only a document with more than `LIMIT` of them is
    read token by token, its strings skipped whole.
    """
    opening: tuple[bytes | str, ...]
    closing: tuple[bytes | str, ...]
    dot: bytes | str
    if isinstance(data, bytes):
        opening, closing, dot = (b"[", b"{"), (b"]", b"}"), b"."
        nesting = data.count(b"[") + data.count(b"{") + (data.count(b".") if syntax == "toml" else 0)
    else:
        opening, closing, dot = ("[", "{"), ("]", "}"), "."
        nesting = data.count("[") + data.count("{") + (data.count(".") if syntax == "toml" else 0)
    if nesting <= LIMIT:
        return None
    depth = dots = 0
    for token in _TOKENS[type(data), syntax].finditer(data):
        text = token.group()
        if text in opening:
            depth, dots = depth + 1, 0
            if depth > LIMIT:
                return token.start()
        elif text in closing:
            depth, dots = depth - 1, 0
        elif text == dot:
            dots += 1
            if dots >= LIMIT:  # a key of more than LIMIT parts
                return token.start()
        elif len(text) == 1:  # what ends a key: `=`, `,`, a line's end
            dots = 0
    return None
