"""What `hotloop bench` shows: live progress with a chart of latency against concurrency, the final
table, and two saved runs side by side. Rich renderables, drawn on a terminal or recorded as SVG."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from rich import box
from rich.console import Console, ConsoleOptions, Group, RenderResult
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished
from hotloop.agent.figures import counted, rate, short_model
from hotloop.agent.text import inert

NO_FIGURE = "–"


def _seconds(value: float | None) -> str:
    """Four characters or so whatever the load: `0.13`, `12.5`, `261`."""
    if value is None:
        return NO_FIGURE
    return f"{value:.2f}" if value < 10 else f"{value:.1f}" if value < 100 else f"{value:,.0f}"


def _rate(value: float | None) -> str:
    return NO_FIGURE if value is None else rate(value)


def _number(value: float | None) -> str:
    return NO_FIGURE if value is None else f"{value:,.2f}".rstrip("0").rstrip(".")


def _share(value: float | None) -> str:
    return NO_FIGURE if value is None else f"{value:.0%}"


COLUMNS: tuple[tuple[str, Callable[[dict[str, Any]], str]], ...] = (
    ("\nagents", lambda f: str(f["agents"])),
    ("ttft\np50", lambda f: _seconds(f["ttft_s"]["p50"])),
    ("ttft\np95", lambda f: _seconds(f["ttft_s"]["p95"])),
    ("ttft\np99", lambda f: _seconds(f["ttft_s"]["p99"])),
    ("step\np95", lambda f: _seconds(f["step_s"]["p95"])),
    ("turn\np50", lambda f: _seconds(f["turn_s"]["p50"])),
    ("turn\np95", lambda f: _seconds(f["turn_s"]["p95"])),
    ("decode\neach", lambda f: _rate(f["output_tok_s_per_agent"])),  # tok/s while decoding: TTFT excluded
    ("tok/s\nall", lambda f: _rate(f["output_tok_s_total"])),
    ("cache\nhit", lambda f: _share(f["cache_hit"])),
    ("uncached\nprefill", lambda f: f"{f['uncached_prefill_tokens']:,}"),
)


def table(result: dict[str, Any]) -> Group:
    """A heading, then a row per concurrency level in 80 columns; the caption says whether anything is listed below
    it (`findings`). The heading is a line of its own, as wide as the terminal: a server's model name can be long."""
    heading = f"hotloop bench · {result['provider']} · {short_model(result['model'])} · {result['scenario']}"
    task = result["task"]
    if task["steps"] is not None:
        heading += f" ({counted(task['steps'], 'step')}, {counted(task['tool_calls'], 'call')})"
    caption = "seconds · output tok/s · uncached: tokens prefilled"
    said = _said_below(result)
    grid = Table(
        header_style="bold",
        caption=f"{caption} · {', '.join(said)}, below" if said else f"{caption} · no errors",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        show_edge=False,
    )
    for name, _ in COLUMNS:
        grid.add_column(name, justify="right", no_wrap=True)
    for figures in result["levels"]:
        grid.add_row(*(cell(figures) for _, cell in COLUMNS))
    return Group(Text(inert(heading), style="italic"), grid)


def _said_below(result: dict[str, Any]) -> list[str]:
    """What `findings` lists, in a few words each, for the caption."""
    levels = result["levels"]
    said = []
    if errors := sum(level["errors"] for level in levels):
        said.append(counted(errors, "error"))
    if cut := sum(level["cut_off"] for level in levels):
        said.append(f"{counted(cut, 'step')} cut off")
    if any(_short(result["task"], level) for level in levels):
        said.append("fewer steps than the task")
    return said


def _short(task: dict[str, Any], level: dict[str, Any]) -> str | None:
    """How a level's agents did less than the task asks, if they did, in a line; a level with errors has them
    listed instead."""
    per_turn, calls = level["steps_per_turn"], sum(level["tool_calls"].values())
    if task["steps"] is None or per_turn is None or level["errors"]:
        return None
    wanted, wanted_calls = task["steps"] / task["turns"], task["tool_calls"] * level["agents"]
    if per_turn >= wanted - 1e-9 and calls >= wanted_calls:
        return None
    return (
        f"{per_turn:.1f} steps a turn where the task takes {wanted:.1f}, {calls:,} of {wanted_calls:,} tool calls: "
        "the model answered without the calls its prompts ask for"
    )


def findings(result: dict[str, Any]) -> Text:
    """Below the table, each level's errors (a line per distinct message: `at 2 agents, 4 errors: … (×4)`), steps
    cut off by `length`, and a model that did less than the task asks."""
    lines = Text(style="red")
    for level in result["levels"]:
        at = f"at {counted(level['agents'], 'agent')}"
        if level["errors"]:
            lines.append(f"{at}, {counted(level['errors'], 'error')}:\n", "bold")
            for message, times in level["error_messages"].items():
                lines.append(f"  {inert(message)} (×{times})\n")
        if cut := level["cut_off"]:
            lines.append(
                f"{at}, {cut:,} of {counted(level['steps'], 'step')} ended by `length` (the output cap or the "
                "context window): their answers are cut short\n"
            )
        if (short := _short(result["task"], level)) is not None:
            lines.append(f"{at}, {short}\n")
    return lines


