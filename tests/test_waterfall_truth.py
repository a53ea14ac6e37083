"""The waterfall draws what happened: a cancelled step's times as measured, the waits for an answer, and no line that
wraps at 80 columns."""

from __future__ import annotations

from pathlib import Path

from textual.widgets import Static

from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.providers.events import TextDelta, ToolCallReady, UsageLedger
from hotloop.sessions.waterfall import render, waterfalls
from hotloop.tui.screens.waterfall import WaterfallScreen

from tui_support import running_app, wait_until, write_config

T = 1_800_000_000.0
USAGE = UsageLedger(prompt_total=1_200, cache_read=1_024, uncached=176, output=60)
WRITE = '{"path": "notes.txt", "content": "one\\n"}'


def cancelled_mid_stream() -> list[AgentEvent]:
    """A step whose first token came at 0.14 s, cancelled by Esc 3.92 s in, before its response was complete."""
    return [
        TurnStarted(turn=1, prompt="Explain the cache at length", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        TextDelta("The cache keeps", ts=T + 0.14),
        StepFinished(
            turn=1,
            step=1,
            usage=USAGE,
            ttft=0.14,
            decode_tps=40.0,
            model_time=3.92,
            wall=3.92,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="",
            cut="cancelled",
            ts=T + 3.92,
        ),
        TurnFinished(turn=1, reason="cancelled", steps=1, wall=3.93, ts=T + 3.93),
    ]


def asked_and_allowed() -> list[AgentEvent]:
    """A write that waited 3 s for the user's yes, then ran for 0.2 s."""
    return [
        TurnStarted(turn=1, prompt="Write the notes", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        ToolCallReady(0, "c1", "write_file", WRITE, ts=T + 0.5),
        ResponseFinished(
            turn=1,
            step=1,
            usage=USAGE,
            ttft=0.1,
            decode_tps=50.0,
            model_time=0.6,
            finish_reason="tool_calls",
            ts=T + 0.6,
        ),
        ApprovalAsked(call_id="c1", name="write_file", subject="notes.txt", ts=T + 0.6),
        ApprovalDecided(call_id="c1", name="write_file", allowed=True, by="you (once)", ts=T + 3.6),
        ToolStarted(call_id="c1", name="write_file", arguments=WRITE, ts=T + 3.6),
        ToolFinished(call_id="c1", name="write_file", status="ok", duration=0.2, result="created", ts=T + 3.8),
        StepFinished(
            turn=1,
            step=1,
            usage=USAGE,
            ttft=0.1,
            decode_tps=50.0,
            model_time=0.6,
            wall=3.8,
            tool_count=1,
            tool_sum=0.2,
            tool_wall=3.2,
            finish_reason="tool_calls",
            ts=T + 3.8,
        ),
        TurnFinished(turn=1, reason="answer", steps=1, wall=3.8, ts=T + 3.8),
    ]


def test_a_step_cancelled_mid_stream_is_drawn_as_measured() -> None:
    """0.14 s to the first token, then decode until the cancel at 3.92 s: not 3.92 s of queue and prefill."""
    (turn,) = waterfalls(cancelled_mid_stream())
    (bar,) = turn.bars
    assert bar.first_token is not None and round(bar.first_token - bar.start, 2) == 0.14
    assert round(bar.end - bar.start, 2) == 3.92 and bar.cut == "cancelled"
    line = render(turn, 80, None).plain.splitlines()[1]
    assert line.count("░") == 1 and line.count("█") > 20 and line.endswith(" 3.92 s cancelled")


def test_a_wait_for_the_users_answer_is_a_labelled_bar_of_its_own() -> None:
    (turn,) = waterfalls(asked_and_allowed())
    wait = next(bar for bar in turn.bars if bar.kind == "approval")
    assert (round(wait.start, 2), round(wait.end, 2)) == (0.6, 3.6)
    text = render(turn, 80, None).plain
    assert "  ⏸ write_file" in text and "3.00 s allowed" in text
    assert "▓ waiting for your answer" in text  # the legend names it


async def test_nothing_in_the_waterfall_wraps_at_80_columns(isolated_home: Path) -> None:
    """Every line F3 draws at 80×24, the cancelled step's and the wait's included, fits the box it is drawn in."""
    write_config(isolated_home)
    events = cancelled_mid_stream() + [turn_two(event) for event in asked_and_allowed()]
    async with running_app(size=(80, 24)) as (app, pilot):
        await app.push_screen(WaterfallScreen(events))
        await wait_until(lambda: isinstance(app.screen, WaterfallScreen) and bool(app.screen.plain))  # composed
        await pilot.pause()
        screen = app.screen
        assert isinstance(screen, WaterfallScreen)
        room = screen.query_one("#waterfall", Static).content_size.width
        lines = screen.plain.splitlines()
        assert any(line.endswith("cancelled") for line in lines)
        assert max(len(line) for line in lines) <= room, "\n".join(lines)


def turn_two(event: AgentEvent) -> AgentEvent:
    """The event as turn 2's, 10 s later."""
    import msgspec

    changes: dict[str, object] = {"ts": event.ts + 10}
    if hasattr(event, "turn"):
        changes["turn"] = 2
    return msgspec.structs.replace(event, **changes)
