"""Finding saved sessions and summarizing them without loading every event."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import msgspec

from hotloop.agent.events import AgentEvent, StepFinished, TurnStarted, decode
from hotloop.sessions.log import SessionHeader

_header = msgspec.json.Decoder(SessionHeader)
_turn = msgspec.json.Decoder(TurnStarted)
_step = msgspec.json.Decoder(StepFinished)
# The encoder writes the tag first, so a line's kind can be told from its first bytes.
_TURN_PREFIX = b'{"type":"turn_started"'
_STEP_PREFIX = b'{"type":"step_finished"'


@dataclass(frozen=True)
class SessionSummary:
    id: str
    path: Path
    started: float
    provider: str
    model: str
    first_prompt: str
    turns: int
    tokens: int | None  # prompt + output over the steps that reported usage; None if none did


def list_sessions(folder: Path) -> list[SessionSummary]:
    """Every readable session in `folder`, newest first."""
    if not folder.is_dir():
        return []
    found = (summarize(path) for path in folder.glob("*.jsonl"))
    return sorted((s for s in found if s is not None), key=lambda s: s.started, reverse=True)


def summarize(path: Path) -> SessionSummary | None:
    try:
        lines = path.read_bytes().splitlines()
        header = _header.decode(lines[0])
    except (OSError, IndexError, msgspec.DecodeError):
        return None
    first_prompt, turns, tokens, reported = "", 0, 0, False
    for line in lines[1:]:
        try:
            if line.startswith(_TURN_PREFIX):
                turn = _turn.decode(line)
                turns += 1
                first_prompt = first_prompt or turn.prompt
            elif line.startswith(_STEP_PREFIX):
                usage = _step.decode(line).usage
                if usage is not None and usage.prompt_total is not None:
                    tokens += usage.prompt_total + (usage.output or 0)
                    reported = True
        except msgspec.DecodeError:
            continue  # a torn last line after a crash; the rest of the session still counts
    return SessionSummary(
        header.id, path, header.started, header.provider, header.model, first_prompt, turns, tokens if reported else None
    )


@dataclass(frozen=True)
class LoggedSession:
    header: SessionHeader
    events: list[AgentEvent]
    skipped: int  # lines that did not decode (a torn last line after a crash)


def read_session(path: Path) -> LoggedSession:
    """Every event of a session log. Raises OSError, or ValueError if the file has no valid header."""
    lines = path.read_bytes().splitlines()
    try:
        header = _header.decode(lines[0])
    except (IndexError, msgspec.DecodeError):
        raise ValueError(f"{path} is not a hotloop session log") from None
    events, skipped = [], 0
    for line in lines[1:]:
        try:
            events.append(decode(line))
        except msgspec.DecodeError:
            skipped += 1
    return LoggedSession(header, events, skipped)