def trace_findings(result: dict[str, Any]) -> Text:
    """Below a trace run's table: `findings`, then per level its goodput against the SLOs, where the agents'
    time went, the cache hit beside the recorded one, and how close the requests came to the recorded ones."""
    lines = findings(result)
    for level in result["levels"]:
        slo, waited = level["slo"], level["waiting_s"]
        total = sum(waited.values())
        spent = " · ".join(
            f"{name} {_seconds(s)} s ({_share(s / total if total else None)})" for name, s in waited.items()
        )
        error = level["prompt_error"]
        lines.append_text(
            Text(
                f"at {counted(level['agents'], 'agent')}: goodput {level['good_sessions']}/{level['agents']} "
                f"({_share(level['goodput'])}: TTFT ≤ {slo['ttft_s']:g} s, answer ≤ {slo['step_s']:g} s, every step)\n"
                f"  waiting: {spent}\n"
                f"  cache hit {_share(level['cache_hit'])} (recorded {_share(level['original_cache_hit'])}) · "
                f"requests {level['steps']:,} of {level['recorded_steps']:,} · prompts within "
                f"{NO_FIGURE if error is None else f'{error:.2%}'}\n"
            )
        )
    return lines


def _ms(value: float | None) -> str:
    return NO_FIGURE if value is None else f"{value:,.2f} ms" if value < 10 else f"{value:,.0f} ms"


def fleet_findings(result: dict[str, Any]) -> Text:
    """Below a run's table: per level its goodput against the SLOs, good jobs a second, tokens and dollars a job,
    what the client added (CPU a request, its loop's lateness, its first token beside the server's) and a line for
    each client that lagged; then the sweep's answer."""
    lines = Text()
    judged = [level for level in result["levels"] if "good_jobs" in level]
    if judged:
        slo = judged[0]["slo"]
        limits = f"TTFT ≤ {slo['ttft_s']:g} s, answer ≤ {slo['step_s']:g} s"
        lines.append(f"goodput: jobs whose every request met {limits}")
        lines.append(f", and took ≤ {slo['job_s']:g} s\n" if slo["job_s"] is not None else "\n")
    for level in judged:
        client, per_job, dollars = level["client"], level["tokens_per_job"], level["dollars_per_job"]
        lines.append(
            f"at {counted(level['agents'], 'agent')}: goodput {level['good_jobs']}/{level['agents']} "
            f"({_share(level['goodput'])}) · {_number(level['good_jobs_per_s'])} good jobs/s · "
            f"{NO_FIGURE if per_job is None else f'{per_job:,.0f}'} tokens a job"
            + ("" if dollars is None else f" · ${dollars:.4f} a job")
            + "\n"
        )
        gap = client["ttft_gap_ms"]
        lines.append(
            f"  client: {_ms(client['cpu_ms_per_request'])} CPU a request · loop {_ms(client['loop_lag_p99_ms'])} "
            "late at p99 · " + ("no server TTFT" if gap is None else f"TTFT {gap:+,.1f} ms on the server's") + "\n"
        )
        for warning in client["warnings"]:
            lines.append(f"  {inert(warning)}\n", "red")
    if (sweep := result.get("sweep")) is not None:
        lines.append(f"highest load meeting every SLO: {counted(sweep['highest_meeting_slo'], 'agent')}\n", "bold")
    return lines


def workers_table(result: dict[str, Any]) -> Table:
    """A row per worker of each level: where it ran, its agents and requests, their TTFT, what the client cost it,
    and its clock against the driver's."""
    grid = Table(
        header_style="bold",
        caption=f"Ray workers on {result['ray']['address']}, started in {result['ray']['startup_s']:.1f} s · "
        "clock: offset ± half the round trip",
        caption_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 0, 0, 1),
        pad_edge=False,
        show_edge=False,
    )
    for name in (
        "\nagents",
        "\nworker",
        "\nhost",
        "its\nagents",
        "\nrequests",
        "ttft\np95",
        "cpu a\nrequest",
        "loop\nlate p99",
        "\nclock",
    ):
        grid.add_column(
            name,
            justify="left" if name == "\nhost" else "right",
            no_wrap=True,
            max_width=16 if name == "\nhost" else None,
            overflow="ellipsis",
        )
    for level in result["levels"]:
        for n, row in enumerate(level.get("workers", [])):
            grid.add_row(
                str(level["agents"]) if n == 0 else "",
                str(row["worker"]),
                inert(row["host"]),
                str(row["agents"]),
                f"{row['requests']:,}",
                _seconds(row["ttft_s"]["p95"]),
                _ms(row["cpu_ms_per_request"]),
                _ms(row["loop_lag_p99_ms"]),
                f"{row['clock_offset_ms']:+,.1f} ±{row['clock_round_trip_ms'] / 2:,.1f} ms",
            )
    return grid


