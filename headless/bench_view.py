"""What `hotloop bench` shows: live progress with a chart of latency against concurrency, the final
table, and two saved runs side by side. Rich renderables, drawn on a terminal or recorded as SVG."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished

NOT_REPORTED = "–"


def _seconds(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:.2f}"


def _rate(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:,.0f}"


def _number(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:,.2f}".rstrip("0").rstrip(".")


def _share(value: float | None) -> str:
    return NOT_REPORTED if value is None else f"{value:.0%}"


COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("agents", lambda f: str(f["agents"])),
    ("ttft p50", lambda f: _seconds(f["ttft_s"]["p50"])),
    ("p95", lambda f: _seconds(f["ttft_s"]["p95"])),
    ("p99", lambda f: _seconds(f["ttft_s"]["p99"])),
    ("step p95", lambda f: _seconds(f["step_s"]["p95"])),
    ("turn p50", lambda f: _seconds(f["turn_s"]["p50"])),
    ("p95", lambda f: _seconds(f["turn_s"]["p95"])),
    ("tok/s each", lambda f: _rate(f["output_tok_s_per_agent"])),
    ("tok/s all", lambda f: _rate(f["output_tok_s_total"])),
    ("cache hit", lambda f: _share(f["cache_hit"])),
    ("uncached", lambda f: f"{f['uncached_prefill_tokens']:,}"),
    ("errors", lambda f: str(f["errors"])),
)


def table(result: dict[str, Any]) -> Table:
    """One row per concurrency level."""
    title = f"hotloop bench · {result['provider']} · {result['model']} · {result['scenario']}"
    grid = Table(
        title=title, title_justify="left", header_style="bold", caption="seconds; uncached: prompt tokens prefilled"
    )
    for name, _ in COLUMNS:
        grid.add_column(name, justify="right", no_wrap=True)
    for figures in result["levels"]:
        grid.add_row(*(cell(figures) for _, cell in COLUMNS))
    return grid


def chart(levels: list[dict[str, Any]], width: int = 72, height: int = 14) -> Text:
    """TTFT p95 and turn p95 against the number of agents, in braille (plotext)."""
    import plotext

    agents = [level["agents"] for level in levels]
    plotext.clear_figure()
    plotext.plotsize(width, height)
    plotext.theme("clear")
    for key, label in (("ttft_s", "ttft p95"), ("turn_s", "turn p95")):
        values = [level[key]["p95"] for level in levels]
        if all(v is not None for v in values):
            plotext.plot(agents, values, label=label, marker="braille")
    plotext.xlabel("agents at once")
    plotext.ylabel("seconds")
    plotext.xticks(agents)
    return Text.from_ansi(plotext.build())


class Progress:
    """The live view: where the ramp is, and the chart of the levels done."""

    def __init__(self, ramp: list[int], turns_per_agent: int) -> None:
        self.ramp, self.turns_per_agent = ramp, turns_per_agent
        self.levels: list[dict[str, Any]] = []
        self.agents = 0
        self.turns = self.steps = 0
        self.started = time.perf_counter()

    def start(self, agents: int) -> None:
        self.agents, self.turns, self.steps, self.started = agents, 0, 0, time.perf_counter()

    def take(self, event: AgentEvent) -> None:
        if isinstance(event, StepFinished):
            self.steps += 1
        elif isinstance(event, TurnFinished):
            self.turns += 1

    def __rich__(self) -> RenderableType:
        level = len(self.levels) + 1
        line = Text(
            f"level {min(level, len(self.ramp))}/{len(self.ramp)} · {self.agents} agents · "
            f"turns {self.turns}/{self.agents * self.turns_per_agent} · steps {self.steps} · "
            f"{time.perf_counter() - self.started:.1f} s",
            "bold",
        )
        return Group(line, chart(self.levels)) if len(self.levels) >= 2 else line


def comparison(a: dict[str, Any], b: dict[str, Any]) -> Table:
    """Two saved runs, level by level: A, B and B's change."""
    grid = Table(
        title=f"A: {a['provider']} · {a['model']}   B: {b['provider']} · {b['model']}",
        title_justify="left",
        header_style="bold",
    )
    for name in ("agents", "figure", "A", "B", "B vs A"):
        grid.add_column(name, justify="right")
    by_agents = {level["agents"]: level for level in b["levels"]}
    figures: tuple[tuple[str, Callable[[dict[str, Any]], Any]], ...] = (
        ("ttft p95 s", lambda f: f["ttft_s"]["p95"]),
        ("turn p95 s", lambda f: f["turn_s"]["p95"]),
        ("tok/s total", lambda f: f["output_tok_s_total"]),
        ("cache hit", lambda f: f["cache_hit"]),
        ("uncached prefill", lambda f: f["uncached_prefill_tokens"]),
        ("errors", lambda f: f["errors"]),
    )
    for level in a["levels"]:
        other = by_agents.get(level["agents"])
        if other is None:
            continue
        for n, (name, value) in enumerate(figures):
            before, after = value(level), value(other)
            change = NOT_REPORTED
            if isinstance(before, int | float) and isinstance(after, int | float) and before:
                change = f"{(after - before) / before:+.0%}"
            shown = _share if name == "cache hit" else _number
            grid.add_row(str(level["agents"]) if n == 0 else "", name, shown(before), shown(after), change)
    return grid
