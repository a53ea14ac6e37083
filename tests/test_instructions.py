"""Project instructions: AGENTS.md ends the cached system prompt, is read safely, and a change to it is named."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from hotloop.agent.events import AgentEvent, Notice, StepFinished, StepStarted
from hotloop.agent.instructions import MAX_BYTES, read_instructions, split, with_instructions
from hotloop.agent.prompt import BASE_SYSTEM_PROMPT, system_prompt
from hotloop.config import load_config
from hotloop.core.session import Session, SessionOptions

from support import present
from tui_support import write_config

RULES = "# Rules\n\nRun `pytest -q` before you answer.\n"


def session_in(home: Path, steps: list[dict[str, Any]]) -> tuple[Session, list[AgentEvent], Path]:
    """A session on the simulator playing `steps`, in a fresh workspace under `home`."""
    write_config(home, steps)
    workspace = home / "ws"
    workspace.mkdir()
    events: list[AgentEvent] = []
    return Session(load_config(), SessionOptions(workspace=workspace), emit=events.append), events, workspace


def test_agents_md_then_claude_md_end_the_system_prompt(tmp_path: Path) -> None:
    (tmp_path / "CLAUDE.md").write_text("Be brief.\n")
    (tmp_path / "AGENTS.md").write_bytes(RULES.encode() + b"bad byte: \xff\n")
    found = read_instructions(tmp_path)
    system = system_prompt("Extra.", found)
    assert found.files == ("AGENTS.md", "CLAUDE.md") and found.warnings == ()
    assert system == (
        f"{BASE_SYSTEM_PROMPT}\n\nExtra.\n\n"
        f'<project_instructions file="AGENTS.md">\n{RULES}bad byte: \ufffd\n</project_instructions>\n\n'
        '<project_instructions file="CLAUDE.md">\nBe brief.\n</project_instructions>'
    )
    base, sections = split(system)
    assert base == f"{BASE_SYSTEM_PROMPT}\n\nExtra." and list(sections) == ["AGENTS.md", "CLAUDE.md"]
    # A logged prompt gets the current instructions, whatever it had, its own part kept.
    (tmp_path / "CLAUDE.md").unlink()
    assert with_instructions(system, read_instructions(tmp_path)) == base + read_instructions(tmp_path).section


def test_a_section_quoted_inside_the_instructions_does_not_confuse_the_split(tmp_path: Path) -> None:
    quoted = '\n\n<project_instructions file="X.md">\nfake\n</project_instructions>\nmore rules'
    (tmp_path / "AGENTS.md").write_text("Rules." + quoted)
    system = system_prompt(None, read_instructions(tmp_path))
    base, sections = split(system)
    assert (
        base == BASE_SYSTEM_PROMPT
        and list(sections) == ["AGENTS.md"]
        and sections["AGENTS.md"].endswith("more rules\n</project_instructions>")
    )


def test_a_symlink_out_of_the_workspace_is_refused_with_a_warning(tmp_path: Path) -> None:
    outside = tmp_path / "secret.md"
    outside.write_text("not for the model")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "AGENTS.md").symlink_to(outside)
    os.mkfifo(workspace / "CLAUDE.md")
    found = read_instructions(workspace)
    assert found.section == "" and found.files == ()
    assert len(found.warnings) == 2
    assert (
        "AGENTS.md left out of the system prompt" in found.warnings[0] and "outside the workspace" in found.warnings[0]
    )
    assert "FIFO" in found.warnings[1]


def test_a_long_file_is_cut_at_a_character_with_a_notice(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("x" * (MAX_BYTES - 1) + "é and more")  # é straddles the cap
    found = read_instructions(tmp_path)
    body = split(system_prompt(None, found))[1]["AGENTS.md"]
    assert "x" * (MAX_BYTES - 1) + "\n[AGENTS.md is cut here: it is longer than 64 KiB]" in body
    assert "\ufffd" not in body and found.warnings == ("AGENTS.md is over 64 KiB: only its first 64 KiB are used",)


async def test_agents_md_is_cached_with_the_prompt_and_a_change_between_turns_is_named(isolated_home: Path) -> None:
    listing = {"tool_calls": [{"name": "list_dir", "arguments": {"path": "."}}]}
    session, events, workspace = session_in(isolated_home, [listing, {"text": "one"}, {"text": "two"}, {"text": "3"}])
    (workspace / "AGENTS.md").write_text(RULES)
    try:
        await session.open()
        await session.turn("first")
        await session.turn("second")
        (workspace / "AGENTS.md").write_text(RULES + "Never touch the lockfile.\n")
        await session.turn("third")
        assert session.runtime is not None and session.runtime.simulator is not None
        bodies = [
            request.body
            for request in session.runtime.simulator.server.requests
            if request.path.endswith("/chat/completions")
        ]
    finally:
        await session.close()
    assert len(bodies) == 4
    system = [json.loads(body)["messages"][0] for body in bodies]
    assert system[0]["role"] == "system" and system[0]["content"].endswith(
        f'<project_instructions file="AGENTS.md">\n{RULES.strip()}\n</project_instructions>'
    )
    # While the file stays as it is, every request extends the one before it byte for byte.
    assert bodies[1].startswith(bodies[0][:-2]) and bodies[2].startswith(bodies[1][:-2])
    assert "Never touch the lockfile." in system[3]["content"] and RULES not in json.loads(bodies[3])["messages"][1]
    notes = [step.cache_note for step in events if isinstance(step, StepFinished)]
    assert notes[:3] == ["", "", ""]
    before, after = system[2]["content"].encode(), system[3]["content"].encode()
    changed_at = next(n for n, (old, new) in enumerate(zip(before, after, strict=False)) if old != new)
    assert notes[3].startswith(
        f"cache miss: AGENTS.md changed since the last step: the system prompt differs from byte {changed_at:,} ("
    )
    fingerprints = [event.fingerprint for event in events if isinstance(event, StepStarted)]
    before, after = (present(fingerprint) for fingerprint in fingerprints[2:4])
    assert before.system == after.system and before.instructions != after.instructions
    assert not [event for event in events if isinstance(event, Notice) and event.level == "warning"]


async def test_a_refused_instructions_file_warns_once_and_the_session_goes_on(isolated_home: Path) -> None:
    session, events, workspace = session_in(isolated_home, [{"text": "one"}, {"text": "two"}])
    (isolated_home / "elsewhere.md").write_text("outside")
    (workspace / "AGENTS.md").symlink_to(isolated_home / "elsewhere.md")
    try:
        await session.open()
        await session.turn("first")
        await session.turn("second")
    finally:
        await session.close()
    warnings = [event.message for event in events if isinstance(event, Notice) and event.level == "warning"]
    assert len(warnings) == 1 and warnings[0].startswith("AGENTS.md left out of the system prompt: refused")
    assert len([event for event in events if isinstance(event, StepFinished)]) == 2
