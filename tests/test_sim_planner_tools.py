"""The simulator's planner calls the tools a request offers by what they do: hotloop's by name, as always; Claude
Code's, Codex's and opencode's, as their CLIs offered them (tests/fixtures/agents/), by their names, descriptions
and schemas."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.edit import edit_tools
from hotloop.sim.anthropic_api import parse_messages
from hotloop.sim.model import reply
from hotloop.sim.planner import Planned, plan, resolved
from hotloop.sim.responses_api import ResponseStore, parse_responses
from hotloop.sim.template import Call, Turn
from hotloop.sim.toolbox import Toolbox

AGENTS = Path(__file__).parent / "fixtures" / "agents"
TASK = "read README.md and list the files here"
CWD = "/home/me/project"


def recorded(name: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (AGENTS / name).read_text().splitlines()]


CLAUDE = recorded("claude_code_2.1.332_requests.jsonl")
CODEX = recorded("codex_0.171.0_requests.jsonl")
OPENCODE = recorded("opencode_1.18.33_requests.jsonl")


def first_body(requests: list[dict[str, Any]], run: str, index: int = 0) -> dict[str, Any]:
    body: dict[str, Any] = next(r["body"] for r in requests if r["run"] == run and r["index"] == index)
    return body


def hotloop_tools() -> list[dict[str, Any]]:
    """hotloop's tools as its Chat provider sends them; run_shell's schema as the shell tool has it."""
    specs = [tool.spec() for tool in [*builtin_tools(), *edit_tools({})]]
    shell = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}
    functions = [{"name": s.name, "description": s.description, "parameters": s.parameters} for s in specs]
    functions.append({"name": "run_shell", "description": "Run a shell command.", "parameters": shell})
    return [{"type": "function", "function": function} for function in functions]


CLAUDE_TOOLS: list[dict[str, Any]] = first_body(CLAUDE, "claude-1-read-bash")["tools"]
CLAUDE_GLOB_TOOLS: list[dict[str, Any]] = first_body(CLAUDE, "claude-2-tools-read-bash-glob-grep")["tools"]
CODEX_TOOLS: list[dict[str, Any]] = first_body(CODEX, "codex-1-default-tools")["tools"]
OPENCODE_TOOLS: list[dict[str, Any]] = first_body(OPENCODE, "opencode-1-read-list", 1)["tools"]


def calls(batches: list[list[Planned]]) -> list[list[tuple[str, dict[str, Any]]]]:
    return [[(item.name, json.loads(item.arguments)) for item in batch if isinstance(item, Call)] for batch in batches]


@pytest.mark.parametrize(
    ("tools", "cwd", "expected"),
    [
        (hotloop_tools(), None, [("read_file", {"path": "README.md"}), ("list_dir", {"path": "."})]),
        (CLAUDE_TOOLS, CWD, [("Read", {"file_path": f"{CWD}/README.md"}), ("Bash", {"command": "ls -la"})]),
        (CLAUDE_GLOB_TOOLS, CWD, [("Read", {"file_path": f"{CWD}/README.md"}), ("Glob", {"pattern": "*"})]),
        (CODEX_TOOLS, CWD, [("exec_command", {"cmd": "cat -- README.md"}), ("exec_command", {"cmd": "ls -la"})]),
        # opencode's read takes a folder too; its glob needs ripgrep
        (OPENCODE_TOOLS, CWD, [("read", {"filePath": f"{CWD}/README.md"}), ("read", {"filePath": CWD})]),
    ],
    ids=["hotloop", "claude-code", "claude-code-with-glob", "codex", "opencode"],
)
def test_reading_and_listing_take_each_agents_tools(
    tools: list[dict[str, Any]], cwd: str | None, expected: list[tuple[str, dict[str, Any]]]
) -> None:
    assert calls(plan(TASK, Toolbox(tools, cwd))) == [expected]


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (hotloop_tools(), ("grep", {"pattern": "TODO"})),
        (CLAUDE_TOOLS, ("Bash", {"command": "grep -rn -- TODO ."})),  # no Grep offered: the shell searches
        (CLAUDE_GLOB_TOOLS, ("Grep", {"pattern": "TODO"})),
        (CODEX_TOOLS, ("exec_command", {"cmd": "grep -rn -- TODO ."})),
        (OPENCODE_TOOLS, ("grep", {"pattern": "TODO"})),
    ],
    ids=["hotloop", "claude-code", "claude-code-with-grep", "codex", "opencode"],
)
def test_searching_takes_a_search_tool_or_the_shell(
    tools: list[dict[str, Any]], expected: tuple[str, dict[str, Any]]
) -> None:
    assert calls(plan("grep for TODO", Toolbox(tools, CWD))) == [[expected]]


@pytest.mark.parametrize(
    ("tools", "expected"),
    [
        (hotloop_tools(), ("run_shell", {"command": "make test"})),
        (CLAUDE_TOOLS, ("Bash", {"command": "make test"})),
        (CODEX_TOOLS, ("exec_command", {"cmd": "make test"})),
        (OPENCODE_TOOLS, ("bash", {"command": "make test"})),
    ],
    ids=["hotloop", "claude-code", "codex", "opencode"],
)
def test_running_takes_the_shell_by_its_command_argument(
    tools: list[dict[str, Any]], expected: tuple[str, dict[str, Any]]
) -> None:
    assert calls(plan('run "make test"', Toolbox(tools, CWD))) == [[expected]]


def test_a_shell_that_takes_an_argv_gets_one() -> None:
    shell = {
        "type": "function",
        "name": "shell",
        "description": "Runs a shell command and returns its output.",
        "parameters": {
            "type": "object",
            "properties": {"command": {"type": "array", "items": {"type": "string"}}, "workdir": {"type": "string"}},
            "required": ["command"],
        },
    }
    assert calls(plan("list the files here", Toolbox([shell]))) == [[("shell", {"command": ["bash", "-lc", "ls -la"]})]]


@pytest.mark.parametrize(
    ("task", "path"),
    [
        ("list the files in this folder", "."),
        ("list the files in the current directory", "."),
        ("list the files here", "."),
        ("what is in this project? list it", "."),
        ("list the files in the src folder", "src"),
        ("list the files under docs/", "docs/"),
    ],
)
def test_a_listing_names_the_folder_the_user_meant(task: str, path: str) -> None:
    """A newcomer's first prompt: "this folder" is the working one, not a folder named "this"."""
    assert calls(plan(task, Toolbox(hotloop_tools()))) == [[("list_dir", {"path": path})]]


