"""Saved sessions: finding them by id prefix or by last use, listing and searching them, reading and deleting them.

"Latest" means the log written to last (its mtime), not the one started last: continuing an
old session makes it the latest again. The mtime costs one `stat` a session, where a time kept
in the summary would cost reading every summary, and lag the log by up to a turn.

Reading never fails on one bad line: a torn or corrupt line is skipped, with a warning that
names the file and the line, and everything else loads. A log is read as data from anyone: a header
whose id isn't one hotloop writes is refused, and a step's usage that no request has is read as unknown.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import msgspec

from hotloop import InputError
from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    ResponseFinished,
    SideOf,
    SideRequest,
    StepFinished,
    decode,
)
from hotloop.agent.figures import counted
from hotloop.agent.pricing import CostTotals
from hotloop.nesting import LIMIT, TooDeep, decoded
from hotloop.sessions.files import NotAFile, open_file
from hotloop.sessions.log import FORMAT_VERSION, SessionHeader, is_in_use
from hotloop.sessions.summary import believable, implausible, read_summary, summary_path

_header = msgspec.json.Decoder(SessionHeader)
_events = msgspec.json.Decoder(AgentEvent)
MAX_WARNINGS = 5
MAX_HEADER = 64 * 2**20  # a header holds the system prompt; a first line past this is no header
_ID = re.compile(r"[0-9A-Za-z_-]{1,64}")  # what hotloop names sessions by: hex today


class SessionError(InputError):
    """A session that can't be found or read; `str(error)` is the one-line reason."""


@dataclass(frozen=True)
class SessionSummary:
    id: str
    path: Path
    started: float
    provider: str  # the provider and model of the session's last step (its header's before any step)
    model: str
    title: str
    turns: int
    tokens: int | None  # prompt + output over the steps that reported usage; None if none did
    prompts: tuple[str, ...]
    costs: CostTotals | None = None  # None: its summary is older than costs
    parent: str = ""  # the session it was forked from, if it is a fork
    origin: str = ""  # a watched session's (`watch:claude-cli/2.1.332`); "" for hotloop's own
    unmeasured: int = 0  # steps whose usage is unknown: `tokens` is a floor
    side_of: str = ""  # a watched side request's conversation (a title, a sub-agent)

    def matches(self, text: str) -> bool:
        """Whether `text` appears, ignoring case, in the session's id, model, title, origin or any of its prompts."""
        needle = text.casefold()
        fields = (self.id, self.model, self.title, self.origin, *self.prompts)
        return any(needle in field.casefold() for field in fields)


@dataclass(frozen=True)
class Listing:
    sessions: list[SessionSummary]
    problems: list[str]  # files that are not readable sessions, one line each


def session_id_of(path: Path) -> str:
    return path.stem.rsplit("_", 1)[-1]


def list_sessions(folder: Path, search: str | None = None) -> Listing:
    """The readable sessions in `folder`, newest first, those matching `search` if given."""
    sessions, problems = [], []
    for path in sorted(folder.glob("*.jsonl"), reverse=True) if folder.is_dir() else []:
        try:
            summary = summarize(path)
        except SessionError as error:
            problems.append(str(error))
            continue
        if search is None or summary.matches(search):
            sessions.append(summary)
    sessions.sort(key=lambda s: s.started, reverse=True)
    return Listing(sessions, problems)


def past_events(folder: Path, workspace: Path, limit: int = 10, max_bytes: int = 5_000_000) -> list[list[AgentEvent]]:
    """The events of the newest sessions run in `workspace` (at most `limit`, each under `max_bytes`), for learning.

    Unreadable or oversized logs are passed over: what they would teach is not worth a slow start.
    """
    found: list[list[AgentEvent]] = []
    for path in sorted(folder.glob("*.jsonl"), reverse=True) if folder.is_dir() else []:
        if len(found) >= limit:
            break
        try:
            if path.stat().st_size > max_bytes or read_header(path)[0].workspace != str(workspace):
                continue
            found.append(read_session(path).events)
        except (OSError, SessionError):
            continue
    return found


