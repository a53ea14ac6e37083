"""What a reader makes of a source file: turns of steps of calls, with the times its lines record.

`read_lines` reads the file itself: one JSON object a line, whatever the file holds. A line that is torn,
not JSON, not UTF-8 or absurdly long is skipped or repaired and named in one line, never raised. What isn't a
regular file (a FIFO, a device, a link to one) or holds more than `MAX_SOURCE` bytes is refused before a byte is
read (`sessions/files.py`). `vetted` makes what was read safe to save: plain ids, usage a request can have.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from hotloop.agent.cache_explainer import WireSegments
from hotloop.agent.text import visible
from hotloop.providers.events import UsageLedger
from hotloop.providers.protocols import Wire
from hotloop.sessions.files import open_file
from hotloop.sessions.summary import implausible

# A transcript line holds one message; past this it is not one an agent wrote, and reading it whole could
# exhaust memory.
MAX_LINE = 32 * 1024 * 1024
_CHUNK = 1024 * 1024
# The most an import reads of a transcript or rollout: far above a real one (a long day's is tens of MB), far
# below what would exhaust memory or time. (opencode's database is read by SQLite, a row at a time.)
MAX_SOURCE = 2**30
_NOT_IN_AN_ID = re.compile(r"[^0-9A-Za-z_.:-]")  # a source's session id is a UUID or a word, never a path
_ID_LENGTH = 200
_PATH_LENGTH = 4096  # Linux's PATH_MAX: a recorded folder longer than this was never one


@dataclass
class Call:
    call_id: str
    name: str
    arguments: str
    at: float | None = None  # when the source wrote the call
    result: str | None = None  # None: no result was recorded
    is_error: bool = False
    done_at: float | None = None  # when the source wrote the result


@dataclass
class Step:
    """One API request and its response."""

    model: str
    started: float | None  # when the request went out, as near as the source says
    ended: float | None  # the response's last recorded line
    usage: UsageLedger | None = None
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    finish_reason: str = ""
    segments: WireSegments | None = None  # the request by segment, where the source keeps its shape


@dataclass
class Turn:
    prompt: str
    at: float | None
    steps: list[Step] = field(default_factory=list)


@dataclass
class Imported:
    """One conversation of a source: its main one, or a sub-agent's (`side_key`)."""

    agent: str  # "claude-code" or "codex": the `--from` name
    source_id: str  # the source's own session id
    version: str  # the agent's version, where the source records it
    provider: str  # the provider's name as the source gives it ("anthropic", Codex's "openai" or its config's)
    base_url: str  # the server it priced by, where one can be told
    model: str
    workspace: str
    started: float | None
    wire: Wire  # the protocol its requests spoke, which says what its figures mean
    turns: list[Turn] = field(default_factory=list)
    side_key: str = ""  # a sub-agent's conversation: which one

    @property
    def origin(self) -> str:
        return f"import:{self.agent}/{self.version}" if self.version else f"import:{self.agent}"


def vetted(imported: Imported, name: str, problems: list[str]) -> None:
    """`imported` made safe to save, each change named in `problems`: its ids plain words (a `/` or `..` in one
    becomes `_`), its recorded folder no longer than a path, and every usage no request has marked unknown."""
    for attribute in ("source_id", "side_key"):
        given: str = getattr(imported, attribute)
        plain = _NOT_IN_AN_ID.sub("_", given[:_ID_LENGTH])
        if plain != given:
            problems.append(f"{name}: id {visible(given[:80])} is not a plain id; saved as {plain[:80]}")
            setattr(imported, attribute, plain)
    if len(imported.workspace) > _PATH_LENGTH:
        problems.append(
            f"{name}: its recorded folder is {len(imported.workspace):,} characters long, not a path; dropped"
        )
        imported.workspace = ""
    claims = []
    for step in (step for turn in imported.turns for step in turn.steps):
        claim = implausible(step.usage)
        if claim is not None:
            claims.append(claim)
            step.usage = UsageLedger(distrust=claim)
    if claims:
        problems.append(f"{name}: usage no request has ({claims[0]}) in {len(claims)} step(s): counted as unknown")


@dataclass
class SourceLine:
    number: int
    data: dict[str, Any]


def read_lines(path: Path, problems: list[str]) -> Iterator[SourceLine]:
    """Each line of `path` that is a JSON object; every other line is named in `problems`."""
    name = path.name
    with open_file(path, MAX_SOURCE) as file:
        number = 0
        while True:
            raw = file.readline(MAX_LINE)
            if not raw:
                return
            number += 1
            if file.tell() > MAX_SOURCE:  # it grew while read
                problems.append(f"{name}: grew past the {MAX_SOURCE // 2**30} GB limit while read; the rest skipped")
                return
            if len(raw) == MAX_LINE and not raw.endswith(b"\n"):
                while (rest := file.readline(_CHUNK)) and not rest.endswith(b"\n") and file.tell() <= MAX_SOURCE:
                    pass  # drop the rest of the line without holding it
                problems.append(f"{name} line {number}: longer than {MAX_LINE // 2**20} MB, skipped")
                continue
            if not raw.strip():
                continue
            ending = "" if raw.endswith(b"\n") else " (the file ends mid-line)"
            data = json_object(raw, f"{name} line {number}", problems, (f"not JSON{ending}", "not a JSON object"))
            if data is not None:
                yield SourceLine(number, data)


def json_object(raw: bytes, where: str, problems: list[str], faults: tuple[str, str]) -> dict[str, Any] | None:
    """`raw` read as a JSON object (bytes that aren't UTF-8 replaced, and said); None, with `where` and the fault
    that applies (`faults`: not JSON, not an object) named in `problems`, if it isn't one."""
    try:
        text = raw.decode()
    except UnicodeDecodeError:
        text = raw.decode(errors="replace")
        problems.append(f"{where}: bytes that aren't UTF-8, read as �")
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        problems.append(f"{where}: {faults[0]}, skipped")
        return None
    if not isinstance(data, dict):
        problems.append(f"{where}: {faults[1]}, skipped")
        return None
    return data


def kind_of(data: dict[str, Any], key: str = "type") -> str:
    """A record's type, as a short string whatever the file put there."""
    kind = data.get(key)
    return kind[:40] if isinstance(kind, str) else f"({type(kind).__name__})"


def timestamp(value: object) -> float | None:
    """An ISO 8601 time (`2026-11-27T04:28:34.532Z`) as epoch seconds; None if it isn't one."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except (ValueError, OverflowError, OSError):
        return None


def text_of(content: object) -> str:
    """The text of a message's or result's content: a string, or the text of its blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and isinstance(block.get("text", ""), str)
        )
    return ""


def canonical(value: object) -> bytes:
    """A JSON value's bytes as compared between requests: sorted keys, no spaces."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(errors="replace")
