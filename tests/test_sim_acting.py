"""The simulator demonstrates the acting tools (issue 25, item 10).

It called them only when a prompt named the tool and quoted its argument; `edit_file` got the same text as old and new
(refused), and a `;` inside a quoted command split it in two. Now "fix the greeting in src/app.py and run the tests"
reads the file, edits a line of it, then runs the tests, on all three protocols: the real agent loop, the real SDK
clients, loopback HTTP, and the file and the shell really changed.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.agent.approvals import Approvals
from hotloop.agent.events import ToolFinished, ToolStarted, TurnFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.edit import edit_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.agent.tools.shell import ShellSettings, shell_tool
from hotloop.providers.events import TextDelta
from hotloop.sim.embedded import EmbeddedSimulator

from support import Recorder, provider_on

PROTOCOLS = ["openai", "openai-responses", "anthropic"]
APP = 'def greeting(name):\n    """Say hello."""\n    return f"Helo, {name}!"\n\n\nprint(greeting("world"))\n'


@pytest.fixture
def project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    (root / "src").mkdir(parents=True)
    (root / "src" / "app.py").write_text(APP)
    return root


async def turn(sim: EmbeddedSimulator, protocol: str, workspace: Path, prompt: str) -> Recorder:
    """One turn of an agent with every built-in tool, acting ones included, each call allowed."""
    recorder = Recorder()
    tools = ToolRegistry(builtin_tools() + edit_tools() + [shell_tool(ShellSettings(timeout=30), set())])
    provider = provider_on(sim, protocol)
    agent = Agent(provider, tools, emit=recorder, workspace=workspace, approvals=Approvals(allow_all=True))
    try:
        finished = await agent.run_turn(prompt)
    finally:
        await provider.aclose()
    assert finished.reason == "answer", [e for e in recorder.events if not isinstance(e, TextDelta)]
    return recorder


def calls(recorder: Recorder) -> list[tuple[str, dict[str, object]]]:
    return [(event.name, json.loads(event.arguments)) for event in recorder.of(ToolStarted)]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_fix_the_greeting_reads_edits_and_runs_the_tests(
    sim: EmbeddedSimulator, project: Path, protocol: str
) -> None:
    recorder = await turn(sim, protocol, project, "fix the greeting in src/app.py and run the tests")
    made = calls(recorder)
    assert [name for name, _ in made] == ["read_file", "edit_file", "run_shell"]  # one step each, in that order
    _, edit = made[1]
    old, new = str(edit["old_string"]), str(edit["new_string"])
    assert edit["path"] == "src/app.py" and old != new
    assert old in APP  # taken from the file as read
    assert all(event.status == "ok" for event in recorder.of(ToolFinished)), recorder.of(ToolFinished)
    changed = (project / "src" / "app.py").read_text()
    assert changed != APP and "# hotloop sim: fix the greeting" in changed
    assert "def greeting(name):  # hotloop sim: fix the greeting\n" in changed  # the line naming the greeting
    assert made[2] == ("run_shell", {"command": "python3 -m pytest -q"})
    assert recorder.of(ToolFinished)[2].result.startswith("exit ")  # the shell ran it
    assert [e.steps for e in recorder.of(TurnFinished)] == [4]  # read, edit, run, then the answer


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_quoted_text_is_changed_exactly_and_a_quoted_command_runs_whole(
    sim: EmbeddedSimulator, project: Path, protocol: str
) -> None:
    prompt = 'change "Helo" to "Hello" in src/app.py, then run "echo one > one.txt; echo two > two.txt"'
    recorder = await turn(sim, protocol, project, prompt)
    assert [name for name, _ in calls(recorder)] == ["read_file", "edit_file", "run_shell"]
    assert (project / "src" / "app.py").read_text() == APP.replace("Helo", "Hello")
    # A `;` inside quotes split the command, and the clause, in two.
    assert (project / "one.txt").read_text() == "one\n" and (project / "two.txt").read_text() == "two\n"


async def test_a_quoted_text_is_written_to_a_file(sim: EmbeddedSimulator, project: Path) -> None:
    recorder = await turn(sim, "openai", project, 'write "remember the milk" to notes.txt')
    assert calls(recorder) == [("write_file", {"path": "notes.txt", "content": "remember the milk\n"})]
    assert (project / "notes.txt").read_text() == "remember the milk\n"


async def test_an_edit_of_a_file_that_isnt_there_ends_in_an_answer(sim: EmbeddedSimulator, project: Path) -> None:
    recorder = await turn(sim, "openai", project, "fix the greeting in src/missing.py and run the tests")
    assert [name for name, _ in calls(recorder)] == ["read_file"]  # nothing to edit, and so no tests to run
    assert recorder.of(ToolFinished)[0].status == "error"


@pytest.mark.parametrize("question", ["help", "what can you do?"])
async def test_the_help_answer_says_how_to_make_it_act(sim: EmbeddedSimulator, project: Path, question: str) -> None:
    recorder = await turn(sim, "openai", project, question)
    said = "".join(delta.text for delta in recorder.of(TextDelta))
    assert not recorder.of(ToolStarted)
    for words in ("fix the greeting in src/app.py", 'change "Helo" to "Hello" in src/app.py', "*Run* a quoted command"):
        assert words in said
