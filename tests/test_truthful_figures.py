"""Figures that say what happened: no miss where nothing could be cached, no bar running after its
turn ended, no minute's rate without a request in it, a hit rate over every step whose miss is
known, a status bar that keeps its cache figure when narrow and leaves out only what doesn't fit, tool
time told apart from the model's, counts in good grammar, and headless step lines that say their turn.
"""

from __future__ import annotations

import asyncio
import io
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from textual.app import App, ComposeResult

from hotloop.agent.cache_explainer import CacheExplainer
from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    SideRequest,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
    fan_out,
)
from hotloop.agent.figures import SessionTotals, step_summary, tool_phase
from hotloop.agent.loop import Agent
from hotloop.agent.pricing import StepPricer
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.config import load_config
from hotloop.core import server_watch
from hotloop.core.server_watch import ServerReport
from hotloop.core.session import Session, SessionOptions
from hotloop.headless.printer import Printer
from hotloop.providers import vllm
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, Message, UserMessage
from hotloop.providers.events import TextDelta, UsageLedger
from hotloop.sessions.waterfall import render, waterfalls
from hotloop.sim.engine import LatencyProfile
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import NoticeItem, ToolCallsItem
from hotloop.tui.render import Palette, RenderContext
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.widgets.server_panel import ServerPanel
from hotloop.tui.widgets.status_bar import StatusBar, fitted

from support import Recorder, make_agent, sim_with_scenario, wait_until

PALETTE = Palette("#ffa62b", "#8d8d8d", "#a0a0a0", "#4ebf71", "#ffa62b", "#b93c5b", "#1e1e1e", "#2b4a6b", dark=True)
BIG = "word " * 1_500  # a tool result that takes the next prompt well past Anthropic's cache minimum


def finished(
    turn: int = 1,
    step: int = 1,
    usage: UsageLedger | None = None,
    tools: tuple[int, float, float] = (0, 0.0, 0.0),
    model_time: float = 1.0,
    ttft: float | None = 0.1,
) -> StepFinished:
    count, ran, summed = tools
    return StepFinished(
        turn=turn,
        step=step,
        usage=usage,
        ttft=ttft,
        decode_tps=50.0,
        model_time=model_time,
        wall=model_time + ran,
        tool_count=count,
        tool_sum=summed,
        tool_wall=ran,
        finish_reason="tool_calls" if count else "stop",
    )


def started(step: int, provider: str = "vllm", model: str = "m") -> StepStarted:
    return StepStarted(turn=1, step=step, provider=provider, model=model)


# -- 1. the explainer never calls an uncacheable step's successor a miss ------------------------


async def test_the_step_after_one_below_the_cache_minimum_is_not_called_evicted(tmp_path: Path) -> None:
    """sim-anthropic: step 1 (below 1,024 tokens) caches nothing, so step 2 reads nothing and is no miss."""

    async def big(args: dict[str, Any], ctx: ToolContext) -> str:
        return BIG

    call = {"tool_calls": [{"name": "big", "arguments": {}}]}
    sim = sim_with_scenario(tmp_path, [call, call, {"text": "done"}])
    minimum = load_config().sim.cache_min_tokens
    assert minimum == 1024
    provider = AnthropicProvider(
        ProviderOptions(
            name="sim-anthropic", model="sim-balanced", base_url=sim.url, max_retries=0, cache_min_tokens=minimum
        )
    )
    recorder = Recorder()
    registry = ToolRegistry([Tool("big", "Big.", {"type": "object"}, big)])
    agent = Agent(provider, registry, emit=recorder, workspace=tmp_path, system="Be brief.")
    try:
        await agent.run_turn("go")
    finally:
        await provider.aclose()
        sim.stop()
    first, second, third = recorder.of(StepFinished)
    assert first.usage is not None and first.usage.below_cache_min == minimum
    assert "below cache minimum 1,024: not cached" in step_summary(first)
    assert second.usage is not None and second.usage.cache_read == 0 and second.usage.cache_write
    assert second.cache_note == ""  # was "cache miss: evicted: nothing changed, yet …"
    assert third.usage is not None and third.usage.cache_read == second.usage.cache_write
    assert [step.cache_note for step in recorder.of(StepFinished)] == ["", "", ""]


