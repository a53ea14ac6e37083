"""Totals that survive a cancel, and a status bar that leaves out only what doesn't fit (issue 35, items 4 and 5).

One step cancelled before the server counted it took the session's totals off the status bar for good (`cache hit
96% · 1 step unknown`), and `sessions list` summed the rest with no mark. The totals stay, marked `≥`, the same
in `sessions list` and `sessions show`, and the cancelled step's strip estimates what it streamed. The real app on
the embedded simulator; every wait is bounded.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
from test_snapshots import SnapCompare, T, settle, two_step_turn
from textual.pilot import Pilot

from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, TurnFinished, TurnStarted
from hotloop.cli import main
from hotloop.config import load_config
from hotloop.providers.events import TextDelta
from hotloop.tui.app import HotloopApp
from hotloop.tui.items import UsageItem
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.status_bar import StatusBar

from support import present
from tui_support import idle, press, running_app, send, wait_until, write_config

NO_PREWARM = '[cache]\nprewarm = "off"\n'  # its 1-second timer would race the figures asserted here


def quiet_config(home: Path, steps: list[object] | None = None, decode_ms: float = 0) -> None:
    write_config(home, steps, decode_ms)
    with (home / "config.toml").open("a") as config:
        config.write(NO_PREWARM)


def bar_is(status: StatusBar, width: int) -> bool:
    return status.content_size.width == width


def strips(app: HotloopApp) -> list[UsageItem]:
    return [item for item in app.main.transcript.history.items if isinstance(item, UsageItem)]


async def test_a_cancelled_step_keeps_the_totals_marked_at_least_on_every_screen(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A turn, then one cancelled mid-stream before its usage came: the status bar still says the first turn's
    prompt and output, each `≥`; the cancelled step's strip estimates its streamed output (`out ≈…`); the tooltip
    says why; `sessions list` and `sessions show` mark the session's tokens `≥` too."""
    quiet_config(isolated_home, [{"text": "a short first answer"}, {"text": "word " * 400}], decode_ms=10)
    async with running_app() as (app, pilot):
        await send(app, pilot, "first")
        await idle(app, pilot)
        (first,) = strips(app)
        usage = present(first.step.usage)
        prompt, output = present(usage.prompt_total), present(usage.output)
        await send(app, pilot, "talk at length")
        await wait_until(lambda: app.main.transcript.answer.shown_to > 30, what="the answer to stream")
        press(app, "escape")
        await idle(app, pilot)

        status = app.main.status
        await wait_until(lambda: status.totals.unreported == 1, what="the cancelled step in the totals")
        line = status.render().plain
        assert f"prompt ≥{prompt:,} · out ≥{output:,}" in line, line
        assert "1 step without usage (cancelled before the server counted it" in str(status.tooltip)
        cancelled = strips(app)[-1]
        assert cancelled.step.cut == "cancelled" and cancelled.step.usage is None
        assert present(cancelled.streamed) > 0
        said = "".join(strip.text for strip in cancelled.render(app.main.transcript.context(200)).lines)
        assert f"out ≈{cancelled.streamed:,} streamed (an estimate: cancelled before the server counted it)" in said

    capsys.readouterr()
    assert main(["sessions", "list"]) == 0
    (row,) = capsys.readouterr().out.splitlines()[1:]
    assert f" ≥{prompt + output:,} " in row, row
    assert main(["sessions", "show"]) == 0
    header = capsys.readouterr().out.splitlines()[2]
    assert f" · 2 turns · ≥{prompt + output:,} tokens · " in header, header


async def test_at_160_columns_the_server_panel_leaves_the_tier_on_the_status_bar(isolated_home: Path) -> None:
    """Issue 35: at 160 columns the bar dropped `· balanced` as F2 opened the server panel, with ~35 columns free.
    Two turns' totals, the cost and the cache figure fit beside the tier in the 126 columns the panel leaves, so
    it stays, with the panel shown, hidden (F2) and shown again (F2)."""
    quiet_config(isolated_home)
    async with running_app(size=(160, 45)) as (app, pilot):
        await send(app, pilot, "first")
        await idle(app, pilot)
        await send(app, pilot, "second")
        await idle(app, pilot)
        status = app.main.status
        await wait_until(lambda: bool(app.main.query(ServerPanel)), what="the server panel")
        panel = app.main.query_one(ServerPanel)
        for shown, width in ((True, 126), (False, 158), (True, 126)):
            if panel.display != shown:
                press(app, "f2")
            await wait_until(partial(bar_is, status, width), what=f"the bar at {width} columns")
            await pilot.pause()
            line = status.render().plain
            assert line.startswith("● ready  │  sim · sim-balanced · balanced  │  prompt ") and "price unknown" in line
            assert len(line) <= width, (width, line)


def cancelled_turn() -> list[AgentEvent]:
    """A second turn whose only step was cancelled 1.2 s in, 14 deltas streamed, before the server counted it."""
    return [
        TurnStarted(turn=2, prompt="Explain the cache at length", ts=T + 10),
        StepStarted(turn=2, step=1, provider="sim", model="sim-balanced", ts=T + 10),
        *[TextDelta(word, ts=T + 10.1) for word in ("The prefix cache keeps every block of a request it has " * 2)],
        StepFinished(
            turn=2,
            step=1,
            usage=None,
            ttft=0.12,
            decode_tps=None,
            model_time=1.2,
            wall=1.2,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="",
            cut="cancelled",
            ts=T + 11.2,
        ),
        TurnFinished(turn=2, reason="cancelled", steps=1, wall=1.2, ts=T + 11.2),
    ]


def test_the_totals_after_a_cancelled_step(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A finished two-step turn, then a turn cancelled mid-stream before its usage came. Its answer is marked
    interrupted and its strip ends `cancelled · out ≈28 streamed (an estimate: cancelled before the server counted
    it)`, then `⚠ turn cancelled`. The status bar keeps the session's totals, marked: `prompt ≥1,916 · out ≥244 ·
    price unknown · cache hit 68% · 1 step unknown` (at 119 columns the tier doesn't fit beside them)."""
    quiet_config(isolated_home)
    app = HotloopApp(load_config(), clock=lambda: T + 12)

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        for event in [*two_step_turn(), *cancelled_turn()]:
            app.session.emit(event)
        await pilot.pause()

    assert snap_compare(app, terminal_size=(119, 30), run_before=run_before)