def test_hotloops_shell_does_not_stand_in_for_its_own_tools() -> None:
    """Offered alone, hotloop's run_shell is for commands: a look would ask for an approval no look needs."""
    only_shell = [tool for tool in hotloop_tools() if tool["function"]["name"] == "run_shell"]
    assert plan(TASK, Toolbox(only_shell)) == []


def test_an_image_viewer_is_no_file_reader() -> None:
    toolbox = Toolbox(CODEX_TOOLS, CWD)
    assert toolbox.roles["run_shell"].name == "exec_command"
    assert "read_file" not in toolbox.roles  # view_image takes a path, but reads images
    assert toolbox.by_shell == {"read_file", "list_dir", "grep"}


def test_a_tool_that_requires_nothing_is_called_by_its_name_only() -> None:
    """hotloop bench's `search` tool: a schema that requires nothing says nothing of which argument is which."""
    search = {"type": "object", "properties": {"query": {"type": "string"}, "url": {"type": "string"}}}
    tools = [{"type": "function", "function": {"name": "search", "description": "Search.", "parameters": search}}]
    assert Toolbox(tools).roles == {}
    assert calls(plan('Use the search tool for "cache"', Toolbox(tools))) == [[("search", {"query": "cache"})]]


def test_claude_codes_edit_is_made_from_its_read() -> None:
    toolbox = Toolbox(CLAUDE_TOOLS, CWD)
    batches = plan('change "Demo" to "Example" in README.md', toolbox)
    assert calls(batches[:1]) == [[("Read", {"file_path": f"{CWD}/README.md"})]]
    read = Call("toolu_1", "Read", json.dumps({"file_path": f"{CWD}/README.md"}))
    since = [Turn("assistant", calls=(read,)), Turn("tool", "# Demo\n\nA small project.\n", call_id="toolu_1")]
    edit = resolved(batches[1], since, toolbox)
    expected = {"file_path": f"{CWD}/README.md", "old_string": "Demo", "new_string": "Example"}
    assert [(call.name, json.loads(call.arguments)) for call in edit] == [("Edit", expected)]


def test_claude_codes_recorded_requests_get_the_calls_then_the_answer() -> None:
    """Its first request (a mid-conversation system message holding its working directory) gets Read and Bash; the
    one that brings their results back gets an answer that ends the turn."""
    asked, answered = (first_body(CLAUDE, "claude-1-read-bash", n) for n in (0, 1))
    cwd = next(
        line.split(": ", 1)[1]
        for message in asked["messages"]
        if message["role"] == "system"
        for line in message["content"][0]["text"].splitlines()
        if "Primary working directory" in line
    )
    first = parse_messages(asked).request
    planned = reply(first.turns, first.tools)
    names = {(call.name, call.arguments) for call in planned.calls}
    assert names == {("Read", json.dumps({"file_path": f"{cwd}/README.md"})), ("Bash", '{"command": "ls -la"}')}
    second = parse_messages(answered).request
    final = reply(second.turns, second.tools)
    assert final.calls == ()
    assert final.text.startswith(f"## Results for: {TASK}")


def test_codexs_recorded_requests_get_the_calls_then_the_answer() -> None:
    asked, answered = (first_body(CODEX, "codex-2-no-multi-agent-no-goals", n) for n in (0, 1))
    first = parse_responses(asked, ResponseStore()).request
    planned = reply(first.turns, first.tools)
    assert [(call.name, call.arguments) for call in planned.calls] == [
        ("exec_command", '{"cmd": "cat -- README.md"}'),
        ("exec_command", '{"cmd": "ls -la"}'),
    ]
    second = parse_responses(answered, ResponseStore()).request
    final = reply(second.turns, second.tools)
    assert final.calls == ()
    assert final.text.startswith(f"## Results for: {TASK}")