def summarize(path: Path) -> SessionSummary:
    with _log_file(path) as file:
        header, header_size = _header_of(path, file.readline(MAX_HEADER))
        summary = read_summary(path, header_size, file)
    return SessionSummary(
        header.id,
        path,
        header.started,
        summary.provider or header.provider,
        summary.model or header.model,
        summary.title,
        summary.turns,
        summary.tokens,
        tuple(summary.prompts),
        summary.costs,
        header.parent,
        header.origin,
        summary.unmeasured,
        summary.side_of or header.side_of,
    )


def read_header(path: Path) -> tuple[SessionHeader, int]:
    """The session's header and its size in bytes, or a SessionError that says what is wrong."""
    with _log_file(path) as file:
        first = file.readline(MAX_HEADER)
    return _header_of(path, first)


@contextmanager
def _log_file(path: Path) -> Iterator[BinaryIO]:
    """The log open for reading; a SessionError if it isn't a regular file or can't be read."""
    try:
        with open_file(path) as file:
            yield file
    except NotAFile as refused:
        raise SessionError(f"{path} is {refused}: not a hotloop session log") from None
    except OSError as error:
        raise SessionError(f"cannot read {path}: {error.strerror}") from None


def _header_of(path: Path, first: bytes) -> tuple[SessionHeader, int]:
    if not first.strip():
        raise SessionError(f"{path} is empty: not a hotloop session log")
    try:
        # A byte that isn't UTF-8 (a hostile workspace path, say) costs a replacement character, not the session.
        header = decoded(_header.decode, first if first.isascii() else first.decode("utf-8", errors="replace").encode())
    except msgspec.DecodeError:
        version = _format_of(first)
        if version is not None and version > FORMAT_VERSION:
            raise _newer(path, version) from None
        raise SessionError(f"{path} is not a hotloop session log (its first line is not a session header)") from None
    if header.format > FORMAT_VERSION:
        raise _newer(path, header.format)
    if not _ID.fullmatch(header.id):
        raise SessionError(f"{path} is not a hotloop session log (its header's id is not a session id)")
    return header, len(first)


def _format_of(line: bytes) -> int | None:
    try:
        value = decoded(msgspec.json.decode, line)
    except (msgspec.DecodeError, UnicodeDecodeError):
        return None
    version = value.get("format") if isinstance(value, dict) else None
    return version if isinstance(version, int) else None


def _newer(path: Path, version: int) -> SessionError:
    return SessionError(
        f"{path} was written by a newer hotloop (log format {version};"
        f" this one reads format {FORMAT_VERSION}): upgrade to open it"
    )


@dataclass(frozen=True)
class LoggedSession:
    header: SessionHeader
    header_size: int
    events: list[AgentEvent]
    warnings: list[str]  # lines skipped, each named by file and line number


def read_session(path: Path) -> LoggedSession:
    """Every readable event of a session, or a SessionError if the file isn't a readable session."""
    with _log_file(path) as file:
        header, header_size = _header_of(path, file.readline(MAX_HEADER))
        data = file.read()
    try:
        return _believed(path, LoggedSession(header, header_size, _events.decode_lines(data), []))
    except (msgspec.DecodeError, UnicodeDecodeError, RecursionError):
        pass  # a bad line somewhere (or one nested past the stack): line by line, each refused if too deep
    events, skipped, mangled, deep = [], [], [], []
    for number, line in enumerate(data.split(b"\n"), start=2):
        if not line.strip():
            continue
        try:
            events.append(decode(line))
        except TooDeep:
            deep.append(number)
        except UnicodeDecodeError:
            try:
                events.append(decode(line.decode("utf-8", errors="replace").encode()))
                mangled.append(number)
            except msgspec.DecodeError:
                skipped.append(number)
        except msgspec.DecodeError:
            skipped.append(number)
    warnings = _lines_said(path, skipped, "not a complete event, skipped", "more unreadable lines skipped")
    warnings += _lines_said(path, mangled, "bytes that are not UTF-8, shown as �", "more lines with bytes not UTF-8")
    warnings += _lines_said(path, deep, f"nested deeper than {LIMIT} levels, skipped", "more lines nested too deep")
    return _believed(path, LoggedSession(header, header_size, events, warnings))


