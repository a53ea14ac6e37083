"""In the app, a call with side effects waits in its pane, showing what it would do, for an answer above the prompt."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

from textual.widgets import Input

from hotloop.agent.events import ApprovalDecided
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.providers.conversation import ToolResultMessage
from hotloop.sessions.store import read_session
from hotloop.tui.widgets.approval_bar import GRACE, AnswerList, ApprovalBar
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts

from support import present
from tui_support import answer, drawn, idle, live_panes, press, running_app, send, wait_until, write_config

SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


def acting(ran: list[str]) -> Tool:
    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(arguments["command"])
        return "exit 0"

    async def preview(arguments: dict[str, Any], ctx: ToolContext) -> str:
        command: str = arguments["command"]
        return command

    return Tool("run_shell", "Run a command.", SCHEMA, handler, side_effects=True, preview=preview)


def calls(*commands: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in commands]}


async def test_a_call_waits_in_its_pane_and_runs_when_allowed_once(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make test"), {"text": "done"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        await send(app, pilot, "test it")
        bar = app.query_one(ApprovalBar)
        await wait_until(
            lambda: bar.display and bar.requests and app.focused is not None and bar in app.focused.ancestors
        )
        (pane,) = live_panes(app.main.transcript)
        await wait_until(lambda: pane.status == "waiting" and "⏸ waiting for approval" in drawn(app))
        assert ran == []
        assert pane.preview is not None and pane.preview.code == "make test"  # a Syntax: highlighted as shell
        assert "make test" in drawn(app)
        await answer(app, "y")
        await idle(app, pilot)
        await wait_until(lambda: isinstance(app.focused, PromptInput), what="the focus back in the prompt")
        assert ran == ["make test"] and not bar.display
        present(app.session.log).flush()
        decided = [e for e in read_session(present(app.session.log).path).events if isinstance(e, ApprovalDecided)]
        assert [(d.allowed, d.by) for d in decided] == [(True, "you, once")]  # the log keeps the decision


async def test_several_waiting_calls_can_be_allowed_together_and_a_denial_says_why(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make a", "make b"), {"text": "ok"}, calls("rm -rf build"), {"text": "ok"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        await send(app, pilot, "build both")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: len(bar.requests) == 2)
        answers = bar.query_one(AnswerList)
        await wait_until(lambda: app.focused is answers)
        answers.highlighted = answers.get_option_index("every")
        await answer(app, "enter")
        await idle(app, pilot)
        assert sorted(ran) == ["make a", "make b"]

        await send(app, pilot, "clean")
        await wait_until(lambda: len(bar.requests) == 1 and app.focused is answers)
        await answer(app, "r")
        await wait_until(lambda: app.focused is bar.query_one(Input))
        press(app, *"keep it", "enter")
        await idle(app, pilot)
        assert "rm -rf build" not in ran
        result = [m for m in present(app.agent).messages if isinstance(m, ToolResultMessage) and m.call_id][-1]
        assert result.is_error and "the user denied this call: keep it" in result.content


async def test_always_for_this_session_stops_the_next_identical_ask(isolated_home: Path) -> None:
    write_config(isolated_home, [calls("make test"), {"text": "ok"}, calls("make test"), {"text": "ok again"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        await send(app, pilot, "test it")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: len(bar.requests) == 1)
        await answer(app, "a")
        await idle(app, pilot)
        await send(app, pilot, "test it again")
        await idle(app, pilot)
        assert ran == ["make test", "make test"] and not bar.requests
        present(app.session.log).flush()
        decided = [e.by for e in read_session(present(app.session.log).path).events if isinstance(e, ApprovalDecided)]
        assert decided == ["you, for this session", "rule run_shell:make test"]


async def test_a_read_only_call_of_the_step_runs_while_another_waits(isolated_home: Path, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("notes")
    step = {
        "tool_calls": [
            {"name": "run_shell", "arguments": {"command": "make"}},
            {"name": "read_file", "arguments": {"path": "notes.txt"}},
        ]
    }
    write_config(isolated_home, [step, {"text": "ok"}])
    ran: list[str] = []
    async with running_app(workspace=tmp_path) as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        await send(app, pilot, "go")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: bool(bar.requests))
        read = next(c for c in app.main.transcript.fold.calls if c.name == "read_file")
        await wait_until(lambda: read.status == "ok")  # done while run_shell still waits for its answer
        assert ran == []
        await answer(app, "y")
        await idle(app, pilot)
        assert ran == ["make"]


async def test_typing_a_whole_prompt_while_a_call_waits_never_answers_it(isolated_home: Path) -> None:
    """The `a` of "then analyze" allowed the command for the session, 5 of 5 (issue 23, item 1). Whatever is typed
    as the question appears, and any key that isn't an answer after it, goes to the prompt."""
    write_config(isolated_home, [calls("make deploy"), {"text": "ok"}])
    ran: list[str] = []
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        bar = app.query_one(ApprovalBar)
        box = app.query_one(PromptInput)
        now = [0.0]
        bar.clock = lambda: now[0]  # the grace ends when the test moves this on, however slow the machine
        await send(app, pilot, "deploy")
        await wait_until(lambda: bar.requests and bar.has_focus_within)  # the prompt was empty: it took the focus
        press(app, *"yes, and analyze it", "enter")  # typed as the question popped up: the answer keys are in it
        # The focus moves once the first key is handled; the keys already on their way follow it to the prompt.
        await wait_until(
            lambda: (
                app.query_one(QueuedPrompts).prompts == ("yes, and analyze it",)
                and isinstance(app.focused, PromptInput)
            )
        )
        assert ran == [] and bar.requests

        press(app, "ctrl+r")  # to the question, on purpose, after its grace
        now[0] += GRACE
        await wait_until(lambda: bar.has_focus_within and bar.armed)
        press(app, *"then any more?")  # a prompt again: `t` is no answer, so it and all after it are the prompt's
        await wait_until(lambda: box.text == "then any more?" and isinstance(app.focused, PromptInput))
        assert ran == [] and bar.requests

        press(app, "ctrl+r")
        now[0] += GRACE
        await answer(app, "n")
        await idle(app, pilot)
        assert ran == [] and box.text == "then any more?"


