"""JSON from a client nested past the parser's stack: a 400 that says so, never a RecursionError (a 500).

The rule of `hotloop.nesting`, written again because the simulator imports nothing of hotloop: a
document nested deeper than `LIMIT` levels is refused before `json.loads` sees it, so whatever reads
the request next (the template, an encoder) has room for it too.
"""

from __future__ import annotations

import json
import re
from typing import Any

LIMIT = 200  # levels of arrays and objects
_TOKENS = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', re.DOTALL)  # a string, skipped whole, or a bracket


class TooDeep(ValueError):
    def __init__(self) -> None:
        super().__init__(f"nested deeper than {LIMIT} levels")


def loads(data: bytes | str) -> Any:
    """`json.loads(data)`; `TooDeep` (a ValueError, as json's own errors are) past `LIMIT` levels."""
    raw = data.encode() if isinstance(data, str) else data
    if len(raw) > LIMIT and raw.count(b"[") + raw.count(b"{") > LIMIT and _too_deep(raw):
        raise TooDeep
    try:
        return json.loads(data)
    except RecursionError:
        raise TooDeep from None


def _too_deep(raw: bytes) -> bool:
    depth = 0
    for token in _TOKENS.finditer(raw):
        text = token.group()
        if text in (b"[", b"{"):
            depth += 1
            if depth > LIMIT:
                return True
        elif text in (b"]", b"}"):
            depth -= 1
    return False
