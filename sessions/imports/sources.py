"""Where other agents keep their sessions, which reader a file needs, and importing a batch of files.

A file's agent is told by its name (Codex's `rollout-*.jsonl`, opencode's `opencode*.db`) or else by its first
bytes (a Codex `session_meta`, an SQLite header: opencode's store); anything else is read as a Claude Code
transcript, whose reader names what it can't use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hotloop.sessions.files import NotAFile, check_file, open_file
from hotloop.sessions.imports.claude_code import read_transcript
from hotloop.sessions.imports.codex import read_rollout
from hotloop.sessions.imports.model import Imported, vetted
from hotloop.sessions.imports.opencode import read_store
from hotloop.sessions.imports.writer import Written, stable_id, write_session

AGENTS = ("claude-code", "codex", "opencode")
READERS = {"claude-code": read_transcript, "codex": read_rollout, "opencode": read_store}
_SQLITE = b"SQLite format 3\0"


@dataclass
class Report:
    written: list[tuple[Imported, Written]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def default_files(agent: str, home: Path) -> list[Path]:
    """The agent's sessions where it keeps them: Claude Code's transcripts (and sub-agents'), Codex's rollouts,
    opencode's database (`opencode.db`, or a release channel's `opencode-<channel>.db`)."""
    if agent == "opencode":
        data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
        return sorted((data / "opencode").glob("opencode*.db"))
    if agent == "claude-code":
        projects = home / ".claude" / "projects"
        return sorted([*projects.glob("*/*.jsonl"), *projects.glob("*/*/subagents/*.jsonl")])
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    return sorted((codex_home / "sessions").glob("*/*/*/rollout-*.jsonl"))


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files as given, and the `.jsonl` files and opencode databases under folders."""
    found: list[Path] = []
    for path in paths:
        found.extend(sorted([*path.rglob("*.jsonl"), *path.rglob("opencode*.db")]) if path.is_dir() else [path])
    return found


def agent_of(path: Path) -> str:
    if path.name.startswith("rollout-"):
        return "codex"
    if path.suffix == ".db":
        return "opencode"
    with open_file(path) as file:
        first = file.read(4096)
    if first.startswith(_SQLITE):
        return "opencode"
    return "codex" if b'"session_meta"' in first else "claude-code"


def import_files(files: Iterable[Path], folder: Path, agent: str | None = None, secrets: Iterable[str] = ()) -> Report:
    """Each file read by its agent's reader and written as sessions into `folder`; what failed, a line each."""
    report, secrets = Report(), list(secrets)
    for path in files:
        try:
            check_file(path)  # here, as SQLite opens opencode's database itself
            kind = agent or agent_of(path)
            conversations = READERS.get(kind, read_transcript)(path, report.problems)
        except NotAFile as refused:
            report.problems.append(f"{path}: {refused}; not imported")
            continue
        except OSError as error:
            report.problems.append(f"cannot read {path}: {error.strerror}")
            continue
        if not conversations:
            report.problems.append(f"{path.name}: no {kind} request with a response in it, nothing imported")
        for imported in conversations:
            vetted(imported, path.name, report.problems)
        for imported in sorted(conversations, key=lambda c: c.side_key):  # the main conversation first
            side_of = stable_id(imported.agent, imported.source_id) if imported.side_key else ""
            try:
                written = write_session(imported, folder, side_of=side_of, secrets_to_mask=secrets)
            except (OSError, ValueError) as error:
                report.problems.append(f"{path.name}: {error}")
                continue
            report.written.append((imported, written))
    return report
