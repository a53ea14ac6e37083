"""opencode's session store (`$XDG_DATA_HOME/opencode/opencode.db`, SQLite since 1.2) read as conversations.

Each `session` row is a conversation (one with a `parent_id` is a sub-agent's, a side conversation of its
parent); its `message` rows are JSON objects (`role` user or assistant) and their `part` rows the content: a
user's `text`, an assistant's `step-start`, `text`, `reasoning`, `tool` (input, output or error, and the
call's `time.start`/`time.end` in ms) and `step-finish`, which carries that API request's `tokens` (`input`
uncached, `output`, `reasoning`, `cache.read`, `cache.write`) and `cost`. A step is a `step-finish`: opencode
1.18 writes one assistant message per request, earlier versions several steps in one message. The `cost` is
opencode's own estimate from its models.dev price table, not a figure the server sent, so it is not taken as
the provider's (`reported_cost`): hotloop prices the tokens by its own table, as for the other agents.

The database is opened read-only and never written; a row whose JSON is torn or whose bytes aren't UTF-8 is
one problem line and the rest is read; a file that isn't a database (or is damaged past reading) is one line.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hotloop.providers.events import UsageLedger
from hotloop.providers.protocols import Wire
from hotloop.sessions.imports.model import Call, Imported, Step, Turn, json_object

AGENT = "opencode"
# Where opencode's provider id names the server and its protocol; any other (a custom provider, a gateway) is
# recorded as an OpenAI-compatible server with no URL.
_SERVERS = {
    "anthropic": ("anthropic", "https://api.anthropic.com", Wire.ANTHROPIC),
    "openai": ("openai", "https://api.openai.com/v1", Wire.OPENAI_RESPONSES),
}
_PART_KINDS = frozenset(
    {"text", "reasoning", "tool", "step-start", "step-finish", "file", "snapshot", "patch", "agent", "subtask"}
    | {"retry", "compaction"}
)


@dataclass
class _Row:
    id: str
    at: float | None  # the row's time_created, seconds
    data: dict[str, Any]


@dataclass
class _Session:
    id: str
    directory: str
    version: str
    parent: str
    created: float | None
    messages: list[_Row] = field(default_factory=list)
    parts: dict[str, list[_Row]] = field(default_factory=dict)


def read_store(path: Path, problems: list[str]) -> list[Imported]:
    """Every conversation in an opencode database; what can't be read, a line each in `problems`."""
    name = path.name
    if not path.is_file():
        raise OSError(2, "No such file", str(path))
    try:
        uri = f"file:{quote(str(path.resolve()))}?mode=ro"
        db = sqlite3.connect(uri, uri=True, timeout=2.0)
    except sqlite3.Error as error:
        problems.append(f"{name}: cannot open as an opencode database ({error}), skipped")
        return []
    db.text_factory = bytes  # text that isn't UTF-8 is repaired row by row, not raised for the whole query
    try:
        sessions = _sessions(db, name, problems)
    except sqlite3.Error as error:
        problems.append(f"{name}: not an opencode database or damaged ({error}), skipped")
        return []
    finally:
        db.close()
    found = []
    for session in sessions:
        imported = _conversation(session, name, problems)
        if imported is not None and any(turn.steps for turn in imported.turns):
            found.append(imported)
    return found


def _sessions(db: sqlite3.Connection, name: str, problems: list[str]) -> list[_Session]:
    sessions: list[_Session] = []
    rows = db.execute("SELECT id, directory, version, parent_id, time_created FROM session ORDER BY time_created, id")
    for row in rows.fetchall():
        session_id = _text(row[0], name, "a session id", problems)
        sessions.append(
            _Session(
                session_id[:200],
                _text(row[1], name, f"session {session_id}'s directory", problems),
                _text(row[2], name, f"session {session_id}'s version", problems)[:40],
                _text(row[3], name, f"session {session_id}'s parent", problems)[:200],
                _seconds(row[4]),
            )
        )
    for session in sessions:
        try:
            session.messages = _rows(
                db.execute(
                    "SELECT id, time_created, data FROM message WHERE session_id = ? ORDER BY time_created, id",
                    (session.id,),
                ),
                name,
                "message",
                problems,
            )
            parts = db.execute(
                "SELECT id, time_created, data, message_id FROM part WHERE session_id = ? ORDER BY id", (session.id,)
            )
            for row in parts.fetchall():
                for part in _rows([row[:3]], name, "part", problems):
                    message = _text(row[3], name, f"part {part.id}'s message", problems)
                    session.parts.setdefault(message, []).append(part)
        except sqlite3.Error as error:
            problems.append(f"{name}: session {session.id}'s messages can't be read ({error}), read in part")
    return sessions


def _rows(rows: Any, name: str, kind: str, problems: list[str]) -> list[_Row]:
    found = []
    for row in rows:
        row_id = _text(row[0], name, f"a {kind} id", problems)[:200]
        raw = row[2]
        where = f"{name}: {kind} {row_id}"
        if not isinstance(raw, bytes):
            problems.append(f"{where}: no JSON data, skipped")
            continue
        data = json_object(raw, where, problems, ("its data is not JSON (torn?)", "its data is not a JSON object"))
        if data is None:
            continue
        found.append(_Row(row_id, _seconds(row[1]), data))
    return found


def _text(value: object, name: str, what: str, problems: list[str]) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            problems.append(f"{name}: {what} has bytes that aren't UTF-8, read as �")
            return value.decode(errors="replace")
    return str(value)


