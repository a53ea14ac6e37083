"""Pictures of the app in known states. Each state is built from crafted events with fixed
timestamps and a fixed clock, so timers and spinners draw the same every run."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from pathlib import Path

from textual.command import CommandList
from textual.pilot import Pilot

from hotloop.agent.events import (
    AgentEvent,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.config import load_config
from hotloop.providers.events import TextDelta, ToolCallArgsDelta, ToolCallReady, ToolCallStarted, UsageLedger
from hotloop.tui.app import HotloopApp
from hotloop.tui.screens.help import HelpScreen
from hotloop.tui.screens.waterfall import WaterfallScreen
from hotloop.tui.widgets.approval_bar import ApprovalBar
from hotloop.tui.widgets.new_output import NewOutput
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.queued_prompts import QueuedPrompts

from tui_support import connected, wait_until, write_config

# The fixture's own annotation leaves out the keyword arguments its function takes.
SnapCompare = Callable[..., bool]

T = 1_800_000_000.0
SIZE = (100, 30)
ANSWER = """## Parallel reads

The three files were read **at once**, so the step took as long as the slowest read:

- `app.py`: the entry point
- `cache.py`: the prefix cache

```python
def block_hashes(tokens, size=16):
    parent = 0
    for start in range(0, len(tokens) - size + 1, size):
        parent = hash((parent, *tokens[start : start + size]))
        yield parent
```