def _believed(path: Path, session: LoggedSession) -> LoggedSession:
    """`session` with every usage no request has marked unknown, and one warning that says so; its header's
    `side_of` as a watch corrected it later (`SideOf`)."""
    claims: list[str] = []
    events = session.events
    side_of = session.header.side_of
    for n, event in enumerate(events):
        if isinstance(event, (StepFinished, ResponseFinished, Compacted, SideRequest)):
            claim = implausible(event.usage)
            if claim is not None:
                events[n] = believable(event)
                claims.append(claim)
        elif isinstance(event, SideOf):
            side_of = event.parent
    if claims:
        session.warnings.append(f"{path.name}: usage no request has ({claims[0]}), read as unknown")
    if side_of != session.header.side_of:
        return replace(session, header=msgspec.structs.replace(session.header, side_of=side_of))
    return session


def _lines_said(path: Path, numbers: list[int], problem: str, more: str) -> list[str]:
    warnings = [f"{path.name} line {n}: {problem}" for n in numbers[:MAX_WARNINGS]]
    if len(numbers) > MAX_WARNINGS:
        warnings.append(f"{path.name}: {len(numbers) - MAX_WARNINGS} {more}")
    return warnings


def find_session(folder: Path, reference: str | None = None) -> Path:
    """The session whose id starts with `reference`, or the one written to last when it is None."""
    if reference is None:
        return last_written(folder).path
    paths = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    if not paths:
        raise SessionError(f"no sessions yet in {folder}")
    matches = [path for path in paths if session_id_of(path).startswith(reference.lower())]
    if not matches:
        raise SessionError(f"no session id starts with {reference!r} (hotloop sessions list shows them)")
    if len(matches) > 1:
        ids = ", ".join(session_id_of(path) for path in matches[:5])
        raise SessionError(f"{reference!r} matches {counted(len(matches), 'session')} ({ids}); give more of the id")
    return matches[0]


@dataclass(frozen=True)
class Latest:
    path: Path
    workspace: str  # where the session ran, from its header
    here: bool  # False: no session ran in the workspace asked for, and this is the latest anywhere


def last_written(folder: Path, workspace: Path | None = None) -> Latest:
    """The readable session written to last: in `workspace` if one ran there, else anywhere.

    Headers are read newest first and only until one matches, so a workspace used lately costs
    a few reads; one never used costs a header read per session.
    """
    fallback: Latest | None = None
    paths = _by_last_write(folder)
    for path in paths:
        try:
            header = read_header(path)[0]
        except SessionError:
            continue
        if workspace is None or header.workspace == str(workspace):
            return Latest(path, header.workspace, here=True)
        fallback = fallback or Latest(path, header.workspace, here=False)
    if fallback is None:
        raise SessionError(f"no readable session in {folder}" if paths else f"no sessions yet in {folder}")
    return fallback


def _by_last_write(folder: Path) -> list[Path]:
    """The logs in `folder`, the one written to last first; equal times go to the one started later."""
    stamped = []
    for path in folder.glob("*.jsonl") if folder.is_dir() else []:
        try:
            stamped.append((path.stat().st_mtime_ns, path.name, path))
        except OSError:
            continue  # deleted while we looked
    return [path for _, _, path in sorted(stamped, reverse=True)]


def check_not_in_use(path: Path) -> None:
    """A SessionError if another process is writing the session."""
    if is_in_use(path):
        raise SessionError(f"session {session_id_of(path)} is open in another hotloop process; close it first")


def delete_session(path: Path) -> None:
    """Remove a session's log and summary; a session another process is writing is left alone."""
    check_not_in_use(path)
    try:
        path.unlink()
        summary_path(path).unlink(missing_ok=True)
    except OSError as error:
        raise SessionError(f"cannot delete {path}: {error.strerror}") from None
