"""Text from outside is shown, never obeyed: no markup is parsed and no escape sequence reaches the terminal.

A model, a tool, a file name or a server can put Rich markup or terminal escape sequences in
what hotloop shows. The app and `hotloop run` draw such text as it reads (ESC as ␛, a C1
control as `<9b>`), and the session log keeps its exact bytes.
"""

from __future__ import annotations

import asyncio
import io
import json
import re
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from test_headless_terminal import run_on_a_terminal
from textual.command import CommandInput, CommandList
from textual.pilot import Pilot
from textual.widgets import OptionList

from hotloop.agent.events import Notice, SessionTitled, ToolStarted, TurnStarted
from hotloop.agent.text import inert
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.cli import main
from hotloop.config import Choice, load_config
from hotloop.core.switch_menu import SwitchOption
from hotloop.headless.printer import Printer
from hotloop.providers.events import ReasoningDelta, TextDelta
from hotloop.sessions.store import read_session
from hotloop.tui.app import HotloopApp
from hotloop.tui.items import AnswerItem, ToolCallsItem
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.server_panel import ServerPanel

from support import present
from tui_support import (
    connected,
    drawn,
    held_toasts,
    idle,
    live_panes,
    press,
    send,
    sessions_sidebar,
    wait_until,
    write_config,
)

MARKUP = "[/bold] then [red]x[/red] then [not a tag"
# Clear the screen, retitle the window, a hidden link (OSC 8), a clipboard write (OSC 52), a C1 CSI.
ESCAPES = (
    "\x1b[2J",
    "\x1b]0;pwned\x07",
    "\x1b]8;;http://evil\x1b\\link\x1b]8;;\x1b\\",
    "\x1b]52;c;aGk=\x07",
    "\x9b31m",
)
HOSTILE = "hostile " + " ".join(ESCAPES) + " end"
EVIL_TOOL = "evil\x1b[2J\x9b31m"
# Titles are the prompt's first clause, up to ";": these two escapes survive into it.
PROMPT = "Show \x1b[2J \x9b31m files; then stop"
# What a drawn hostile text must show instead.
SHOWN = ("␛[2J", "<9b>31m")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
# What rich itself writes to a terminal: colours, and a live region's cursor moves and erases.
RICH_OWN = re.compile(r"\x1b\[(?:[0-9;]*m|[0-9]*[AK]|\?25[lh])|\r")
# Titles on: the fast tier titles the session from its first prompt.
TITLED_SIM = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


@asynccontextmanager
async def running_app(size: tuple[int, int] = (100, 30)) -> AsyncIterator[tuple[HotloopApp, Pilot[None]]]:
    """The app, connected, with its notifications shown (a test app leaves them out)."""
    app = HotloopApp(load_config())
    async with app.run_test(size=size, notifications=True) as pilot:
        await connected(app)
        yield app, pilot


def assert_inert(text: str) -> None:
    assert not CONTROL.search(text), f"control characters reach the terminal: {CONTROL.findall(text)}"
    for shown in SHOWN:
        assert shown in text, f"{shown!r} is not shown"


async def screen_inert(app: Any) -> None:
    """Wait for the screen to show the stand-ins (each widget draws at its own pace), then check every line of it."""
    await wait_until(lambda: all(shown in drawn(app) for shown in SHOWN), what="the stand-ins on screen")
    assert_inert(drawn(app))


def toasts(app: Any) -> str:
    return "\n".join(str(toast.render()) for toast in app.screen.query("Toast"))


