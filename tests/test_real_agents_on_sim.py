"""Real agent CLIs, Claude Code, Codex and opencode, do a task on the simulator: its answers pass their parsers, the
tools it calls run, and the results come back before it answers.

They run where the CLIs are installed (tests/agents_cli.py: HOTLOOP_AGENTS_DIR, by default
/work/agents/node_modules/.bin, then PATH), each with a HOME of its own, so nothing of the user's is read or written;
elsewhere they skip, saying what to install. The simulator's replies to opencode's recorded requests
(tests/fixtures/agents/) are checked everywhere.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.sim.agents import strip_context
from hotloop.sim.anthropic_api import parse_messages
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig
from hotloop.sim.model import reply
from hotloop.sim.planner import plan, resolved
from hotloop.sim.template import Call, Turn
from hotloop.sim.toolbox import Toolbox

from agents_cli import claude_env, cli, codex_env, opencode_env

TASK = "read README.md and list the files here"
README = "# Demo\n\nA small project.\n"
RECORDED = Path(__file__).parent / "fixtures" / "agents" / "opencode_1.18.33_requests.jsonl"
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


def opencode_command(sim: EmbeddedSimulator, home: Path, task: str) -> tuple[list[str], dict[str, str]]:
    """`opencode run` on the simulator through its Anthropic provider, with a HOME (and XDG folders) of its own."""
    return [cli("opencode"), "run", task], opencode_env(home, sim.base_url)


def tool_uses(requests: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The calls the last request brings back, in order: (tool, input)."""
    return [
        (block["name"], block["input"])
        for message in requests[-1]["messages"]
        if message["role"] == "assistant" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    ]


def tool_results(request: dict[str, Any]) -> str:
    return " ".join(
        json.dumps(block["content"])
        for message in request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result"
    )


def test_opencode_titles_reads_and_lists_then_answers(sim: EmbeddedSimulator, workdir: Path, tmp_path: Path) -> None:
    """opencode's title request gets a title, not the simulator's help; its task (sent as a JSON string) gets its
    own `read` for the file and for the folder, with absolute paths, and then the answer."""
    command, env = opencode_command(sim, tmp_path / "home", TASK)
    done = run(command, workdir, env)
    assert done.returncode == 0, done.stderr
    assert f"## Results for: {TASK}" in done.stdout
    requests = bodies(sim, "/v1/messages")
    titled = [body for body in requests if "tools" not in body]
    assert len(titled) == 1 and titled[0]["system"][0]["text"].startswith("You are a title generator.")
    assert tool_uses(requests) == [
        ("read", {"filePath": str(workdir / "README.md")}),
        ("read", {"filePath": str(workdir)}),
    ]
    results = tool_results(requests[-1])
    assert "A small project." in results  # the file was read
    assert "app.py" in results  # and the folder listed


def test_opencode_edits_what_it_read_then_runs_a_command(sim: EmbeddedSimulator, workdir: Path, tmp_path: Path) -> None:
    """An edit made from opencode's numbered `read` result names a line of the file as it is, so opencode's `edit`
    applies it; then its `bash` runs the command the task quotes, on the edited file."""
    task = 'fix the greeting in app.py then run "cat app.py"'
    command, env = opencode_command(sim, tmp_path / "home", task)
    done = run(command, workdir, env)
    assert done.returncode == 0, done.stderr
    edited = 'print("hi")  # hotloop sim: fix the greeting\n'
    assert (workdir / "app.py").read_text() == edited
    requests = bodies(sim, "/v1/messages")
    assert [name for name, _ in tool_uses(requests)] == ["read", "edit", "bash"]
    results = tool_results(requests[-1])
    assert "Edit applied successfully." in results
    assert json.dumps(edited.rstrip())[1:-1] in results  # cat ran after the edit


# The simulator's replies to opencode's recorded requests, checked where no CLI is needed.


def recorded_run(name: str) -> list[dict[str, Any]]:
    return [body for line in RECORDED.read_text().splitlines() if (body := json.loads(line))["run"] == name]


