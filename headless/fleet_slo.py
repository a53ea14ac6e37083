"""Goodput under SLOs for the bench's agents (`--slo ttft=2s,step=10s,job=60s`), what a job costs, and `--sweep`:
the ramp that climbs to the highest load whose every job meets every SLO.

A job is one agent's task, all its turns. It meets the SLOs when every turn answered, every request's first token
came within `ttft`, every request's answer within `step` (tools excluded: the server doesn't spend them), and its
turns took `job` at most, tools included. Goodput is the share of jobs that did (as `--trace` reports it), and
`good_jobs_per_s` those jobs over the level's wall time.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished

if TYPE_CHECKING:
    from hotloop.headless.bench import Level

SWEEP_CAP = 100_000  # agents: `--sweep` with one level given climbs until the SLOs fail, up to this
_LIMIT = re.compile(r"\s*(ttft|step|job)\s*=\s*([0-9]*\.?[0-9]+)\s*(ms|s|m)?\s*")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


@dataclass(frozen=True)
class Slo:
    ttft: float = 2.0
    step: float = 30.0
    job: float | None = None

    @classmethod
    def parse(cls, text: str) -> Slo:
        """`ttft=2s,step=10s,job=60s` (any of them, seconds unless `ms` or `m`); a ValueError saying what's wrong."""
        limits: dict[str, float] = {}
        for part in text.split(","):
            match = _LIMIT.fullmatch(part)
            if match is None:
                raise ValueError(f"{part.strip()!r} is not a limit: write ttft=2s,step=10s,job=60s")
            name, value, unit = match.groups()
            limits[name] = float(value) * _UNITS[unit]
        return cls(**limits)

    def figures(self) -> dict[str, float | None]:
        return {"ttft_s": self.ttft, "step_s": self.step, "job_s": self.job}


def met(events: list[AgentEvent], turns: int, slo: Slo) -> bool:
    """Whether one agent's job met every SLO."""
    done = [e for e in events if isinstance(e, TurnFinished)]
    if len(done) != turns or any(t.reason != "answer" for t in done):
        return False
    if slo.job is not None and sum(t.wall for t in done) > slo.job:
        return False
    steps = [e for e in events if isinstance(e, StepFinished)]
    return all(s.ttft is not None and s.ttft <= slo.ttft and s.model_time <= slo.step for s in steps)


def judged(level: Level, turns: list[int], slo: Slo, cost_per_hour: float | None) -> dict[str, Any]:
    """A level's goodput (`turns`: each agent's, in the order of its events), tokens per job and (with the server's
    `cost_per_hour`) dollars per job."""
    jobs = level.agents
    good = sum(met(events, asked, slo) for events, asked in zip(level.events, turns, strict=True))
    tokens = sum(
        (e.usage.prompt_total or 0) + (e.usage.output or 0)
        for events in level.events
        for e in events
        if isinstance(e, StepFinished) and e.usage is not None
    )
    hours = level.wall / 3600
    return {
        "slo": slo.figures(),
        "goodput": good / jobs if jobs else None,
        "good_jobs": good,
        "good_jobs_per_s": good / level.wall if level.wall else None,
        "tokens_per_job": tokens / jobs if jobs else None,
        "dollars_per_job": cost_per_hour * hours / jobs if cost_per_hour is not None and jobs else None,
    }


def next_load(tried: dict[int, bool], cap: int) -> int | None:
    """The sweep's next number of agents, from the loads tried and whether each met the SLOs: doubling while they
    hold, then halving the gap between the highest that held and the lowest that didn't, to a tenth of it."""
    held = max((n for n, ok in tried.items() if ok), default=0)
    failed = min((n for n, ok in tried.items() if not ok), default=None)
    if failed is None:
        following = min(held * 2, cap)
        return None if following in tried else following
    if failed - held <= max(1, held // 10):
        return None
    return (held + failed) // 2
