"""The real app, driven with Pilot, against the embedded simulator over loopback HTTP."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any, TypeVar

import pytest
from rich.style import Style
from textual.widgets import Input, OptionList

from hotloop.agent.events import AgentEvent, decode
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.providers.conversation import AssistantMessage, UserMessage
from hotloop.providers.events import TextDelta
from hotloop.providers.server_metrics import ServerStats
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.app import HotloopApp
from hotloop.tui.items import AnswerItem, NoticeItem, ToolCallsItem, UsageItem
from hotloop.tui.widgets.history_view import HistoryView
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.transcript import Transcript

from support import present
from tui_support import (
    drawn,
    idle,
    live_panes,
    notified,
    press,
    running_app,
    search_palette,
    send,
    submit,
    wait_until,
    write_config,
)

T = TypeVar("T")


def on_screen(history: HistoryView, line: int) -> int:
    """The row of the view that shows transcript line `line` (a short transcript sits at the bottom)."""
    return line - history.scroll_offset.y + history._pad


def items_of(app: HotloopApp, kind: type[T]) -> list[T]:
    return [item for item in app.main.transcript.history.items if isinstance(item, kind)]


def simulator(app: HotloopApp) -> EmbeddedSimulator:
    return present(present(app.session.runtime).simulator)


def logged_events(home: Path) -> list[AgentEvent]:
    (log,) = (home / "data" / "sessions").glob("*.jsonl")
    return [decode(line) for line in log.read_bytes().splitlines()[1:]]


async def test_a_prompt_streams_its_answer_token_by_token(isolated_home: Path) -> None:
    # 2 ms a token, and 2 s of silence after 30: time to be seen half-written on a busy machine.
    streaming = {"text": "## Streaming\n\n" + "word " * 150, "stall": {"after_chunks": 30, "seconds": 2}}
    write_config(isolated_home, [streaming], decode_ms=2)
    async with running_app() as (app, pilot):
        await send(app, pilot, "hello")
        answer = app.main.transcript.answer
        # Part of the answer is on screen before the model has finished.
        await wait_until(lambda: answer.shown_to > 40 and app.main.turn_running)
        partial = answer.shown_to
        await idle(app, pilot)

        (item,) = items_of(app, AnswerItem)
        assert item.text == "## Streaming\n\n" + "word " * 150 and partial < len(item.text)
        deltas = [e.text for e in logged_events(isolated_home) if isinstance(e, TextDelta)]
        assert len(deltas) > 100 and "".join(deltas) == item.text
        lines = [strip.text for strip in present(app.main.transcript.history._layout.slots[1].rendered).lines]
        assert lines[0].strip() == "Streaming" and "word word" in lines[2]


@pytest.mark.wall_clock
async def test_three_tool_calls_run_in_three_live_panes_at_once(isolated_home: Path) -> None:
    calls = [{"name": "pause", "arguments": {"seconds": s}} for s in (0.03, 0.02, 0.04)]
    write_config(isolated_home, [{"text": "three at once", "tool_calls": calls}, {"text": "done"}])
    gate = asyncio.Event()

    async def pause(args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.emit_output(f"pausing {args['seconds']} s")
        await gate.wait()  # held open until the test has looked at the live panes, however slow the machine
        await asyncio.sleep(args["seconds"])
        return "paused"

    schema = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.add(Tool("pause", "Pause.", schema, pause))
        await send(app, pilot, "go")
        await wait_until(lambda: len(live_panes(app.main.transcript, "running")) == 3)
        panes = live_panes(app.main.transcript)
        assert [pane.call.arguments for pane in panes] == [
            '{"seconds": 0.03}',
            '{"seconds": 0.02}',
            '{"seconds": 0.04}',
        ]
        await wait_until(lambda: any(line.count("╭─ pause ") == 3 for line in drawn(app).splitlines()))  # side by side
        await wait_until(lambda: "pausing 0.03 s" in panes[0].output)
        gate.set()
        await idle(app, pilot)

        (tools,) = items_of(app, ToolCallsItem)
        assert [call.status for call in tools.calls] == ["ok", "ok", "ok"]
        # All three waited at the gate together: the wall is the longest, not the sum (at most 0.04 / 0.09 of it).
        assert tools.wall < 0.6 * sum(present(call.duration) for call in tools.calls)
        rendered = [strip.text for strip in tools.render(app.main.transcript.context(96)).lines]
        assert rendered[-1].startswith("3 tools ran for ") and "from parallelism" in rendered[-1]
        assert not live_panes(app.main.transcript)  # finished panes collapse into one line each
        assert "╭─ pause " not in drawn(app)


async def test_the_usage_strip_shows_the_simulators_own_numbers(isolated_home: Path) -> None:
    (isolated_home / "ws").mkdir()
    write_config(isolated_home, [{"tool_calls": [{"name": "list_dir", "arguments": {}}]}, {"text": "listed"}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "list")
        await idle(app, pilot)
        requests = list(simulator(app).server.requests)

        usage = [present(item.step.usage) for item in items_of(app, UsageItem)]
        assert [u.prompt_total for u in usage] == [r.prompt_tokens for r in requests]
        assert usage[0].cache_read is None  # a miss: vLLM reports no details, shown as such
        assert usage[1].cache_read == requests[1].cached_tokens > 0
        first, second = (
            strip.text
            for item in items_of(app, UsageItem)
            for strip in item.render(app.main.transcript.context(120)).lines
        )
        assert f"prompt {requests[0].prompt_tokens:,} · cache not reported" in first
        assert f"read {requests[1].cached_tokens:,}" in second
        assert app.main.status.totals.prompt == sum(r.prompt_tokens for r in requests)


async def test_switching_in_the_palette_changes_the_next_requests_model(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "first")
        await idle(app, pilot)
        await search_palette(app, "tier: fast", "tier: fast\nsim · sim-fast")
        press(app, "enter")
        await wait_until(lambda: app.main.status.model == "sim-fast")
        await send(app, pilot, "second")
        await idle(app, pilot)

        models = [request.model for request in simulator(app).server.requests]
        assert models == ["sim-balanced", "sim-fast"]
        assert app.main.status.tier == "fast" and len(present(app.agent).messages) == 4  # the conversation was kept


async def test_slash_commands_switch_and_unknown_ones_explain(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "/model sim-strong")
        await wait_until(lambda: app.main.status.model == "sim-strong")
        await send(app, pilot, "hi")
        await idle(app, pilot)
        assert simulator(app).server.requests[-1].model == "sim-strong"
        await send(app, pilot, "/nonsense")
        await wait_until(lambda: notified(app, "unknown command /nonsense"))
        assert any("unknown command /nonsense" in str(n.message) for n in app._notifications)


async def test_escape_mid_stream_leaves_a_valid_conversation(isolated_home: Path) -> None:
    # Silent after 40 tokens, for longer than any test runs: Esc comes mid-answer however busy the machine.
    cut = {"text": "word " * 400, "stall": {"after_chunks": 40, "seconds": 30}}
    write_config(isolated_home, [cut, {"text": "second answer"}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "talk")
        await wait_until(lambda: app.main.transcript.answer.shown_to > 30)
        await pilot.press("escape")
        await idle(app, pilot)
        partial = present(app.agent).messages[-1]
        assert isinstance(partial, AssistantMessage) and partial.interrupted
        answers = items_of(app, AnswerItem)
        assert answers[-1].interrupted and 0 < len(answers[-1].text) < 2000
        assert "turn cancelled" in items_of(app, NoticeItem)[-1].message

        await send(app, pilot, "go on")
        await idle(app, pilot)
        assert items_of(app, AnswerItem)[-1].text == "second answer"


async def test_copy_keys_expand_entries_and_walk_history(isolated_home: Path) -> None:
    (isolated_home / "notes.md").write_text("note")
    write_config(
        isolated_home,
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "x.md"}}]},
            {"text": "Here:\n\n```python\nprint('hi')\n```\n"},
        ],
    )
    async with running_app() as (app, pilot):
        await send(app, pilot, "show me")
        await idle(app, pilot)
        await pilot.press("ctrl+o")
        assert app.clipboard.startswith("Here:")

        history = app.main.transcript.history
        history.focus()
        await pilot.pause()
        tools = items_of(app, ToolCallsItem)[0]
        for _ in history._layout.places():  # up to the tool call's entry, which is above the cursor
            if history._layout.places()[history.cursor].key == tools.calls[0].call_id:
                break
            await pilot.press("up")
        assert history._layout.places()[history.cursor].key == tools.calls[0].call_id
        await pilot.press("enter")
        assert tools.calls[0].call_id in tools.expanded
        lines = [s.text for s in tools.render(app.main.transcript.context(96)).lines]
        assert any("no such file: x.md" in line for line in lines)
        await pilot.press("down", "down", "ctrl+y")
        assert app.clipboard == "print('hi')\n"

        prompt = app.query_one(PromptInput)
        prompt.focus()
        await pilot.press("up")
        assert prompt.text == "show me"


async def test_sessions_open_read_only_and_help_opens(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "remember this")
        await idle(app, pilot)
        press(app, "ctrl+b")
        # The sidebar lists the sessions from a thread, its search box focused; Enter there goes to the list,
        # and Enter on the list opens the session highlighted.
        await wait_until(lambda: bool(app.query("SessionsSidebar OptionList")))
        listed = app.query_one("SessionsSidebar OptionList", OptionList)
        await wait_until(
            lambda: (
                isinstance(app.focused, Input)
                and listed.option_count == 1
                and listed.get_option_at_index(0).id is not None
            )
        )
        press(app, "enter")
        await wait_until(lambda: app.focused is listed and listed.highlighted == 0)
        press(app, "enter")
        await wait_until(lambda: app.screen.__class__.__name__ == "SessionView")

        def viewed() -> list[AnswerItem]:
            shown = app.screen.query("Transcript")  # none until the screen has composed
            return [i for i in shown.first(Transcript).history.items if isinstance(i, AnswerItem)] if shown else []

        await wait_until(lambda: viewed())
        assert viewed() and viewed()[0].text == items_of(app, AnswerItem)[0].text
        press(app, "escape", "f1")
        await wait_until(lambda: app.screen.__class__.__name__ == "HelpScreen")
        assert app.screen.__class__.__name__ == "HelpScreen"


async def test_more_than_three_panes_wrap_to_a_grid(isolated_home: Path) -> None:
    calls = [{"name": "pause", "arguments": {"n": n}} for n in range(5)]
    write_config(isolated_home, [{"tool_calls": calls}, {"text": "done"}])
    gate = asyncio.Event()

    async def pause(args: dict[str, Any], ctx: ToolContext) -> str:
        await gate.wait()  # running until the test has looked at the grid
        return "paused"

    async with running_app(size=(120, 40)) as (app, pilot):
        present(app.session.runtime).tools.add(Tool("pause", "Pause.", {"type": "object"}, pause))
        await send(app, pilot, "go")
        await wait_until(lambda: len(live_panes(app.main.transcript, "running")) == 5)

        def tops() -> list[int]:  # the panes' top borders, counted per line of the screen
            return [line.count("╭─ pause ") for line in drawn(app).splitlines() if "╭─ pause " in line]

        await wait_until(lambda: tops() == [3, 2])  # two rows: three columns, then two
        gate.set()
        await idle(app, pilot)


async def test_links_open_on_click_and_the_theme_redraws_the_transcript(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_config(
        isolated_home, [{"text": "See [the docs](https://example.com/docs) for more.\n\n```python\nx = 1\n```"}]
    )
    opened: list[str] = []
    async with running_app() as (app, pilot):
        monkeypatch.setattr(app, "open_url", lambda url, new_tab=True: opened.append(url))
        await send(app, pilot, "docs?")
        await idle(app, pilot)
        history = app.main.transcript.history
        slot = next(s for s in history._layout.slots if isinstance(s.item, AnswerItem))
        row = on_screen(history, history._layout.starts[history._layout.slots.index(slot)])
        column = present(slot.rendered).lines[0].text.index("the docs")
        await pilot.click(history, offset=(1 + column + 2, row))  # past the view's padding
        assert opened == ["https://example.com/docs"]

        dark = [seg.style for seg in present(slot.rendered).lines[2]]
        app.theme = "textual-light"

        def code_line() -> list[Style | None]:
            slots = history._layout.slots
            return [seg.style for seg in present(slots[slots.index(slot)].rendered).lines[2]]

        await wait_until(lambda: code_line() != dark, what="the code block to be drawn again")
        light = code_line()
        assert light != dark  # the code block was drawn again in the light theme's colours


async def test_an_unreachable_provider_is_listed_with_its_reason_and_cannot_be_picked(isolated_home: Path) -> None:
    (isolated_home / "config.toml").write_text(
        "[sim]\nttft_ms = 0\ndecode_ms_per_token = 0\n\n"
        '[providers.lab]\nkind = "openai"\nbase_url = "http://127.0.0.1:9/v1"\nmodels = ["big"]\nmax_retries = 0\n'
    )
    async with running_app() as (app, _):
        options = {option.title: option for option in await app.switch_options()}
        assert present(options["provider: lab"].unavailable).startswith("cannot reach lab (http://127.0.0.1:9/v1)")
        assert options["provider: openai"].unavailable == "missing API key: set OPENAI_API_KEY"
        assert options["model: sim · sim-fast"].unavailable is None
        await search_palette(app, "lab", "provider: lab")
        press(app, "enter")
        await wait_until(lambda: notified(app, "provider: lab: cannot reach"))
        assert app.main.status.provider == "sim"
        assert any("provider: lab: cannot reach" in str(n.message) for n in app._notifications)


async def test_ctrl_j_adds_a_line_and_enter_sends_both(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        prompt = app.query_one(PromptInput)
        prompt.focus()
        await wait_until(lambda: app.focused is prompt)
        press(app, "f", "i", "r", "s", "t", "ctrl+j", "t", "w", "o")
        await wait_until(lambda: prompt.text.endswith("o"))
        assert prompt.text == "first\ntwo"
        await submit(app)  # Enter
        await idle(app, pilot)
        asked = present(app.agent).messages[0]
        assert isinstance(asked, UserMessage) and asked.content.startswith("first\ntwo")


async def test_mouse_selection_copies_the_selected_text(isolated_home: Path) -> None:
    write_config(isolated_home, [{"text": "alpha beta gamma delta\n\nsecond paragraph here"}])
    async with running_app() as (app, pilot):
        await send(app, pilot, "x")
        await idle(app, pilot)
        history = app.main.transcript.history
        row = on_screen(history, history._layout.starts[1])  # the answer's first line
        await pilot.mouse_down(history, offset=(1, row))  # past the view's padding
        await pilot.hover(history, offset=(16, row + 2))  # the end cell is part of the selection
        await pilot.mouse_up(history, offset=(16, row + 2))
        await pilot.press("ctrl+c")
        assert app.clipboard == "alpha beta gamma delta\n\nsecond paragraph"


async def test_one_conversation_goes_openai_anthropic_openai_with_tools_each_turn(
    isolated_home: Path, tmp_path: Path
) -> None:
    """Three turns with tool calls on sim (OpenAI API), sim-anthropic, then sim again: every request is accepted."""
    workspace = tmp_path / "project"
    workspace.mkdir()
    (workspace / "README.md").write_text("# Project\n\nTODO: docs\n")
    (workspace / "pyproject.toml").write_text('[project]\nname = "project"\n')
    write_config(isolated_home, sim="cache_min_tokens = 512\n")
    async with running_app(workspace=workspace) as (app, pilot):
        for prompt, provider in (
            ("read README.md then grep for TODO", "sim-anthropic"),
            ("read pyproject.toml", "sim"),
            ("list the files in .", None),
        ):
            await send(app, pilot, prompt)
            await idle(app, pilot)
            if provider:
                await send(app, pilot, f"/provider {provider}")

                def on_provider(provider: str = provider) -> bool:
                    return app.main.status.provider == provider

                await wait_until(on_provider)
        requests = list(simulator(app).server.requests)
        usage = [present(item.step.usage) for item in items_of(app, UsageItem)]
        notices = items_of(app, NoticeItem)
        strips = [
            " ".join(strip.text.strip() for strip in item.render(app.main.transcript.context(150)).lines)
            for item in items_of(app, UsageItem)
        ]
        tools = items_of(app, ToolCallsItem)

    assert [r.path.rsplit("/", 1)[-1] for r in requests] == ["completions"] * 3 + ["messages"] * 2 + ["completions"] * 2
    assert len(usage) == len(requests) and {n.level for n in notices} == {"info"}  # no request failed
    assert [u.prompt_total for u in usage] == [r.prompt_tokens for r in requests]
    anthropic = usage[3:5]
    assert [(u.cache_read, u.cache_write) for u in anthropic] == [
        (r.cached_tokens, r.cache_write_tokens) for r in requests[3:5]
    ]
    assert anthropic[0].cache_read == 0 and anthropic[0].cache_write == present(anthropic[0].prompt_total) - 4
    # The second step reads all the first one wrote: the previous step's whole prefix.
    assert anthropic[1].cache_read == anthropic[0].cache_write
    assert f"read {anthropic[1].cache_read:,} · write {anthropic[1].cache_write:,}" in strips[4]
    # The switch to the Anthropic API starts cold, and the strip says why.
    assert "cache miss: switched from sim · sim-balanced, whose cache this was (" in strips[3]
    # Back on sim, the vLLM-style cache still holds turn 1: the first request of turn 3 reads it.
    assert present(usage[5].cache_read) >= present(usage[2].prompt_total) - 16
    switched = [n.message for n in notices if n.message.startswith("switched ")]
    turn_one_size = present(usage[2].prompt_total) + present(usage[2].output)
    assert switched[0] == (
        f"switched sim · sim-balanced → sim-anthropic · sim-balanced: ~{turn_one_size:,} prompt tokens "
        "to prefill uncached (its cache is cold for this conversation)"
    )
    assert switched[1].startswith("switched sim-anthropic · sim-balanced → sim · sim-balanced: ~")
    assert len(tools) == 4 and all(call.status == "ok" for item in tools for call in item.calls)
    assert sum(type(e).__name__ == "ProviderSwitched" for e in logged_events(isolated_home)) == 2


def stats_of(panel: ServerPanel) -> ServerStats | None:
    return panel.report.stats if panel.report is not None else None


async def test_the_server_panel_shows_the_simulators_own_hit_rate(isolated_home: Path) -> None:
    """On a wide terminal the panel is there from the start; its hit rate is hits ÷ queries from /metrics."""
    import urllib.request

    (isolated_home / "ws").mkdir()
    write_config(isolated_home)
    async with running_app(size=(130, 36)) as (app, pilot):
        await wait_until(lambda: bool(app.query(ServerPanel)) and stats_of(app.query_one(ServerPanel)) is not None)
        panel = app.query_one(ServerPanel)
        assert panel.display and "no requests yet" in str(panel.render())  # scraped before the first request
        await send(app, pilot, "list the files, then say what you found")
        await idle(app, pilot)
        url = simulator(app).url + "/metrics"
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(url).read().decode())
        totals = {
            name: sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))
            for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
        }
        expected = totals["vllm:prefix_cache_hits_total"] / totals["vllm:prefix_cache_queries_total"]
        assert expected > 0
        # The session scrapes again as the turn ends; the panel draws what that scrape said.
        await wait_until(lambda: present(stats_of(panel)).hit_rate_since_start == expected)
        assert f"{expected:.0%}" in str(panel.render())
        await pilot.press("f2")
        assert not panel.display
