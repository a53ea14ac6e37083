"""Where a turn's time went, from its logged events: one bar per model request and per tool call.

A model bar has two parts: until the first token (the server's queue and the prompt's
prefill, which a client cannot tell apart) and the decode after it; a step cancelled mid-stream
draws both as far as they got (its `StepFinished` carries the response's times). A call that
waited for the user has a bar of its own, from the question to the answer. The critical path is
each step's request, then the tool that finished last, if it outlasted the response. The
figures say what the latency techniques saved: parallel tools (the sum of tool time minus
the tool phases' wall time), early dispatch (tool time that ran while the model was still
writing), and the cache (tokens read from it × the prefill cost per uncached token, fitted
over this session's own steps; in dollars, each step priced against its prompt billed whole as
uncached input). Where the cache bills writes by lifetime (Anthropic), one line prices the
session with 5-minute and with 1-hour writes (`lifetime_line`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import TYPE_CHECKING

from hotloop.agent.cache_lifetime import TTL_NAMES, CacheRhythm, compare_lifetimes, input_price
from hotloop.agent.events import AgentEvent, ApprovalAsked, ApprovalDecided, ResponseFinished, TurnStarted
from hotloop.agent.figures import short_model
from hotloop.agent.pricing import StepPricer, money
from hotloop.sessions.projection import TurnRecord, project
from hotloop.sessions.titles import headline

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
    kind: str = "model"  # or "tool", "hook", "approval" (a call waiting for the user's answer)
    outcome: str = ""  # an approval's answer: `allowed` or `denied`


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
    waits = _approval_waits(events)
    return [_turn(record, pricer, waits.get(record.turn, [])) for record in project(events).turns]


@dataclass
class _Wait:
    """A call's question to the user: asked at `asked`, answered at `answered` (None: still waiting)."""

    name: str
    asked: float
    answered: float | None = None
    outcome: str = ""


def _approval_waits(events: list[AgentEvent]) -> dict[int, list[_Wait]]:
    """Each turn's questions to the user, by turn number (the projection keeps a call's decision, not its times)."""
    waits: dict[int, list[_Wait]] = {}
    open_: dict[str, _Wait] = {}
    turn = 0
    for event in events:
        if isinstance(event, TurnStarted):
            turn, open_ = event.turn, {}
        elif isinstance(event, ApprovalAsked):
            open_[event.call_id] = wait = _Wait(event.name, event.ts)
            waits.setdefault(turn, []).append(wait)
        elif isinstance(event, ApprovalDecided) and event.call_id in open_:
            wait = open_.pop(event.call_id)
            wait.answered, wait.outcome = event.ts, "allowed" if event.allowed else "denied"
    return waits


def _turn(record: TurnRecord, pricer: StepPricer | None, waits: list[_Wait]) -> TurnWaterfall:
    # A prompt's hooks run before its turn starts: the axis begins with them.
    origin = min([record.started, *(hook.ts - hook.seconds for hook in record.hooks)])
    turn = TurnWaterfall(record.turn, headline(record.prompt))
    steps = []
    for step in record.steps:
        at = step.started - origin
        bar = Bar(f"step {step.step} · {short_model(step.model)}", at, at)
        response = step.response or step.finished
        if step.response is not None:
            bar.end, bar.connect = max(step.response.ts - origin, at), step.response.connect
        elif step.finished is not None:
            # Cancelled mid-stream: no response, but the step's end has its times as far as it got.
            bar.end, bar.cut = at + step.finished.model_time, step.finished.cut
        if response is not None:
            bar.first_token = min(at + response.ttft, bar.end) if response.ttft is not None else None
            bar.done = True
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
    for wait in waits:
        asked, answered = wait.asked - origin, (wait.answered or wait.asked) - origin
        done = wait.answered is not None
        turn.bars.append(Bar(f"  ⏸ {wait.name}", asked, answered, done=done, kind="approval", outcome=wait.outcome))
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
# What each bar is drawn with, and its colour; the legend names those the turn has.
MARKS = {"tool": ("▒", "green"), "hook": ("▒", "magenta"), "approval": ("▓", "blue")}
LEGEND = {"tool": "tool", "hook": "hook", "approval": "waiting for your answer"}


def _said(bar: Bar) -> str:
    """`0.42 s`, `0.42 s (connect 0.05 s)`, `0.42 s cancelled`, `3.10 s allowed`, or `running` for one open."""
    if not bar.done and not bar.cut:
        return "waiting" if bar.kind == "approval" else "running"
    connect = f" (connect {bar.connect:.2f} s)" if bar.connect else ""
    said = f"{bar.end - bar.start:.2f} s{connect}" + (f" {bar.cut}" if bar.cut else "")
    return f"{said} {bar.outcome}" if bar.outcome else said