def explained(explainer: CacheExplainer, usage: UsageLedger, provider: str = "vllm", messages: int = 1) -> str:
    """The explainer's note for a step whose request holds `messages` unchanged user messages."""
    history: list[Message] = [UserMessage(f"message {n}") for n in range(messages)]
    explainer.fingerprint(ChatRequest("system", (), tuple(history)), provider, "m", 0.0)
    return explainer.explain(usage, history, anthropic=provider == "anthropic")


def test_a_miss_is_measured_against_what_the_previous_step_left_in_the_cache() -> None:
    explainer = CacheExplainer()
    short = UsageLedger(prompt_total=900, cache_read=0, cache_write=0, uncached=900).with_cache_minimum(1024)
    assert explained(explainer, short, "anthropic") == ""
    # The previous prompt was below the minimum: a read of 0 is all there could be.
    wrote = UsageLedger(prompt_total=1_700, cache_read=0, cache_write=1_696, uncached=4)
    assert explained(explainer, wrote, "anthropic", 2) == ""
    # It wrote 1,696 tokens and nothing changed: reading none of them is an eviction, and said.
    lost = UsageLedger(prompt_total=2_000, cache_read=0, cache_write=1_996, uncached=4)
    assert explained(explainer, lost, "anthropic", 3) == (
        "cache miss: evicted: nothing changed, yet the server no longer had the prefix (1,696 tokens re-prefilled)"
    )
    # An above-minimum prompt that wrote nothing (its breakpoint's prefix too short) left nothing to read either.
    nothing = CacheExplainer()
    explained(nothing, UsageLedger(prompt_total=1_100, cache_read=0, cache_write=0, uncached=1_100), "anthropic")
    assert explained(nothing, lost, "anthropic", 2) == ""


def test_a_missing_cache_figure_is_a_miss_only_from_a_server_that_has_reported_reads() -> None:
    explainer = CacheExplainer()
    assert explained(explainer, UsageLedger(prompt_total=2_000, cache_read=1_984), "vllm") == ""
    # vLLM leaves the figure out of a total miss: from a server that reported reads, that is a read of 0.
    assert explained(explainer, UsageLedger(prompt_total=2_100), "vllm", 2).startswith("cache miss: evicted")
    # A server that never reported one (Ollama, here after a switch): unknown, so no claim.
    assert explained(explainer, UsageLedger(prompt_total=2_200), "ollama", 3) == ""
    assert explained(explainer, UsageLedger(prompt_total=2_300), "ollama", 4) == ""


# -- 2. a cancelled turn's bars end at the cancel --------------------------------------------------


async def cancelled_turn(tmp_path: Path, steps: list[dict[str, Any]], *when: type) -> list[AgentEvent]:
    """The events of a turn cancelled as soon as an event of each type in `when` has arrived."""
    gate = asyncio.Event()  # never set: the tool runs until it is cancelled

    async def hang(args: dict[str, Any], ctx: ToolContext) -> str:
        await gate.wait()
        return "never"

    sim = sim_with_scenario(tmp_path, steps, LatencyProfile(ttft=0.0, prefill_per_token=0, decode_per_token=0.02))
    try:
        agent, recorder = make_agent(sim, tmp_path, [Tool("hang", "Hangs.", {"type": "object"}, hang)])
        turn = asyncio.create_task(agent.run_turn("go"))
        await wait_until(lambda: all(recorder.of(kind) for kind in when))
        turn.cancel()
        with pytest.raises(asyncio.CancelledError):
            await turn
        await agent.provider.aclose()
    finally:
        sim.stop()
    return recorder.events


async def test_a_turn_cancelled_mid_answer_ends_its_bar_at_the_cancel(tmp_path: Path) -> None:
    events = await cancelled_turn(tmp_path, [{"text": "word " * 400}], TextDelta)
    [end] = [event for event in events if isinstance(event, TurnFinished)]
    assert end.reason == "cancelled"
    (turn,) = waterfalls(events)
    [bar] = turn.bars
    # The bar is the model's time up to the cancel, as the step's end measured it: the turn ends a moment after.
    assert bar.cut == "cancelled" and bar.end == pytest.approx(end.wall, abs=0.01) and bar.end > bar.start
    lines = render(turn, 100, None).plain.splitlines()
    assert lines[1].startswith("step 1 · ") and lines[1].endswith(f" {bar.end - bar.start:.2f} s cancelled")
    assert "running" not in render(turn, 100, None).plain


