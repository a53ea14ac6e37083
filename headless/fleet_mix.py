"""A bench workload: one task, or a weighted mix of tasks and recorded sessions (`--mix
builtin=3,scenario:my-task.json=1,trace:1733fb93=2`), run as one level's agents in this process or on a worker.

Each level's agents are split over the parts by weight (largest remainders), and each part's over the workers, so
a mix keeps its proportions on any number of workers. A trace part replays its session as `--trace` does
(`bench_trace.run_level`), with the calibration the driver measured once.
"""

from __future__ import annotations

import asyncio
import re
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hotloop.agent.events import StepFinished
from hotloop.headless.bench import Level, Scenario, run_level
from hotloop.providers.events import CUT_SHORT

if TYPE_CHECKING:
    from collections.abc import Callable

    from hotloop.agent.events import AgentEvent
    from hotloop.core.runtime import Runtime
    from hotloop.core.telemetry import Telemetry
    from hotloop.headless.bench_trace import Calibration, Trace
    from hotloop.providers.base import Provider

_PART = re.compile(r"\s*(builtin|scenario:(?P<file>[^=]+)|trace:(?P<session>[^=]+))\s*=\s*(?P<weight>[0-9]+)\s*")


@dataclass(frozen=True)
class Part:
    """One workload of a mix, by weight: a task (built-in or a scenario file) or a recorded session."""

    name: str
    weight: int
    scenario: Scenario | None = None
    trace: Trace | None = None

    @property
    def turns(self) -> int:
        return len(self.scenario.prompts) if self.scenario is not None else self.trace.turns if self.trace else 0


def parse_mix(text: str) -> list[tuple[str, str | None, int]]:
    """`builtin=3,scenario:FILE=1,trace:SESSION=2` as (kind, reference, weight); a ValueError saying what's wrong."""
    parts = []
    for given in text.split(","):
        match = _PART.fullmatch(given)
        if match is None:
            raise ValueError(f"{given.strip()!r} is not a workload: write builtin=3,scenario:FILE=1,trace:SESSION=2")
        weight = int(match["weight"])
        if weight < 1:
            raise ValueError(f"{given.strip()!r}: a weight is 1 or more")
        if match["file"] is not None:
            parts.append(("scenario", match["file"].strip(), weight))
        elif match["session"] is not None:
            parts.append(("trace", match["session"].strip(), weight))
        else:
            parts.append(("builtin", None, weight))
    return parts


def by_weight(weights: list[int], agents: int) -> list[int]:
    """`agents` split in proportion to `weights`, the remainders to the largest fractions (ties to the first)."""
    total = sum(weights)
    exact = [agents * w / total for w in weights]
    counts = [int(e) for e in exact]
    for n in sorted(range(len(weights)), key=lambda n: counts[n] - exact[n])[: agents - sum(counts)]:
        counts[n] += 1
    return counts


@dataclass(frozen=True)
class Workload:
    """What every level's agents do, and what a worker needs to do its share: the parts, the traces' calibration and
    time scale."""

    parts: list[Part]
    calibration: Calibration | None = None
    time_scale: float = 1.0

    @classmethod
    def of(cls, scenario_path: Path | None) -> Workload:
        scenario = Scenario.load(scenario_path)
        return cls([Part(scenario_path.name if scenario_path else "built-in research task", 1, scenario)])

    @property
    def name(self) -> str:
        if len(self.parts) == 1 and self.parts[0].scenario is not None:
            return self.parts[0].name
        return "mix " + ", ".join(f"{part.name} ×{part.weight}" for part in self.parts)

    def task(self) -> dict[str, Any]:
        """What an agent is asked for, as the result records it: a single task's, or a mix's longest turns."""
        if len(self.parts) == 1 and self.parts[0].scenario is not None:
            return self.parts[0].scenario.task()
        return {"turns": max(part.turns for part in self.parts), "steps": None, "tool_calls": None}

    def split(self, agents: int) -> list[int]:
        return by_weight([part.weight for part in self.parts], agents)

    def agents(self, counts: list[int]) -> list[Part]:
        """Each agent's part, in the order `run` lists the agents."""
        return [part for part, count in zip(self.parts, counts, strict=True) for _ in range(count)]

    async def run(
        self,
        runtime: Runtime,
        provider: Provider,
        counts: list[int],
        on_event: Callable[[AgentEvent], None],
        telemetry: Telemetry | None = None,
        first: int = 0,
    ) -> Level:
        """`counts[n]` agents of each part at once, as one level: agents in part order, numbered from `first + 1`."""
        from hotloop.headless import bench_trace

        async def part_level(part: Part, count: int, numbered: int) -> Level:
            if part.scenario is not None:
                return await run_level(runtime, provider, part.scenario, count, on_event, telemetry, numbered)
            assert part.trace is not None and self.calibration is not None  # a trace part is calibrated
            level, _ = await bench_trace.run_level(
                provider, [part.trace], count, self.calibration, self.time_scale, on_event
            )
            return level

        starts = [first + sum(counts[:n]) for n in range(len(counts))]
        levels = await asyncio.gather(
            *(part_level(p, c, s) for p, c, s in zip(self.parts, counts, starts, strict=True) if c)
        )
        merged = Level(sum(counts))
        for level in levels:
            merged.events.extend(level.events)
            merged.errors.extend(level.errors)
            merged.wall = max(merged.wall, level.wall)
            merged.ramp = max(merged.ramp, level.ramp)
        return merged


def cut_off(level: Level, parts: list[Part]) -> int:
    """Steps whose work was cut short: a task's that the output cap or the window ended, a trace's that got fewer
    tokens than recorded (a trace's answers end at their cap by design)."""
    cut = 0
    for events, part in zip(level.events, parts, strict=True):
        steps = [e for e in events if isinstance(e, StepFinished)]
        if part.trace is None:
            cut += sum(s.finish_reason in CUT_SHORT for s in steps)
        else:
            recorded = part.trace.steps
            cut += sum(
                s.usage is not None and (s.usage.output or 0) < t.output for s, t in zip(steps, recorded, strict=False)
            )
    return cut