def _conversation(session: _Session, name: str, problems: list[str]) -> Imported | None:
    imported = Imported(
        agent=AGENT,
        source_id=session.parent or session.id,
        version=session.version,
        provider="",
        base_url="",
        model="",
        workspace=session.directory,
        started=session.created,
        wire=Wire.OPENAI_CHAT,  # until its first answer names the provider
        side_key=session.id if session.parent else "",
    )
    unknown: dict[str, int] = {}
    for message in session.messages:
        data, parts = message.data, session.parts.get(message.id, [])
        role = data.get("role")
        created = _seconds(_get(data, "time", "created")) or message.at
        if role == "user":
            prompt = "\n".join(
                str(part.data.get("text"))
                for part in parts
                if part.data.get("type") == "text" and not part.data.get("synthetic")
            )
            imported.turns.append(Turn(prompt=prompt, at=created))
        elif role == "assistant":
            _assistant(imported, data, parts, created, unknown)
        else:
            unknown[f"message role {str(role)[:40]!r}"] = unknown.get(f"message role {str(role)[:40]!r}", 0) + 1
    for kind, count in unknown.items():
        problems.append(f"{name}: session {session.id}: {count} {kind} record(s) not understood, skipped")
    return imported


def _assistant(
    imported: Imported, data: Mapping[str, Any], parts: list[_Row], created: float | None, unknown: dict[str, int]
) -> None:
    model = str(data.get("modelID") or "")[:200]
    if not imported.provider:
        provider = str(data.get("providerID") or "")[:80]
        imported.provider, imported.base_url, imported.wire = _SERVERS.get(provider, (provider, "", Wire.OPENAI_CHAT))
        imported.model = model
    if not imported.turns:
        imported.turns.append(Turn(prompt="", at=created))
    turn = imported.turns[-1]
    completed = _seconds(_get(data, "time", "completed"))
    step: Step | None = None
    finished = 0
    for part in parts:
        kind = part.data.get("type")
        if kind not in _PART_KINDS:
            label = f"part type {str(kind)[:40]!r}"
            unknown[label] = unknown.get(label, 0) + 1
            continue
        if kind == "step-finish":
            step = step or _open(turn, model, created)
            step.usage = ledger(part.data.get("tokens"))
            step.finish_reason = str(part.data.get("reason") or "")[:40]
            step.ended = part.at or completed or step.ended
            created, step, finished = step.ended, None, finished + 1  # the next request follows this one
            continue
        if kind == "step-start":
            step = step or _open(turn, model, created)
        elif kind in ("text", "reasoning") and isinstance(part.data.get("text"), str):
            step = step or _open(turn, model, created)
            (step.text if kind == "text" else step.reasoning).append(part.data["text"])
        elif kind == "tool":
            step = step or _open(turn, model, created)
            step.calls.append(_call(part.data))
    if step is not None or not finished:
        # A request without a `step-finish`: an older store keeps the usage on the message, a failed one none.
        step = step or _open(turn, model, created)
        tokens = data.get("tokens")
        if not finished and isinstance(tokens, dict) and any(_count(v) for v in _flat(tokens)):
            step.usage = ledger(tokens)
        error = data.get("error")
        step.finish_reason = str(data.get("finish") or ("error" if error else ""))[:40]
        if isinstance(error, dict) and not step.text:
            message = _get(error, "data", "message")
            step.text.append(f"error: {message if isinstance(message, str) else error.get('name')}")
        step.ended = completed or step.ended


def _open(turn: Turn, model: str, at: float | None) -> Step:
    step = Step(model=model, started=at, ended=at)
    turn.steps.append(step)
    return step


def _call(part: Mapping[str, Any]) -> Call:
    state = part.get("state")
    state = state if isinstance(state, dict) else {}
    arguments = state.get("input")
    call = Call(
        str(part.get("callID") or part.get("id") or "")[:200],
        str(part.get("tool") or "")[:200],
        json.dumps(arguments, ensure_ascii=False) if isinstance(arguments, dict) else "",
        at=_seconds(_get(state, "time", "start")),
    )
    status = state.get("status")
    if status in ("completed", "error"):
        result = state.get("output") if status == "completed" else state.get("error")
        call.result = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)
        call.is_error = status == "error"
        call.done_at = _seconds(_get(state, "time", "end"))
    return call


def ledger(tokens: object) -> UsageLedger | None:
    """opencode's `tokens` as recorded: `input` is the uncached part (it takes the cached part out itself)."""
    if not isinstance(tokens, dict):
        return None
    cache = tokens.get("cache")
    cache = cache if isinstance(cache, dict) else {}
    uncached, read, write = _count(tokens.get("input")), _count(cache.get("read")), _count(cache.get("write"))
    return UsageLedger.from_parts(uncached, read, write, _count(tokens.get("output")), _count(tokens.get("reasoning")))


def _flat(tokens: Mapping[str, Any]) -> list[object]:
    cache = tokens.get("cache")
    return [tokens.get("input"), tokens.get("output"), *(cache.values() if isinstance(cache, dict) else ())]


def _count(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < 2**53 else None


def _get(data: Mapping[str, Any], *keys: str) -> object:
    value: object = data
    for key in keys:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _seconds(value: object) -> float | None:
    """opencode's times are epoch milliseconds."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1e15:
        return None
    return value / 1000