async def test_a_turn_cancelled_while_a_tool_runs_says_the_tool_was_cancelled(tmp_path: Path) -> None:
    # The tool starts as soon as its call is whole, before the message ends (early dispatch): wait for both.
    calls = [{"tool_calls": [{"name": "hang", "arguments": {}}]}]
    events = await cancelled_turn(tmp_path, calls, ToolStarted, ResponseFinished)
    (turn,) = waterfalls(events)
    model, tool = turn.bars
    assert model.done and not model.cut  # the answer was complete before the cancel
    assert tool.done and tool.cut == "cancelled"
    text = render(turn, 100, None).plain
    assert "running" not in text and text.splitlines()[2].endswith(" s cancelled")
    # The F3 screen draws the same.
    app = App[None]()
    async with app.run_test(size=(100, 30)):
        screen = WaterfallScreen(events)
        await app.push_screen(screen)
        await wait_until(lambda: bool(screen.plain), what="the waterfall to be drawn")
        assert "running" not in screen.plain and screen.plain.count(" s cancelled") == 1


def test_a_turn_still_running_is_drawn_running() -> None:
    events: list[AgentEvent] = [TurnStarted(turn=1, prompt="go", ts=10.0), StepStarted(1, 1, "sim", "m", ts=10.0)]
    (turn,) = waterfalls(events)
    assert render(turn, 100, None).plain.splitlines()[1].endswith(" running")


# -- 3. the server panel's last minute is a real minute -------------------------------------------


class Clock:
    """A monotonic clock for the session's scrapes that moves five seconds at each reading, as idle scrapes do."""

    def __init__(self) -> None:
        self.now = 1_000.0

    def monotonic(self) -> float:
        self.now += 5.0
        return self.now


async def test_the_last_minute_empties_after_a_minute_without_requests(
    isolated_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The session's own scrapes of the simulator: a number while the minute holds requests, "–" after it."""
    (isolated_home / "config.toml").write_text("[routing]\ntitles = false\n[sim]\nttft_ms = 0\n")
    clock = Clock()
    monkeypatch.setattr(vllm, "time", clock)
    monkeypatch.setattr(server_watch, "IDLE_INTERVAL", 0.01)
    workspace = isolated_home / "ws"
    workspace.mkdir()
    reports: list[ServerReport | None] = []
    session = Session(load_config(), SessionOptions(workspace=workspace), emit=lambda event: None)
    try:
        await session.open()
        session.server.follow(reports.append)
        await session.turn("list the files")
        after_turn = clock.now
        await wait_until(lambda: clock.now > after_turn + 90)  # the scrapes of a minute and a half of quiet
    finally:
        await session.close()
    stats = [report.stats for report in reports if report is not None and report.stats is not None]
    assert any(figures.hit_rate_recent is not None for figures in stats)  # the turn's requests were in the minute
    last = stats[-1]
    assert last.hit_rate_recent is None and last.hit_rate_since_start is not None
    panel = ServerPanel()
    panel.report = next(report for report in reversed(reports) if report is not None)
    rows = {line[:18].strip(): line[18:] for line in str(panel.render()).splitlines()[3:] if line}
    assert rows["last 1 min"] == "–" and rows["since start"].endswith("%")


# -- 4. the hit rate counts every step whose miss is known -----------------------------------------


def test_a_missing_figure_from_a_server_that_reports_reads_counts_as_a_miss() -> None:
    totals = SessionTotals()
    steps = [
        UsageLedger(prompt_total=1_000, output=10),  # vLLM: a total miss carries no figure
        UsageLedger(prompt_total=1_200, cache_read=992, uncached=208, output=10),
        UsageLedger(prompt_total=1_400, output=10),  # evicted: no figure again
    ]
    for n, usage in enumerate(steps, 1):
        totals.add(started(n))
        totals.add(finished(step=n, usage=usage))
    assert totals.cache_hit == 992 / 3_600 and totals.cache_unknown == 0
    # A server that never reports reads (Ollama) leaves its steps unknown, and says how many.
    totals.add(started(4, "ollama"))
    totals.add(finished(step=4, usage=UsageLedger(prompt_total=500, output=1)))
    totals.add(started(5, "ollama"))
    totals.add(finished(step=5, usage=None))
    assert totals.cache_hit == 992 / 3_600 and totals.cache_unknown == 2 and totals.unreported == 1
    # Below the cache minimum: not a miss, not unknown; left out.
    totals.add(started(6, "anthropic"))
    short = UsageLedger(prompt_total=900, cache_read=0, cache_write=0, uncached=900).with_cache_minimum(1024)
    totals.add(finished(step=6, usage=short))
    assert totals.cache_hit == 992 / 3_600 and totals.cache_unknown == 2


async def test_the_status_bar_rate_is_the_servers_own(tmp_path: Path) -> None:
    """On the simulator (vLLM's usage: no figure on a total miss), the rate is the server's hits ÷ queries."""
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.txt"}}]}
    (tmp_path / "notes.txt").write_text("notes " * 200)
    sim = sim_with_scenario(tmp_path, [read, read, read, {"text": "done"}])
    try:
        agent, recorder = make_agent(sim, tmp_path)
        await agent.run_turn("go")
        sim.server.engine.cache.clear()  # the next turn's first step should miss too (the engine may refill it)
        await agent.run_turn("again")
        await agent.provider.aclose()
        text = await asyncio.to_thread(lambda: urllib.request.urlopen(sim.url + "/metrics").read().decode())
    finally:
        sim.stop()
    served = {
        name: sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(name + "{"))
        for name in ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")
    }
    missing = [e for e in recorder.of(StepFinished) if e.usage is not None and e.usage.cache_read is None]
    assert missing  # a total miss, with no figure: at least the first step
    totals = SessionTotals()
    for event in recorder.events:
        if isinstance(event, StepStarted | StepFinished):
            totals.add(event)
    expected = served["vllm:prefix_cache_hits_total"] / served["vllm:prefix_cache_queries_total"]
    assert totals.cache_hit == pytest.approx(expected) and totals.cache_unknown == 0


