"""Where other agents keep their sessions, which reader a file needs, and importing a batch of files.

A file's agent is told by its name (Codex's `rollout-*.jsonl`) or else by its first line (a Codex
`session_meta`); anything else is read as a Claude Code transcript, whose reader names what it can't use.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from hotloop.sessions.imports.claude_code import read_transcript
from hotloop.sessions.imports.codex import read_rollout
from hotloop.sessions.imports.model import Imported
from hotloop.sessions.imports.writer import Written, stable_id, write_session

AGENTS = ("claude-code", "codex")


@dataclass
class Report:
    written: list[tuple[Imported, Written]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def default_files(agent: str, home: Path) -> list[Path]:
    """The agent's sessions where it keeps them: Claude Code's transcripts (and sub-agents'), Codex's rollouts."""
    if agent == "claude-code":
        projects = home / ".claude" / "projects"
        return sorted([*projects.glob("*/*.jsonl"), *projects.glob("*/*/subagents/*.jsonl")])
    codex_home = Path(os.environ.get("CODEX_HOME") or home / ".codex")
    return sorted((codex_home / "sessions").glob("*/*/*/rollout-*.jsonl"))


def expand(paths: Iterable[Path]) -> list[Path]:
    """Files as given, and the `.jsonl` files under folders."""
    found: list[Path] = []
    for path in paths:
        found.extend(sorted(path.rglob("*.jsonl")) if path.is_dir() else [path])
    return found


def agent_of(path: Path) -> str:
    if path.name.startswith("rollout-"):
        return "codex"
    try:
        with path.open("rb") as file:
            first = file.read(4096)
    except OSError:
        return "claude-code"
    return "codex" if b'"session_meta"' in first else "claude-code"


def import_files(files: Iterable[Path], folder: Path, agent: str | None = None, secrets: Iterable[str] = ()) -> Report:
    """Each file read by its agent's reader and written as sessions into `folder`; what failed, a line each."""
    report, secrets = Report(), list(secrets)
    for path in files:
        kind = agent or agent_of(path)
        try:
            read = read_rollout if kind == "codex" else read_transcript
            conversations = read(path, report.problems)
        except OSError as error:
            report.problems.append(f"cannot read {path}: {error.strerror}")
            continue
        if not conversations:
            report.problems.append(f"{path.name}: no {kind} request with a response in it, nothing imported")
        for imported in sorted(conversations, key=lambda c: c.side_key):  # the main conversation first
            side_of = stable_id(imported.agent, imported.source_id) if imported.side_key else ""
            try:
                written = write_session(imported, folder, side_of=side_of, secrets_to_mask=secrets)
            except (OSError, ValueError) as error:
                report.problems.append(f"{path.name}: {error}")
                continue
            report.written.append((imported, written))
    return report
