"""A step cancelled midway was still billed: its tokens and dollars are counted on every screen (issue 25, item 2).

Esc (or Ctrl-C) while a step's tools run removed its usage strip, and the status bar, `sessions list`,
`sessions show` and headless replay left its usage out, although the log held the provider's figures.
"""

from __future__ import annotations

import io
from pathlib import Path

from hotloop.agent.events import StepFinished, TurnFinished
from hotloop.headless.printer import Printer
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import list_sessions, read_session
from hotloop.tui.items import UsageItem

from support import SLOW_TOOL, cancelled_in_its_tools, logged_agent, present, sim_with_scenario, wait_until
from tui_support import running_app, send, write_config

SLOW = {"tool_calls": [{"name": "slow", "arguments": {}}]}


async def test_a_step_cancelled_in_its_tools_is_finished_with_its_usage_and_counted(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [SLOW, {"text": "never"}])
    try:
        log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-fast", workspace=tmp_path)
        agent, recorder = logged_agent(sim, "openai", tmp_path, log)
        agent.tools.add(SLOW_TOOL)
        await cancelled_in_its_tools(agent, recorder, "wait for it")
        log.close()
        await agent.provider.aclose()
    finally:
        sim.stop()
    (step,) = recorder.of(StepFinished)
    assert step.cut == "cancelled" and step.usage is not None and step.usage.prompt_total
    assert [t.reason for t in recorder.of(TurnFinished)] == ["cancelled"]
    (listed,) = list_sessions(tmp_path / "sessions").sessions
    assert listed.tokens == step.usage.prompt_total + (step.usage.output or 0)  # was "–"

    out, err = io.StringIO(), io.StringIO()
    printer = Printer(out=out, err=err)
    for event in read_session(log.path).events:
        printer(event)
    lines = err.getvalue().splitlines()
    assert any(line.startswith("turn 1 · step 1 · ") and " · cancelled" in line for line in lines), lines
    assert lines[-1] == "turn 1 cancelled"  # headless replay marks the turn (issue 25, item 11)


async def test_esc_in_a_steps_tools_keeps_its_strip_marked_and_in_the_totals(isolated_home: Path) -> None:
    write_config(isolated_home, [SLOW, {"text": "never"}])
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.add(SLOW_TOOL)
        await send(app, pilot, "wait for it")
        await wait_until(lambda: any(call.status == "running" for call in app.main.transcript.fold.calls))
        app.main.action_cancel_turn()

        def strips() -> list[UsageItem]:
            return [item for item in app.main.transcript.history.items if isinstance(item, UsageItem)]

        await wait_until(lambda: bool(strips()), what="the cancelled step's usage strip")
        (strip,) = strips()
        assert strip.step.cut == "cancelled" and strip.step.usage is not None
        assert app.main.totals.prompt == strip.step.usage.prompt_total  # the status bar counts it
