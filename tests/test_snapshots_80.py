"""Pictures at 80×24, a first-class size: the approval of a diff beside two other panes, a toast beside the status
bar, and the waterfall of a cancelled step and a wait for an answer. Crafted events, a fixed clock."""

from __future__ import annotations

import asyncio
from pathlib import Path

from test_snapshots import (
    SnapCompare,
    T,
    app_of,
    calls_asked,
    settle,
    showing,
    snapshot_app,
    two_step_turn,
    usage,
)
from test_waterfall_truth import asked_and_allowed, cancelled_mid_stream, turn_two
from textual.pilot import Pilot

from hotloop.agent.approvals import Request
from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    SessionTitled,
    ToolFinished,
    ToolStarted,
)
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.widgets.approval_bar import ApprovalBar

from tui_support import held_toasts, wait_until

SIZE = (80, 24)
DIFF = "--- /dev/null\n+++ b/notes.txt\n@@ -0,0 +1,6 @@\n" + "".join(
    f"+line {n}\n" for n in ("one", "two", "three", "four", "five", "six")
)
WRITE = '{"path": "notes.txt", "content": "line one\\n…"}'
CALLS = [
    ("c1", "write_file", WRITE),
    ("c2", "read_file", '{"path": "README.md"}'),
    ("c3", "grep", '{"pattern": "TODO"}'),
]


def test_a_diff_waiting_for_approval_beside_two_panes_at_80_by_24(
    snap_compare: SnapCompare, isolated_home: Path
) -> None:
    """Three panes side by side: write_file notes.txt waits (double border, "⏸ waiting for approval"), its
    diff shown whole from its hunk (@@ -0,0 +1,6 @@, +line one … +line six), the pane's top border on screen;
    read_file README.md done (its output), grep TODO running. Under them the step's strip, then the approval bar:
    "write_file wants to write notes.txt" and all four answers (y, a, n, r). The prompt, the status bar with
    sim · sim-balanced, and the footer with f1 Help first."""
    prompt = "write the notes, read the README and grep TODO"
    events: list[AgentEvent] = [
        *calls_asked(prompt, "All three at once.\n", CALLS, usage(1_115, None, 137), (0.17, 23.0, 0.9)),
        *[ToolStarted(call_id=c, name=n, arguments=a, ts=T + 1) for c, n, a in CALLS[1:]],
        ToolFinished(call_id="c2", name="read_file", status="ok", duration=0.01, result="# Demo\n", ts=T + 1),
        ApprovalAsked(call_id="c1", name="write_file", subject="notes.txt", preview=DIFF, ts=T + 1),
    ]
    request = Request("c1", "write_file", "notes.txt", DIFF, file=True, session_rules=("write_file:notes.txt",))
    asking: list[asyncio.Task[object]] = []

    async def run_before(pilot: Pilot[None]) -> None:
        await showing(events)(pilot)
        asking.append(asyncio.create_task(app_of(pilot).main.ask_approval(request)))
        await wait_until(lambda: bool(pilot.app.query_one(ApprovalBar).requests))
        await pilot.pause()
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)


def test_a_toast_leaves_the_status_bar_readable_at_80_by_24(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A finished two-step turn, just titled: the toast ("session titled “Parallel reads” by sim-fast") sits at the
    top right, over the transcript's oldest lines, and the status bar below stays whole: ● ready, sim ·
    sim-balanced (the provider and model kept before the totals), the cache hit and the context meter."""
    events = [*two_step_turn(), SessionTitled(title="Parallel reads", model="sim-fast", ts=T + 5)]

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        for event in events:
            app_of(pilot).session.emit(event)
        await held_toasts(pilot.app)  # it would go after 4 s: the picture may come later on a busy machine
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)


def test_the_waterfall_of_a_cancel_and_a_wait_at_80_by_24(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """F3 at 80×24, no line wrapped. Turn 1 was cancelled mid-stream: one ░ (0.14 s to the first token), then █
    decode up to the cancel, "3.92 s cancelled" on the bar's own line. Turn 2's write_file waited 3 s for an answer:
    a "⏸ write_file" bar of ▓, "3.00 s allowed", before the call's ▒ bar; its legend names "▓ waiting for your
    answer". The "saved:" lines go on with a leading ·."""
    events = cancelled_mid_stream() + [turn_two(event) for event in asked_and_allowed()]

    async def run_before(pilot: Pilot[None]) -> None:
        await showing([])(pilot)
        await pilot.app.push_screen(WaterfallScreen(events))
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)