def chart(levels: list[dict[str, Any]], width: int = 72, height: int = 14) -> Text:
    """Turn p95 (left axis) and TTFT p95 (right axis) against the number of agents, in braille (plotext).

    Each has its axis: a TTFT is a tenth of a turn, and on the turn's scale it would lie flat on zero.
    """
    import plotext

    agents = [level["agents"] for level in levels]
    plotext.clear_figure()
    plotext.plotsize(width, height)
    plotext.theme("clear")
    # A ramp multiplies (1, 4, 16, 64): on a log axis its levels stand evenly apart.
    plotext.xscale("log")
    for key, label, color, side in (
        ("turn_s", "turn p95 s", "magenta", "left"),
        ("ttft_s", "ttft p95 s (right)", "cyan", "right"),
    ):
        values = [level[key]["p95"] for level in levels]
        if all(v is not None for v in values):
            plotext.plot(agents, values, label=label, marker="braille", color=color, yside=side)
            # From zero, so a rise reads as the share it grew by; headroom above keeps the legend clear.
            plotext.ylim(0, max(values) * 1.3 or 1, yside=side)
    plotext.xlabel("agents at once")
    plotext.xticks(agents, [str(n) for n in agents])
    return Text.from_ansi(plotext.build())


class Progress:
    """The live view: where the ramp is, and the table and chart of the levels done."""

    def __init__(self, ramp: list[int], turns_per_agent: int, result: dict[str, Any]) -> None:
        self.ramp, self.turns_per_agent, self.result = ramp, turns_per_agent, result
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

    def tally(self, turns: int, steps: int) -> None:
        """The level's turns and steps so far, as workers count them."""
        self.turns, self.steps = turns, steps

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        levels = self.result["levels"]
        turns = self.agents * self.turns_per_agent
        line = Table.grid(padding=(0, 1))
        line.add_row(
            ProgressBar(total=turns or 1, completed=self.turns, width=24),
            Text(
                f"level {min(len(levels) + 1, len(self.ramp))}/{len(self.ramp)} · {counted(self.agents, 'agent')} · "
                f"turns {self.turns}/{turns} · steps {self.steps} · {time.perf_counter() - self.started:.1f} s",
                "bold",
            ),
        )
        yield line
        if levels:
            yield table(self.result)
            if _said_below(self.result):
                yield findings(self.result)
        if len(levels) >= 2:
            # The chart takes what the terminal has left, so the live view never scrolls.
            room = (options.height or console.height) - 7 - len(levels)
            yield chart(levels, height=max(8, min(14, room)))


def comparison(a: dict[str, Any], b: dict[str, Any]) -> Table:
    """Two saved runs, level by level: A, B and B's change; a `ValueError` when they share no level."""
    if not {level["agents"] for level in a["levels"]} & {level["agents"] for level in b["levels"]}:
        ran = [", ".join(str(level["agents"]) for level in run["levels"]) or "none" for run in (a, b)]
        raise ValueError(f"A and B ran no level of agents in common (A: {ran[0]}; B: {ran[1]})")
    runs = "\n".join(f"{name}: {run['provider']} · {short_model(run['model'])}" for name, run in (("A", a), ("B", b)))
    grid = Table(title=inert(runs), title_justify="left", header_style="bold")
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
        ("goodput", lambda f: f.get("goodput")),
        ("good jobs/s", lambda f: f.get("good_jobs_per_s")),
        ("client cpu ms/req", lambda f: f.get("client", {}).get("cpu_ms_per_request")),
    )
    for level in a["levels"]:
        other = by_agents.get(level["agents"])
        if other is None:
            continue
        # These only where a run measured them: runs saved before they were have none.
        shown = [(n, v) for n, v in figures if n not in MEASURED_SINCE or v(level) is not None or v(other) is not None]
        for n, (name, value) in enumerate(shown):
            before, after = value(level), value(other)
            grid.add_row(
                str(level["agents"]) if n == 0 else "",
                name,
                *(_share(v) if name in SHARES else _number(v) for v in (before, after)),
                _change(before, after, in_points=name in SHARES),
            )
    return grid


SHARES = ("cache hit", "goodput")  # figures shown as shares, and compared in points
MEASURED_SINCE = ("goodput", "good jobs/s", "client cpu ms/req")


def _change(before: object, after: object, in_points: bool) -> str:
    """B against A: `+12%`, `±0%`; a rate's change in points (`+3 pts`), since a share of a share misleads;
    ten times or more as a factor (`×12`); from zero, the difference (`+4` errors)."""
    if not isinstance(before, int | float) or not isinstance(after, int | float):
        return NO_FIGURE
    if in_points:
        points = round((after - before) * 100)
        return f"{points:+d} pts" if points else "±0 pts"
    if not before:  # no share of nothing: the difference itself
        return f"{after:+,.0f}" if after else "±0"
    if after / before >= 10:  # `×187` reads where `+18,600%` doesn't
        return f"×{after / before:,.0f}"
    share = round((after - before) / before * 100)
    return f"{share:+d}%" if share else "±0%"