async def test_a_question_takes_no_focus_from_a_prompt_being_typed(isolated_home: Path) -> None:
    """With text in the prompt when the question appears, the keys stay there; the bar says how to reach it."""
    write_config(isolated_home, [calls("make"), {"text": "ok"}])
    ran: list[str] = []
    previewing = asyncio.Event()
    typed = asyncio.Event()
    tool = acting(ran)

    async def preview(arguments: dict[str, Any], ctx: ToolContext) -> str:
        previewing.set()
        await asyncio.wait_for(typed.wait(), 10)  # the question appears only once the user is typing
        command: str = arguments["command"]
        return command

    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(dataclasses.replace(tool, preview=preview))
        await send(app, pilot, "build")
        await wait_until(previewing.is_set)
        box = app.query_one(PromptInput)
        box.insert("and then")
        typed.set()
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: bar.requests and "ctrl+r answers" in drawn(app))
        press(app, *" say yes")
        await wait_until(lambda: box.text == "and then say yes")
        assert ran == [] and isinstance(app.focused, PromptInput)
        press(app, "ctrl+r")
        await answer(app, "y")
        await idle(app, pilot)
        assert ran == ["make"] and box.text == "and then say yes"


async def test_a_command_padded_to_hide_its_end_shows_it(isolated_home: Path) -> None:
    """Padded with spaces and newlines, a command showed as `echo checking build status` over blank lines, its keys
    off-screen; `y` ran a hidden `touch` (issue 23, item 4). Now the question names every program, counts the
    padding, shows the end, and keeps its keys on screen at 80×24."""
    hidden = "echo checking build status" + " " * 300 + "\n" * 60 + "touch \u202eHIDDEN\x1b[2J"
    write_config(isolated_home, [calls(hidden), {"text": "ok"}])
    ran: list[str] = []
    async with running_app(size=(80, 24)) as (app, pilot):
        present(app.session.runtime).tools.replace(acting(ran))
        await send(app, pilot, "check")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: "touch ⟨U+202E⟩HIDDEN␛[2J" in drawn(app), what="the hidden command on screen")
        screen = drawn(app)
        assert "wants to run 2 commands (61 lines): echo, touch" in screen
        assert "echo checking build status␠×300↵" in screen and "⋮ 59 empty lines" in screen
        assert all(key in screen for key in ("y  allow once", "n  deny", "r  deny, saying why"))
        await answer(app, "n")
        await idle(app, pilot)
        assert ran == [] and not bar.requests