| file | lines |
|---|---|
| app.py | 120 |
| cache.py | 64 |
"""


def snapshot_app(home: Path) -> HotloopApp:
    write_config(home)
    return HotloopApp(load_config(), clock=lambda: T + 2.5)


def app_of(pilot: Pilot[None]) -> HotloopApp:
    assert isinstance(pilot.app, HotloopApp)
    return pilot.app


async def settle(pilot: Pilot[None]) -> None:
    await connected(app_of(pilot))
    pilot.app.query_one(PromptInput).cursor_blink = False
    await pilot.pause()


def showing(events: list[AgentEvent]) -> Callable[[Pilot[None]], Awaitable[None]]:
    """A `run_before` that settles the app, then feeds it `events` through its own event path."""

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        for event in events:
            app_of(pilot).session.emit(event)
        await pilot.pause()

    return run_before


def usage(prompt: int, read: int | None, output: int) -> UsageLedger:
    uncached = None if read is None else prompt - read
    return UsageLedger(prompt_total=prompt, cache_read=read, uncached=uncached, output=output)


def step_events(step: int, usage: UsageLedger, tools: tuple[int, float, float] = (0, 0.0, 0.0)) -> list[AgentEvent]:
    count, wall, total = tools
    return [
        ResponseFinished(
            turn=1,
            step=step,
            usage=usage,
            ttft=0.14,
            decode_tps=96.0,
            model_time=0.9,
            finish_reason="tool_calls" if count else "stop",
            ts=T + step,
        ),
        StepFinished(
            turn=1,
            step=step,
            usage=usage,
            ttft=0.14,
            decode_tps=96.0,
            model_time=0.9,
            wall=2.0,
            tool_count=count,
            tool_sum=total,
            tool_wall=wall,
            finish_reason="stop",
            ts=T + step,
        ),
    ]


def tool_call_events(calls: list[tuple[str, str, str]]) -> list[AgentEvent]:
    events: list[AgentEvent] = []
    for index, (call_id, name, arguments) in enumerate(calls):
        events += [ToolCallStarted(index, call_id, name, ts=T), ToolCallArgsDelta(index, call_id, arguments, ts=T)]
    events += [ToolCallReady(i, call_id, name, arguments, ts=T) for i, (call_id, name, arguments) in enumerate(calls)]
    return events


def calls_asked(
    prompt: str, text: str, calls: list[tuple[str, str, str]], usage: UsageLedger, figures: tuple[float, float, float]
) -> list[AgentEvent]:
    """A turn's first step: its text, then its tool calls, answered (`figures`: ttft, decode rate, model time)."""
    ttft, decode_tps, model_time = figures
    return [
        TurnStarted(turn=1, prompt=prompt, ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        TextDelta(text, ts=T),
        *tool_call_events(calls),
        ResponseFinished(
            turn=1,
            step=1,
            usage=usage,
            ttft=ttft,
            decode_tps=decode_tps,
            model_time=model_time,
            finish_reason="tool_calls",
            ts=T,
        ),
    ]


READS = [
    ("c1", "read_file", '{"path": "app.py"}'),
    ("c2", "read_file", '{"path": "cache.py"}'),
    ("c3", "grep", '{"pattern": "TODO"}'),
]


def test_empty_app(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """The empty app: a welcome text, the prompt with its placeholder, the status bar on the
    embedded simulator (● ready · sim · sim-balanced · balanced, totals at 0, cache hit not
    reported), and the footer's keys."""
    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=settle)


def test_finished_answer_with_code(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A finished answer rendered as Markdown: the user's prompt with an accent bar, a heading,
    bold text, a bulleted list with inline code, a syntax-highlighted Python block, a table,
    and the step's usage strip (prompt 1,204 · cache not reported · out 160 · ttft 0.14 s · 96 tok/s)."""
    events = [
        TurnStarted(turn=1, prompt="Read app.py and cache.py", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        TextDelta(ANSWER, ts=T),
        *step_events(1, usage(1_204, None, 160)),
        TurnFinished(turn=1, reason="answer", steps=1, wall=2.0, ts=T + 2),
    ]
    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=showing(events))


def test_three_tool_panes_mid_flight(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """Three tool panes side by side while a step's tools run: read_file app.py and grep TODO
    still running (spinner, 2.50 s, accent border), read_file cache.py finished (green border,
    ✓ ok · 0.42 s, its output in the pane's log). Below, the live usage strip says 2 tools are
    running."""
    prompt = "Read app.py and cache.py, and grep for TODO"
    events = [
        *calls_asked(
            prompt, "Reading both files and searching at once.\n", READS, usage(612, None, 84), (0.15, 95.0, 0.8)
        ),
        *[ToolStarted(call_id=c, name=n, arguments=a, ts=T) for c, n, a in READS],
        ToolOutput(call_id="c3", text="scanning 42 files", ts=T + 1),
        ToolFinished(
            call_id="c2",
            name="read_file",
            status="ok",
            duration=0.42,
            result="import hashlib\nBLOCK_SIZE = 16\n",
            ts=T + 0.42,
        ),
    ]
    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=showing(events))


def test_usage_strips_and_status_bar(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A two-step turn, finished. Step 1 missed the cache ("cache not reported", never 0); its
    three tools collapsed to one line each, with the summary "3 tools ran for 1.02 s (sum 3.01 s,
    3.0× from parallelism)". Step 2's strip shows the cache bar, read 1,296 · uncached 98. The
    status bar totals both steps: prompt 1,916 · out 244 · cache hit 68% (1,296 ÷ 1,916: step 1
    reported no cache figure, which from a server that reports reads is a miss), then the context
    meter, ctx 1% of 128k (the simulator's window); at 100 columns the tier gives way to it."""
    events = two_step_turn()
    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=showing(events))


def test_palette_lists_tiers(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """The command palette, searched for "tier": the three tiers of the embedded simulator,
    each with the provider and model it maps to (sim · sim-fast, sim · sim-balanced, sim · sim-strong),
    and `auto`, which says the fast tier sorts each turn (simple → fast, complex → strong)."""
    app = snapshot_app(isolated_home)

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("ctrl+p")
        for key in "tier":
            await pilot.press(key)
        # Results arrive from the palette's search task; wait for all four, not a fixed time.
        await wait_until(lambda: pilot.app.screen.query_one(CommandList).option_count == 4)
        await pilot.pause()

    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_a_switch_to_anthropic_and_its_cache(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A switch from sim to sim-anthropic, noted with its cost ("~1,314 prompt tokens to prefill
    uncached (its cache is cold for this conversation)"), then a two-step Anthropic turn. Step 1's
    prompt (900) is under the minimum cacheable length: "below cache minimum (1,024): not cached,
    not a miss", no bar. Step 2 writes: the bar is amber, read 0 · write 1,496 · uncached 4. Step 3
    reads the previous step's prefix: a mostly green bar, read 1,496 · write 210 · uncached 4. The
    status bar follows the switch (sim-anthropic · sim-balanced; at 100 columns the totals and the tier don't fit,
    the shorter `price unknown` does) and its cache hit is 47% (1,496 ÷ 3,210: the step below the minimum is left
    out)."""
    from hotloop.agent.events import ProviderSwitched

    def anthropic(prompt: int, read: int, write: int, output: int) -> UsageLedger:
        ledger = UsageLedger(
            prompt_total=prompt, cache_read=read, cache_write=write, uncached=prompt - read - write, output=output
        )
        return ledger.with_cache_minimum(1024)

    events = [
        ProviderSwitched(
            provider="sim-anthropic",
            model="sim-balanced",
            previous_provider="sim",
            previous_model="sim-balanced",
            context_tokens=1_314,
            cold_tokens=1_314,
            ts=T,
        ),
        TurnStarted(turn=1, prompt="Read app.py, then cache.py", ts=T),
        StepStarted(turn=1, step=1, provider="sim-anthropic", model="sim-balanced", ts=T),
        TextDelta("Reading app.py.\n", ts=T),
        *step_events(1, anthropic(900, 0, 0, 41)),
        StepStarted(turn=1, step=2, provider="sim-anthropic", model="sim-balanced", ts=T + 2),
        TextDelta("Now cache.py.\n", ts=T + 2),
        *step_events(2, anthropic(1_500, 0, 1_496, 38)),
        StepStarted(turn=1, step=3, provider="sim-anthropic", model="sim-balanced", ts=T + 3),
        TextDelta("Both read: `app.py` starts the server and `cache.py` holds the cache.", ts=T + 3),
        *step_events(3, anthropic(1_710, 1_496, 210, 52)),
        TurnFinished(turn=1, reason="answer", steps=3, wall=4.0, ts=T + 4),
    ]
    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=showing(events))


def two_step_turn() -> list[AgentEvent]:
    return [
        TurnStarted(turn=1, prompt="Read app.py and cache.py, and grep for TODO", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        *tool_call_events(READS),
        *[ToolStarted(call_id=c, name=n, arguments=a, ts=T + 0.9) for c, n, a in READS],
        *[
            ToolFinished(call_id=c, name=n, status="ok", duration=d, result="…", ts=T + 0.9 + d)
            for (c, n, _), d in zip(READS, (1.01, 0.98, 1.02), strict=True)
        ],
        *step_events(1, usage(522, None, 84), (3, 1.02, 3.01)),
        StepStarted(turn=1, step=2, provider="sim", model="sim-balanced", ts=T + 2),
        TextDelta("All three are done; nothing to fix.", ts=T + 2),
        *step_events(2, usage(1_394, 1_296, 160)),
        TurnFinished(turn=1, reason="answer", steps=2, wall=4.0, ts=T + 4),
    ]


def test_a_queued_prompt_under_the_input(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A turn streams its answer; under the prompt box, two prompts typed meanwhile wait their turn:
    "⏵ queued: now fix the failing test" and "⏵ queued: then update the README", and a dim line
    saying they go when the turn ends and that ↑ in an empty box takes the last one back."""
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="Why does the cache miss after a tool call?", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        TextDelta("The tool result changes the prompt after the", ts=T),
    ]

    async def run_before(pilot: Pilot[None]) -> None:
        await showing(events)(pilot)
        pilot.app.query_one(QueuedPrompts).prompts = ("now fix the failing test", "then update the README")
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)


def test_new_output_below_the_view_shows_the_marker(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """The user scrolled to the top of a long answer while it streams: the view stays on its
    first lines, and a bold "↓ new output · ctrl+end" marker sits at the foot of the transcript, on a
    line of its own: no text under it."""
    long = "".join(f"Paragraph {n} of a long answer.\n\n" for n in range(40))
    events: list[AgentEvent] = [
        TurnStarted(turn=1, prompt="Explain it at length", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        TextDelta(long, ts=T),
    ]

    async def run_before(pilot: Pilot[None]) -> None:
        await showing(events)(pilot)
        transcript = app_of(pilot).main.transcript
        transcript.answer.flush(everything=True)
        await pilot.pause()
        transcript.scroll_to_start()
        await wait_until(lambda: not transcript.following)
        app_of(pilot).show(TextDelta("More arrives below.", ts=T + 1))
        await wait_until(lambda: pilot.app.query_one(NewOutput).display)
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)


def test_the_waterfall(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """F3 over a two-step turn: turn 1's prompt, then a bar per step (sim-balanced) and one per
    tool (read_file app.py, read_file cache.py, grep TODO) laid out on one time axis, the three
    tool bars side by side, and what parallel tools and the cache saved."""
    events = two_step_turn()

    async def run_before(pilot: Pilot[None]) -> None:
        await showing(events)(pilot)
        await pilot.app.push_screen(WaterfallScreen(events))  # F3 reads the log; these events have none
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=SIZE, run_before=run_before)


def test_the_help_screen(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """F1: the keys of the prompt (Enter sends or queues, ctrl+s sends now, shift+enter or ctrl+j a
    new line, ↑/↓ history) and of the whole app (Esc, ctrl+n, ctrl+b, ctrl+o, F2, F3, F1, page keys,
    ctrl+p, ctrl+q), read from the bindings, in a bordered box over the app."""

    async def run_before(pilot: Pilot[None]) -> None:
        await settle(pilot)
        await pilot.press("f1")
        await wait_until(lambda: isinstance(pilot.app.screen, HelpScreen))
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=(100, 40), run_before=run_before)


def test_a_two_hundred_line_command_waiting_at_80_by_24(snap_compare: SnapCompare, isolated_home: Path) -> None:
    """A run_shell call of 200 lines waits for approval at 80×24. The question's first line names
    what it runs: 200 commands (200 lines): echo, touch. Below it the call's text, scrolled to its
    end: `echo line 197↵` … `touch LAST`, the last line on screen. Then every answer key: y allow
    once, a allow for this session (the 200 rules, listed above the call), n deny, r deny saying
    why. The prompt and the status bar stay below it."""
    import asyncio

    from hotloop.agent.approvals import Approvals, subject_of
    from hotloop.agent.events import ApprovalAsked
    from hotloop.agent.tools.shell import ShellSettings, shell_tool

    command = "\n".join(f"echo line {n}" for n in range(1, 200)) + "\ntouch LAST"
    arguments = json.dumps({"command": command})
    events = [
        TurnStarted(turn=1, prompt="Run the checks", ts=T),
        StepStarted(turn=1, step=1, provider="sim", model="sim-balanced", ts=T),
        *tool_call_events([("c1", "run_shell", arguments)]),
        ApprovalAsked(call_id="c1", name="run_shell", subject=command, preview=f"$ {command}", ts=T),
    ]
    tool = shell_tool(ShellSettings(), ())
    request = Approvals().request("c1", "run_shell", subject_of(tool, {"command": command}, Path(".")), command)
    asking: list[asyncio.Task[object]] = []

    async def run_before(pilot: Pilot[None]) -> None:
        await showing(events)(pilot)
        asking.append(asyncio.create_task(app_of(pilot).main.ask_approval(request)))
        await wait_until(lambda: pilot.app.query_one(ApprovalBar).requests)
        await pilot.pause()

    assert snap_compare(snapshot_app(isolated_home), terminal_size=(80, 24), run_before=run_before)