def render(turn: TurnWaterfall, width: int, cost: float | None) -> Text:
    """The turn as rich text: a label and a bar per line, the critical path in bold, then what was saved.

    Every line fits `width`: the bars are scaled to leave room for the longest figure after one.
    """
    from rich.text import Text

    said = [_said(bar) for bar in turn.bars]
    room = max(width - LABEL_WIDTH - max((len(figure) + 1 for figure in said), default=0), 10)
    scale = room / max(turn.wall, 1e-6)
    text = Text()
    heading = f" · {turn.wall:.2f} s"
    prompt = turn.prompt[: max(min(60, width - len(f"turn {turn.turn} · {heading}")), 1)]
    text.append(f"turn {turn.turn} · {prompt}{heading}\n", "bold")
    for bar, figure in zip(turn.bars, said, strict=True):
        text.append(f"{bar.label[: LABEL_WIDTH - 1]:<{LABEL_WIDTH}}", "bold" if bar.critical else "dim")
        start = min(round(bar.start * scale), room - 1)
        text.append(" " * start)
        style = "bold" if bar.critical else ""
        if bar.kind == "model":
            split = bar.first_token if bar.first_token is not None else bar.end
            waited = min(max(round((split - bar.start) * scale), 1), room - start)
            text.append("░" * waited, f"yellow {style}")
            text.append("█" * min(round((bar.end - split) * scale), room - start - waited), f"cyan {style}")
        else:
            mark, color = MARKS[bar.kind]
            text.append(mark * min(max(round((bar.end - bar.start) * scale), 1), room - start), f"{color} {style}")
        text.append(f" {figure}\n", "dim")
    saved = [
        f"saved: {turn.saved_parallel:.2f} s by parallel tools",
        f"{turn.saved_early:.2f} s by early dispatch",
        f"{turn.saved_prefetch:.2f} s by prefetch",
        *_cache_saved(turn, cost),
    ]
    text.append_text(_flowed([Text(piece) for piece in saved], " · ", width, "dim"))
    kinds = {bar.kind for bar in turn.bars}
    legend = [
        Text.assemble(("░", "yellow"), " to first token (queue + prefill)"),
        Text.assemble(("█", "cyan"), " decode"),
    ]
    for kind, (mark, color) in MARKS.items():
        if kind in kinds or kind == "tool":
            legend.append(Text.assemble((mark, color), f" {LEGEND[kind]}"))
    legend.append(Text("bold: the critical path"))
    text.append_text(_flowed(legend, "  ", width, "dim"))
    return text


def lifetime_line(events: list[AgentEvent], pricer: StepPricer | None = None) -> str | None:
    """On a cache that bills its writes by lifetime (Anthropic's): the session priced both ways; None elsewhere."""
    rhythm = CacheRhythm()
    for event in events:
        rhythm.observe(event)
    provider, model = rhythm.using
    compared = compare_lifetimes(rhythm, input_price(model, pricer.servers.get(provider, "") if pricer else ""))
    return None if compared is None else f"cache lifetime: written {TTL_NAMES[rhythm.wrote]} · {compared}"


def _cache_saved(turn: TurnWaterfall, cost: float | None) -> list[str]:
    """What the cache saved, in pieces a line may break between."""
    if not turn.cache_read:
        pieces = ["no cache reads"]
    elif cost is None:
        pieces = ["the cache's prefill cost: not measurable from this session's steps"]
    else:
        pieces = [
            f"~{turn.cache_read * cost:.2f} s from the cache",
            f"{turn.cache_read:,} tokens read × {cost * 1e6:.0f} µs a token, fitted over this session",
        ]
    if turn.cache_dollars is None:
        return pieces
    if turn.cache_dollars >= 0:
        return [*pieces, f"{money(turn.cache_dollars)} at the price table's rates"]
    return [*pieces, f"{money(-turn.cache_dollars)} more than uncached: its writes cost more than reads saved"]


def _flowed(pieces: list[Text], separator: str, width: int, style: str = "") -> Text:
    """`pieces` joined by `separator` in lines of at most `width`, a piece never split: a line that goes on starts
    with the separator, so it reads as going on."""
    from rich.text import Text

    flowed, line = Text(style=style), 0
    for n, piece in enumerate(pieces):
        if n and line + len(separator) + len(piece) > width:
            flowed.append("\n")
            line = 0
        if n:
            flowed.append(separator)
            line += len(separator)
        flowed.append_text(piece)
        line += len(piece)
    flowed.append("\n")
    return flowed
