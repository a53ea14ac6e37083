"""Where a turn's time went, from its logged events: one bar per model request and per tool call.

A model bar has two parts: until the first token (the server's queue and the prompt's
prefill, which a client cannot tell apart) and the decode after it. The critical path is
each step's request, then the tool that finished last, if it outlasted the response. The
figures say what the latency techniques saved: parallel tools (the sum of tool time minus
the tool phases' wall time), early dispatch (tool time that ran while the model was still
writing), and the cache (tokens read from it × the prefill cost per uncached token, fitted
over this session's own steps; in dollars, each step priced against its prompt billed whole as
uncached input).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from hotloop.agent.events import AgentEvent, ResponseFinished
from hotloop.agent.pricing import StepPricer, money
from hotloop.sessions.projection import TurnRecord, project

if TYPE_CHECKING:
    from rich.text import Text


@dataclass
class Bar:
    label: str
    start: float  # seconds since the turn started
    end: float
    first_token: float | None = None  # model bars: where decode begins
    connect: float = 0.0  # model bars: opening the connection, when the request paid for it
    done: bool = False  # False while it runs (a waterfall drawn mid-turn) or if the turn's end cut it short
    cut: str = ""  # why it stopped before it finished: the turn's end ("cancelled", "error", …) or its call's
    critical: bool = False
    kind: str = "model"  # or "tool", "hook"


@dataclass
class TurnWaterfall:
    turn: int
    prompt: str
    wall: float = 0.0
    bars: list[Bar] = field(default_factory=list)
    saved_parallel: float = 0.0
    saved_early: float = 0.0
    saved_prefetch: float = 0.0
    cache_read: int = 0
    cache_dollars: Decimal | None = None  # what the cache reads saved, at the price table's rates, if known


@dataclass
class _Step:
    bar: Bar
    tools: list[Bar] = field(default_factory=list)


def waterfalls(events: list[AgentEvent], pricer: StepPricer | None = None) -> list[TurnWaterfall]:
    """Every turn of a session's events, as bars on the turn's own time axis; `pricer` prices what the cache saved."""
    if pricer is not None:
        for event in events:
            pricer.learn(event)  # the servers of the providers switched to
    return [_turn(record, pricer) for record in project(events).turns]


def _turn(record: TurnRecord, pricer: StepPricer | None) -> TurnWaterfall:
    # A prompt's hooks run before its turn starts: the axis begins with them.
    origin = min([record.started, *(hook.ts - hook.seconds for hook in record.hooks)])
    turn = TurnWaterfall(record.turn, record.prompt.strip().splitlines()[0] if record.prompt.strip() else "")
    steps = []
    for step in record.steps:
        at = step.started - origin
        bar = Bar(f"step {step.step} · {step.model}", at, at)
        response = step.response
        if response is not None:
            bar.end = max(response.ts - origin, bar.start)
            bar.first_token = bar.start + response.ttft if response.ttft is not None else None
            bar.connect, bar.done = response.connect, True
            turn.cache_read += (response.usage.cache_read or 0) if response.usage else 0
            saved = pricer.saved_by_cache(response, step.provider, step.model) if pricer is not None else None
            if saved is not None:
                turn.cache_dollars = (turn.cache_dollars or Decimal(0)) + saved
        tools = []
        for call in sorted((c for c in step.calls.values() if c.started is not None), key=lambda c: c.started or 0.0):
            start = (call.started or 0.0) - origin
            tool = Bar(f"  {call.name}", start, start, kind="tool")
            if call.ended is not None:
                tool.end, tool.done = call.ended - origin, True
                tool.cut = "cancelled" if call.status == "cancelled" else ""
                turn.saved_prefetch += call.ahead
            tools.append(tool)
        turn.bars += [bar, *tools]
        steps.append(_Step(bar, tools))
    for hook in record.hooks:
        end = hook.ts - origin
        turn.bars.append(Bar(f"  hook {hook.hook_event}", end - hook.seconds, end, done=True, kind="hook"))
    turn.bars.sort(key=lambda bar: bar.start)
    wall = record.wall if record.wall is not None else max((bar.end for bar in turn.bars), default=0.0)
    if record.end:
        _cut_at_the_end(turn.bars, wall, record.end)
    _close(turn, steps, wall)
    return turn


def _cut_at_the_end(bars: list[Bar], wall: float, reason: str) -> None:
    """The turn ended (cancelled, failed, killed) with these bars unfinished: they stopped then, for that reason."""
    for bar in bars:
        if not bar.done:
            bar.end, bar.cut = max(wall, bar.start), reason


def _close(turn: TurnWaterfall, steps: list[_Step], wall: float) -> None:
    turn.wall = wall
    for step in steps:
        step.bar.critical = True
        if not step.tools:
            continue
        last = max(step.tools, key=lambda bar: bar.end)
        last.critical = last.end > step.bar.end
        busy = sum(bar.end - bar.start for bar in step.tools)
        span = max(bar.end for bar in step.tools) - min(bar.start for bar in step.tools)
        turn.saved_parallel += max(busy - span, 0.0)
        turn.saved_early += sum(max(min(bar.end, step.bar.end) - bar.start, 0.0) for bar in step.tools)


def prefill_cost(events: list[AgentEvent]) -> float | None:
    """Seconds of TTFT per uncached prompt token, fitted by least squares over the session's steps."""
    points = [
        (float(e.usage.uncached), e.ttft)
        for e in events
        if isinstance(e, ResponseFinished) and e.usage and e.usage.uncached is not None and e.ttft is not None
    ]
    if len(points) < 3:
        return None
    mean_x = sum(x for x, _ in points) / len(points)
    mean_y = sum(y for _, y in points) / len(points)
    spread = sum((x - mean_x) ** 2 for x, _ in points)
    if spread <= 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread
    return slope if slope > 0 else None