# -- 5. the status bar keeps its cache figure when narrow ------------------------------------------


class BarApp(App[None]):
    def compose(self) -> ComposeResult:
        yield StatusBar()


def busy_totals() -> SessionTotals:
    """62% over the steps whose miss is known, and two steps unknown (Ollama's, after a switch)."""
    totals = SessionTotals()
    totals.add(started(1))
    totals.add(finished(step=1, usage=UsageLedger(prompt_total=100_000, cache_read=62_000, output=12_345)))
    for n in (2, 3):
        totals.add(started(n, "ollama"))
        totals.add(finished(step=n, usage=UsageLedger(prompt_total=10, output=5)))
    return totals


@pytest.mark.parametrize(
    ("columns", "shown"),
    [
        (
            145,
            "● step 12  │  sim-anthropic · sim-balanced · balanced  │  prompt 100,020 · out 12,355 · price unknown · ",
        ),
        # The tier doesn't fit beside the cost, which comes first.
        (130, "● step 12  │  sim-anthropic · sim-balanced  │  prompt 100,020 · out 12,355 · price unknown · "),
        # The cost doesn't fit, the shorter tier does: an item that doesn't fit takes nothing else with it.
        (125, "● step 12  │  sim-anthropic · sim-balanced · balanced  │  prompt 100,020 · out 12,355 · "),
        # The totals go before the provider and model: what answers is what an 80-column glance looks for.
        (110, "● step 12  │  sim-anthropic · sim-balanced · balanced  │  price unknown · "),
        (90, "● step 12  │  sim-anthropic · sim-balanced  │  "),
        (80, "● step 12  │  sim-anthropic  │  "),  # no tier without its model
        (60, "● step 12  │  "),
    ],
)
async def test_the_status_bar_leaves_out_only_what_doesnt_fit_and_never_its_cache_figure(
    columns: int, shown: str
) -> None:
    """Items are kept in order (state, cache, context, provider, model, totals, cost, tier) while the line fits
    with them, each measured beside a turn's longest state (`● step 100`)."""
    app = BarApp()
    async with app.run_test(size=(columns, 3)) as pilot:
        bar = app.query_one(StatusBar)
        bar.provider, bar.model, bar.tier, bar.state = "sim-anthropic", "sim-balanced", "balanced", "step 12"
        bar.totals = busy_totals()
        await pilot.pause()
        line = bar.render().plain
    assert line == shown + "cache hit 62% · 2 steps unknown"
    assert len(line) <= columns - 2  # its padding


