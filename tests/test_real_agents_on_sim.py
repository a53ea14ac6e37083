"""Real agent CLIs, Claude Code and Codex, do a task on the simulator: its answers pass their parsers, the tools it
calls run, and the results come back before it answers.

They run where the CLIs are installed (tests/agents_cli.py: HOTLOOP_AGENTS_DIR, by default
/work/agents/node_modules/.bin, then PATH), each with a HOME of its own, so nothing of the user's is read or written;
elsewhere they skip, saying what to install.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig

from agents_cli import claude_env, cli, codex_env

TASK = "read README.md and list the files here"
README = "# Demo\n\nA small project.\n"
# Each CLI starts in a second or two; the bound only keeps a stuck one from holding the run.
RUN_SECONDS = 150

pytestmark = pytest.mark.timeout(RUN_SECONDS + 30)


@pytest.fixture
def sim() -> Iterator[EmbeddedSimulator]:
    with EmbeddedSimulator(SimConfig().with_latency(0.0, 0.0, 0.0)) as started:
        yield started


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    folder = tmp_path / "project"
    folder.mkdir()
    (folder / "README.md").write_text(README)
    (folder / "app.py").write_text('print("hi")\n')
    return folder


def run(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The CLI run to its exit, killed if it outlasts RUN_SECONDS."""
    base = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "TERM": "dumb", "LANG": "C.UTF-8"}
    return subprocess.run(
        command,
        cwd=cwd,
        env=base | env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=RUN_SECONDS,
        check=False,
    )


def bodies(sim: EmbeddedSimulator, path: str) -> list[dict[str, Any]]:
    return [json.loads(request.body) for request in sim.server.requests if request.path == path]


def claude_command(sim: EmbeddedSimulator, home: Path, *flags: str) -> tuple[list[str], dict[str, str]]:
    """`claude -p` on the simulator, with the environment interop.md gives; Read and Bash allowed."""
    command = [cli("claude"), "-p", TASK, "--model", "sim-fast", "--output-format", "json", *flags]
    return command, claude_env(home) | {"ANTHROPIC_BASE_URL": sim.url}


def codex_command(sim: EmbeddedSimulator, home: Path, *flags: str) -> tuple[list[str], dict[str, str]]:
    """`codex exec` on the simulator through a model provider of its config, with a CODEX_HOME of its own."""
    env = codex_env(home, sim.base_url)
    # Its sandbox helper is missing under a fresh HOME (interop.md): the commands the sim asks for only look.
    command = [cli("codex"), "exec", "--skip-git-repo-check", "-s", "danger-full-access", *flags, TASK]
    return command, env


def test_claude_code_reads_and_lists_then_answers(sim: EmbeddedSimulator, workdir: Path, tmp_path: Path) -> None:
    command, env = claude_command(sim, tmp_path / "home", "--allowedTools", "Read,Bash")
    done = run(command, workdir, env)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["is_error"] is False
    assert result["result"].startswith(f"## Results for: {TASK}")
    requests = bodies(sim, "/v1/messages")
    # The first request of a session carries a mid-conversation system message, which the real API takes.
    assert any(message["role"] == "system" for message in requests[0]["messages"])
    calls = [
        block
        for body in requests
        for message in body["messages"]
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]
    assert {(call["name"], json.dumps(call["input"])) for call in calls} == {
        ("Read", json.dumps({"file_path": str(workdir / "README.md")})),
        ("Bash", json.dumps({"command": "ls -la"})),
    }
    results = " ".join(
        json.dumps(block["content"])
        for message in requests[-1]["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    )
    assert "A small project." in results  # Read ran
    assert "app.py" in results  # ls ran


def test_codex_reads_and_lists_with_its_shell_then_answers(
    sim: EmbeddedSimulator, workdir: Path, tmp_path: Path
) -> None:
    command, env = codex_command(sim, tmp_path / "home")
    done = run(command, workdir, env)
    assert done.returncode == 0, done.stderr
    assert f"## Results for: {TASK}" in done.stdout
    requests = bodies(sim, "/v1/responses")
    assert "client_metadata" in requests[0]
    items = requests[-1]["input"]
    calls = {(item["name"], item["arguments"]) for item in items if item.get("type") == "function_call"}
    assert calls == {
        ("exec_command", json.dumps({"cmd": "cat -- README.md"})),
        ("exec_command", json.dumps({"cmd": "ls -la"})),
    }
    outputs = " ".join(json.dumps(item["output"]) for item in items if item.get("type") == "function_call_output")
    assert "A small project." in outputs
    assert "app.py" in outputs