LABEL_WIDTH = 26


def _said(bar: Bar) -> str:
    """`0.42 s`, `0.42 s (connect 0.05 s)`, `0.42 s cancelled`, or `running` for a bar still open."""
    if not bar.done and not bar.cut:
        return "running"
    connect = f" (connect {bar.connect:.2f} s)" if bar.connect else ""
    return f"{bar.end - bar.start:.2f} s{connect}" + (f" {bar.cut}" if bar.cut else "")


def render(turn: TurnWaterfall, width: int, cost: float | None) -> Text:
    """The turn as rich text: a label and a bar per line, the critical path in bold, then what was saved."""
    from rich.text import Text

    scale = max(width - LABEL_WIDTH - 10, 10) / max(turn.wall, 1e-6)
    text = Text()
    text.append(f"turn {turn.turn} · {turn.prompt[:60]} · {turn.wall:.2f} s\n", "bold")
    for bar in turn.bars:
        text.append(f"{bar.label[: LABEL_WIDTH - 1]:<{LABEL_WIDTH}}", "bold" if bar.critical else "dim")
        text.append(" " * round(bar.start * scale))
        style = "bold" if bar.critical else ""
        if bar.kind == "model":
            split = bar.first_token if bar.first_token is not None else bar.end
            text.append("░" * max(round((split - bar.start) * scale), 1), f"yellow {style}")
            text.append("█" * round((bar.end - split) * scale), f"cyan {style}")
        else:
            color = "green" if bar.kind == "tool" else "magenta"
            text.append("▒" * max(round((bar.end - bar.start) * scale), 1), f"{color} {style}")
        text.append(f" {_said(bar)}\n", "dim")
    cache = (
        f"~{turn.cache_read * cost:.2f} s from the cache ({turn.cache_read:,} tokens read × "
        f"{cost * 1e6:.0f} µs a token, fitted over this session)"
        if cost is not None and turn.cache_read
        else "the cache: its prefill cost is not measurable from this session's steps"
        if turn.cache_read
        else "no cache reads"
    )
    if turn.cache_dollars is not None:
        cache += (
            f" · {money(turn.cache_dollars)} at the price table's rates"
            if turn.cache_dollars >= 0
            else (f" · {money(-turn.cache_dollars)} more than uncached: its writes cost more than its reads saved")
        )
    text.append(
        f"saved: {turn.saved_parallel:.2f} s by parallel tools · {turn.saved_early:.2f} s by early dispatch · "
        f"{turn.saved_prefetch:.2f} s by prefetch · {cache}\n",
        "dim",
    )
    text.append("░ to first token (queue + prefill)  █ decode  ▒ tool  ", "dim")
    if any(bar.kind == "hook" for bar in turn.bars):
        text.append("▒ hook  ", "magenta")
    text.append("bold: the critical path\n", "dim")
    return text