def test_no_item_comes_or_goes_with_the_turns_state() -> None:
    """Issue 35: `price unknown` left the bar while a call waited (`● step 2` is longer than `● ready`). At every
    width the same items show whatever the state."""
    bar = StatusBar()
    bar.provider, bar.model, bar.tier = "sim-anthropic", "sim-balanced", "balanced"
    bar.totals = busy_totals()
    for width in range(40, 160):
        lines = set()
        for state in ("ready", "running", "step 12", "step 100"):
            bar.state = state
            lines.add(fitted(bar.parts(), width).plain.removeprefix(f"● {state}"))
        assert len(lines) == 1, (width, lines)


@pytest.mark.parametrize(
    ("columns", "cost", "tier"),
    [
        (150, "~$1.00 + 2 steps price unknown", True),
        (140, "≥~$1.00", True),  # the whole cost doesn't fit beside the tier: the tier stays, the cost shortens
        (120, "≥~$1.00", False),
        (110, None, False),
        (100, "≥~$1.00", False),  # the totals don't fit; the cost does
    ],
)
async def test_a_partly_priced_session_keeps_its_dollars_as_an_at_least_before_the_tier_goes(
    columns: int, cost: str | None, tier: bool
) -> None:
    """A self-hosted vLLM at $3,600 an hour (a second of model time is a dollar), then two Ollama steps, unpriced."""
    totals = SessionTotals(StepPricer(hourly={"vllm": 3600}))
    totals.add(started(1))
    totals.add(finished(step=1, usage=UsageLedger(prompt_total=100, cache_read=62, output=10)))
    for n in (2, 3):
        totals.add(started(n, "ollama"))
        totals.add(finished(step=n, usage=UsageLedger(prompt_total=10, output=5)))
    app = BarApp()
    async with app.run_test(size=(columns, 3)) as pilot:
        bar = app.query_one(StatusBar)
        bar.provider, bar.model, bar.tier, bar.state = "sim-anthropic", "sim-balanced", "balanced", "step 12"
        bar.totals = totals
        await pilot.pause()
        line = bar.render().plain
    assert (f" · {cost} · " in line or f"  {cost} · " in line) if cost else "$" not in line
    assert ("· balanced  │" in line) == tier
    assert len(line) <= columns - 2


# -- 6. tool time and model time, named apart ------------------------------------------------------


def test_the_tool_phase_names_the_tools_time_and_the_models_apart() -> None:
    step = finished(usage=UsageLedger(prompt_total=10, output=5), tools=(4, 0.02, 0.02), model_time=0.98, ttft=0.14)
    said = "4 tools ran for 0.02 s (sum 0.02 s) · the model wrote for 0.84 s"
    assert tool_phase(4, 0.02, 0.02, 0.84) == said
    assert step_summary(step).endswith(" · " + said)  # the headless line
    # The strip: the same words for the tools.
    items = TranscriptFold().apply_all(
        [
            TurnStarted(turn=1, prompt="go"),
            started(1),
            *[ToolStarted(call_id=f"c{n}", name="read_file", arguments="{}") for n in range(4)],
            *[
                ToolFinished(call_id=f"c{n}", name="read_file", status="ok", duration=0.005, result="x")
                for n in range(4)
            ],
            step,
        ]
    )
    [tools] = [item for item, _ in items if isinstance(item, ToolCallsItem)]
    context = RenderContext(Console(width=100, color_system=None), 100, PALETTE)
    assert tools.render(context).lines[-1].text.rstrip() == "4 tools ran for 0.02 s (sum 0.02 s)"
    # Parallelism is claimed only where the tools' runs overlapped.
    assert tool_phase(3, 1.02, 3.01) == "3 tools ran for 1.02 s (sum 3.01 s, 3.0× from parallelism)"