async def test_markup_in_notices_errors_and_titles_shows_literally(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        app.session.emit(Notice(level="warning", message=f"warning {MARKUP}"))
        app.session.emit(Notice(level="error", message=f"error {MARKUP}"))
        app.session.emit(SessionTitled(title=f"title {MARKUP}", model="[red]model"))
        # Read while the three toasts show: the title's goes after 4 s, which a busy machine may reach.
        await wait_until(
            lambda: (
                (toasts(app).count(MARKUP) == 3 and "[/bold] then [red]x[/red]" in drawn(app))
                or app._exception is not None
            )
        )
        assert app._exception is None
        assert "session titled “title [/bold]" in toasts(app) and "by [red]model" in toasts(app)
        await send(app, pilot, f"/provider {MARKUP.split()[0]}x")  # an error that quotes what was typed
        await wait_until(lambda: "unknown provider '[/bold]x'" in toasts(app) or app._exception is not None)
        await pilot.pause()
        assert app.is_running and app._exception is None


async def test_escapes_in_an_answer_tool_output_and_names_are_drawn_inert(isolated_home: Path) -> None:
    steps = [
        {
            "text": f"## Answer\n\n{HOSTILE}\n",
            "reasoning": HOSTILE,
            "tool_calls": [{"name": "leak", "arguments": {"note": HOSTILE}}, {"name": EVIL_TOOL, "arguments": {}}],
        },
        {"text": "done"},
    ]
    write_config(isolated_home, steps)
    gate = asyncio.Event()

    async def leak(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.emit_output("\n".join(ESCAPES))
        await gate.wait()  # the panes stay up until the test has looked at them
        return HOSTILE

    schema = {"type": "object", "properties": {"note": {"type": "string"}}}
    async with running_app(size=(120, 40)) as (app, pilot):
        present(app.session.runtime).tools.add(Tool("leak", "Leak.", schema, leak))
        await send(app, pilot, "go")
        await wait_until(
            lambda: any("pwned" in line for pane in live_panes(app.main.transcript) for line in pane.output)
        )
        await wait_until(lambda: live_panes(app.main.transcript)[-1].status == "error")
        # Panes and answer draw at their own pace: wait for the screen to show the escapes, then check every line.
        await wait_until(
            lambda: all(shown in drawn(app) for shown in (*SHOWN, "␛]52;c;aGk=␇")), what="the escapes on screen"
        )
        await screen_inert(app)
        gate.set()
        await idle(app, pilot)

        answer = next(item for item in app.main.transcript.history.items if isinstance(item, AnswerItem))
        (tools,) = [item for item in app.main.transcript.history.items if isinstance(item, ToolCallsItem)]
        answer.toggle("reasoning")
        for call in tools.calls:
            tools.toggle(call.call_id)
        context = app.main.transcript.context(110)
        assert_inert("\n".join(strip.text for item in (answer, tools) for strip in item.render(context).lines))
        await screen_inert(app)

        app.session.emit(SessionTitled(title=HOSTILE, model=EVIL_TOOL))
        app.session.emit(Notice(level="warning", message=HOSTILE))
        await held_toasts(app, 2)  # the title's would go after 4 s, before a busy machine has drawn the stand-ins
        await screen_inert(app)
        assert_inert(app.sub_title)

        press(app, "ctrl+b")
        listed = (await sessions_sidebar(app)).query_one(OptionList)
        await wait_until(lambda: listed.option_count == 1)
        await screen_inert(app)

        # Hostile text copied (an answer, with ctrl+o), then pasted into the prompt box.
        app.copy_to_clipboard(HOSTILE)
        box = app.query_one(PromptInput)
        box.focus()
        await wait_until(lambda: app.focused is box)
        press(app, "ctrl+v")
        await wait_until(lambda: "[2J" in box.text)
        await screen_inert(app)

        press(app, "f3")
        await wait_until(lambda: isinstance(app.screen, WaterfallScreen) and "evil␛[2J<9b>31m" in drawn(app))
        assert not CONTROL.search(drawn(app))


async def test_the_palette_server_panel_and_status_bar_show_what_servers_say_as_it_reads(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A server names its models, and an error quotes what a server said.
    option = SwitchOption(f"model: odd {MARKUP} {HOSTILE}", f"costs {MARKUP} {HOSTILE}", Choice(model="odd"), HOSTILE)
    write_config(isolated_home)
    # Tall enough that the palette's whole discovered list, alphabetical, is on screen.
    async with running_app(size=(160, 60)) as (app, _):

        async def switch_options() -> list[SwitchOption]:
            return [option]

        monkeypatch.setattr(app, "switch_options", switch_options)
        press(app, "ctrl+p")
        await wait_until(lambda: isinstance(app.focused, CommandInput))
        listed = app.screen.query_one(CommandList)

        def offered() -> str:
            return "\n".join(str(listed.get_option_at_index(i).prompt) for i in range(listed.option_count))

        await wait_until(lambda: "model: odd" in offered() or app._exception is not None)  # discovered
        await screen_inert(app)
        press(app, *"odd")
        await wait_until(lambda: listed.option_count == 1 and "model: odd" in offered())  # searched
        await screen_inert(app)
        assert f"model: odd {MARKUP}" in offered() and f"costs {MARKUP}" in offered()
        press(app, "enter")  # unavailable: it says why
        await wait_until(lambda: "<9b>31m end" in toasts(app))
        await screen_inert(app)

        await wait_until(lambda: bool(app.query(ServerPanel)))
        panel = app.query_one(ServerPanel)
        panel.report = replace(present(panel.report), model=HOSTILE)
        app.main.status.model = HOSTILE
        assert_inert(f"{panel.render()}\n{app.main.status.render()}")


def test_the_printer_shows_titles_and_notices_inert() -> None:
    out, err = io.StringIO(), io.StringIO()  # not terminals: the raw path
    printer = Printer(out, err)
    printer(TextDelta(text=HOSTILE))
    printer(Notice(level="error", message=HOSTILE))
    printer(SessionTitled(title=HOSTILE, model=EVIL_TOOL))
    printer.close()
    assert_inert(out.getvalue())
    assert_inert(err.getvalue())
    assert f"session titled: {inert(HOSTILE)}" in err.getvalue()


def hostile_session(workspace: Path, home: Path) -> list[str]:
    """A config whose model answers, reasons and calls tools with escapes; the `hotloop run` arguments for it."""
    (workspace / "notes.txt").write_text(HOSTILE + "\n")
    steps = [
        {
            "text": f"## Answer\n\n{HOSTILE}\n\n- `{ESCAPES[0]}` item\n",
            "reasoning": HOSTILE,
            "tool_calls": [
                {"name": "read_file", "arguments": {"path": "notes.txt"}},
                {"name": "read_file", "arguments": {"path": f"missing {ESCAPES[0]} {ESCAPES[4]}.txt"}},
                {"name": EVIL_TOOL, "arguments": json.dumps({"a": HOSTILE}, ensure_ascii=False)},
            ],
        },
        {"text": HOSTILE},
    ]
    scenario = home / "scenario.json"
    scenario.write_text(json.dumps(steps))
    (home / "config.toml").write_text(f'{TITLED_SIM}scenario = "{scenario}"\n')
    return ["run", PROMPT]


def test_hotloop_run_through_a_pipe_prints_escapes_inert_and_logs_them_exactly(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = hostile_session(workspace, isolated_home)
    ran = subprocess.run(
        [sys.executable, "-m", "hotloop", *args], cwd=workspace, capture_output=True, text=True, timeout=60
    )
    assert ran.returncode == 0, ran.stderr
    assert_inert(ran.stdout)
    assert_inert(ran.stderr)
    assert inert(HOSTILE) in ran.stdout and "session titled: Show ␛[2J <9b>31m files" in ran.stderr
    assert f"▸ {inert(EVIL_TOOL)}" in ran.stderr and "no such file: missing ␛[2J <9b>31m.txt" in ran.stderr

    # The log keeps the exact text.
    (log,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    events = read_session(log).events
    assert "".join(e.text for e in events if isinstance(e, TextDelta)).endswith(HOSTILE)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == HOSTILE
    assert [e.prompt for e in events if isinstance(e, TurnStarted)] == [PROMPT]
    assert EVIL_TOOL in [e.name for e in events if isinstance(e, ToolStarted)]
    assert [e.title for e in events if isinstance(e, SessionTitled)] == ["Show \x1b[2J \x9b31m files"]

    session = log.stem.rsplit("_", 1)[1]
    for command in (
        ["sessions", "list"],
        ["sessions", "show", session],
        ["sessions", "show", session, "--waterfall"],
        ["sessions", "export", session, "--format", "md"],
        ["replay", "--headless", "--speed", "0", session],
    ):
        assert main(command) == 0, command
        printed = capsys.readouterr()
        assert_inert(printed.out + printed.err)
    assert main(["sessions", "export", session, "--format", "html"]) == 0
    page = capsys.readouterr().out
    assert not CONTROL.search(page) and "␛[2J" in page and "&lt;9b&gt;31m" in page
    assert main(["sessions", "export", session, "--format", "json"]) == 0
    text = capsys.readouterr().out
    assert not CONTROL.search(text)  # escaped: the JSON holds the exact text
    exported = json.loads(text)
    assert exported["turns"][0]["prompt"] == PROMPT and exported["turns"][0]["steps"][1]["text"] == HOSTILE


def test_hotloop_run_on_a_terminal_draws_escapes_inert(workspace: Path, isolated_home: Path) -> None:
    args = hostile_session(workspace, isolated_home)
    shown, errors, code = run_on_a_terminal(args, workspace)
    assert code == 0, errors
    assert_inert(RICH_OWN.sub("", shown))
    assert_inert(errors)
    assert "##" not in shown and "•" in shown  # drawn as Markdown

    (log,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    session = log.stem.rsplit("_", 1)[1]
    for command in (["sessions", "list"], ["sessions", "show", session], ["sessions", "show", session, "--waterfall"]):
        shown, errors, code = run_on_a_terminal(command, workspace)
        assert code == 0, errors
        assert_inert(RICH_OWN.sub("", shown) + errors)