def replies_to(run: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """The simulator's reply to each request of a recorded run: its text's first line, and its calls."""
    replies = []
    for recorded in recorded_run(run):
        request = parse_messages(recorded["body"]).request
        planned = reply(request.turns, request.tools)
        calls = [(call.name, call.arguments) for call in planned.calls]
        replies.append((planned.text.splitlines()[0], calls))
    return replies


def test_opencodes_recorded_title_task_and_results_get_a_title_the_calls_then_the_answer() -> None:
    """The title request (its instruction in the system prompt, the task after a line of its own) gets a title from
    the task's words; the task gets a `read` of the file and of the folder at the working directory its `<env>`
    names; the results get the answer, which ends the turn."""
    [first] = [r for r in recorded_run("opencode-1-read-list") if r["index"] == 1]
    cwd = next(
        line.split(": ", 1)[1]
        for line in first["body"]["system"][0]["text"].splitlines()
        if line.strip().startswith("Working directory:")
    )
    assert replies_to("opencode-1-read-list") == [
        ("Read README.md and list the files", []),
        (
            "Running 2 tool calls (read).",
            [("read", json.dumps({"filePath": f"{cwd}/README.md"})), ("read", json.dumps({"filePath": cwd}))],
        ),
        (f"## Results for: {TASK}", []),
    ]


def test_opencodes_task_is_read_from_its_json_string() -> None:
    """opencode sends `read README.md then run "ls -la"` as a JSON string, its inner quotes escaped: the command
    run is `ls -la`, not `ls -la\\`. Quoted words that are no JSON string are the user's, and stay."""
    [_, _, ran, answered] = replies_to("opencode-2-read-then-run")
    assert ran[1] == [("bash", json.dumps({"command": "ls -la"}))]
    assert answered[0] == '## Results for: read README.md then run "ls -la"'
    assert strip_context('"README.md" and "app.py"') == '"README.md" and "app.py"'


def test_opencodes_recorded_edit_is_made_from_the_file_not_its_numbered_read() -> None:
    """opencode returns a read as `<content>` lines numbered `1: …`: the edit's `oldString` is the file's line."""
    [_, _, edited, _] = replies_to("opencode-3-fix-from-read")
    [(name, arguments)] = edited[1]
    assert name == "edit"
    assert json.loads(arguments)["oldString"] == 'print("hi")'
    assert json.loads(arguments)["newString"] == 'print("hi")  # hotloop sim: fix the greeting'


def test_claude_codes_numbered_read_gives_the_edit_the_files_line() -> None:
    """Claude Code returns a read as `1\t# Demo` (its recorded result): an edit made from it names `# Demo`."""
    claude = [json.loads(line) for line in (RECORDED.parent / "claude_code_2.1.332_requests.jsonl").open()]
    tools = Toolbox(claude[0]["body"]["tools"], "/home/me/project")
    [numbered] = {
        block["content"]
        for recorded in claude
        for message in recorded["body"]["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_result" and "# Demo" in str(block["content"])
    }
    [looked, edits] = plan("fix the heading in README.md", tools)
    [read] = [Call("toolu_1", call.name, call.arguments) for call in looked if isinstance(call, Call)]
    [edit] = resolved(edits, [Turn("assistant", calls=(read,)), Turn("tool", numbered, call_id="toolu_1")], tools)
    assert json.loads(edit.arguments)["old_string"] == "# Demo"


def test_the_readmes_opencode_recipe_is_the_one_run_here(tmp_path: Path) -> None:
    """The README's opencode config is the one `opencode_env` writes for these runs (but for the address and the
    dummy key), and its commands run the task these tests give, directly and through the watch."""
    readme = (Path(__file__).parent.parent / "README.md").read_text()
    block = readme.split("# opencode (tested with 1.18.33)", 1)[1].split("```", 1)[0].splitlines()[1:]
    config = json.loads(" ".join(line.removeprefix("#") for line in block if line.startswith("#")))
    opencode_env(tmp_path, "http://127.0.0.1:8000/v1")
    written = json.loads((tmp_path / ".config" / "opencode" / "opencode.json").read_text())
    written["provider"]["anthropic"]["options"]["apiKey"] = "sim"
    assert config == written
    [command] = [line for line in block if not line.startswith("#")]
    assert shlex.split(command) == ["opencode", "run", TASK]
    watched = next(line for line in readme.splitlines() if line.startswith("hotloop watch --upstream sim --port 8765"))
    assert shlex.split(watched)[-3:] == ["opencode", "run", TASK] and "--run" in watched