@pytest.mark.wall_clock
async def test_early_dispatched_tools_are_not_charged_with_the_models_writing(tmp_path: Path) -> None:
    """Three instant calls, each written slowly: the tools ran for almost nothing, the model wrote for the rest."""
    query = "prefix caching block hashing eviction policy " * 6
    calls = [{"name": "list_dir", "arguments": {"path": ".", "note": query}} for _ in range(3)]
    sim = sim_with_scenario(
        tmp_path, [{"tool_calls": calls}, {"text": "done"}], LatencyProfile(0.0, 0.0, decode_per_token=0.002)
    )
    err = io.StringIO()
    try:
        agent, recorder = make_agent(sim, tmp_path)
        agent.emit = fan_out(recorder, Printer(out=io.StringIO(), err=err))
        await agent.run_turn("go")
        await agent.provider.aclose()
    finally:
        sim.stop()
    step = recorder.of(StepFinished)[0]
    starts = [e.ts for e in recorder.of(ToolStarted)]
    assert starts[0] < recorder.of(ResponseFinished)[0].ts  # the first call ran while the model wrote
    assert step.tool_wall < (step.model_time - (step.ttft or 0)) / 2  # tools' time is not the writing's
    said = tool_phase(3, step.tool_wall, step.tool_sum, step.model_time - (step.ttft or 0))
    assert said.startswith("3 tools ran for ") and " · the model wrote for " in said
    assert said in err.getvalue()


# -- 7. counts in good grammar ---------------------------------------------------------------------


def test_counts_agree_with_their_nouns() -> None:
    assert tool_phase(1, 0.5, 0.5) == "1 tool ran for 0.50 s"
    fold = TranscriptFold()
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="go"),
        started(1),
        ToolStarted(call_id="c1", name="read_file", arguments="{}"),
        TurnFinished(turn=1, reason="cancelled", steps=1, wall=1.0),
    ]
    notices = [item for item, _ in fold.apply_all(events) if isinstance(item, NoticeItem)]
    assert [n.message for n in notices] == ["turn cancelled; 1 unfinished tool call got a cancelled result"]
    totals = SessionTotals()
    totals.add(started(1))
    totals.add(finished(usage=UsageLedger(prompt_total=100, cache_read=50, output=1)))
    totals.add(started(2, "ollama"))
    totals.add(finished(step=2, usage=None))
    bar = StatusBar()
    bar.totals = totals
    said = "prompt ≥100 · out ≥1 · price unknown · cache hit 50% · 1 step unknown"  # ≥: a step's usage is unknown
    assert bar.render().plain.endswith(said)
    bar.show_detail(None)
    assert str(bar.tooltip).splitlines()[1].startswith("1 step without usage (")


def test_the_count_of_pre_warms_is_the_first_thing_the_status_bar_gives_up() -> None:
    """`incl. 1 pre-warm` is said where it fits after everything else, else left to the tooltip."""
    bar = StatusBar()
    bar.state, bar.provider, bar.model, bar.tier = "ready", "sim", "sim-balanced", "balanced"
    totals = busy_totals()
    totals.add(SideRequest(kind="pre-warm", why="start", provider="sim", model="m", usage=None, model_time=0.1))
    bar.totals = totals
    wide, narrow = fitted(bar.parts(), 200).plain, fitted(bar.parts(), 140).plain
    assert "out 12,355 · incl. 1 pre-warm · price unknown" in wide
    assert "incl." not in narrow and "· balanced  │  prompt 100,020 · out 12,355 · price unknown · cache" in narrow


# -- 8. headless step lines say their turn ---------------------------------------------------------


async def test_headless_step_lines_number_their_turn_from_the_second_on(tmp_path: Path) -> None:
    sim = sim_with_scenario(tmp_path, [{"text": "one"}, {"text": "two"}])
    err = io.StringIO()
    try:
        agent, _ = make_agent(sim, tmp_path)
        agent.emit = Printer(out=io.StringIO(), err=err)
        await agent.run_turn("a")
        await agent.run_turn("b")
        await agent.provider.aclose()
    finally:
        sim.stop()
    lines = [line for line in err.getvalue().splitlines() if "prompt" in line]
    assert len(lines) == 2
    assert lines[0].startswith("turn 1 · step 1 · prompt ")
    assert lines[1].startswith("turn 2 · step 1 · prompt ")
