"""One bench worker: a Ray actor whose asyncio loop runs its share of a level's closed-loop agents.

The class is plain Python (`fleet.py` makes it an actor), so it imports without Ray. It resolves nothing and reads
no key from the driver: it gets the driver's config and target, and its provider reads the key from the worker's
own environment. Times are its own clock's (`time.time()`); the driver maps them to its clock by the offset it
measured at start.
"""

from __future__ import annotations

import asyncio
import socket
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished
from hotloop.headless.bench import warm_up
from hotloop.headless.fleet_probe import LoopWatch

if TYPE_CHECKING:
    from hotloop.config import Config
    from hotloop.config.choice import Target
    from hotloop.core.runtime import Runtime
    from hotloop.headless.fleet_mix import Workload
    from hotloop.providers.base import Provider


@dataclass
class WorkerReport:
    """A worker's share of a level: its agents' events, each request's start and end on its clock, and what the
    client cost it (CPU, loop lateness)."""

    worker: int
    host: str
    agents: int
    events: list[list[AgentEvent]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    requests: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered), the worker's clock
    started: float = 0.0
    ended: float = 0.0
    ramp: float = 0.0  # from its first agent's start to its last's
    client: dict[str, Any] = field(default_factory=dict)


class Worker:
    """Runs levels of the bench's agents on its own loop, with one provider (one connection pool) for them all."""

    def __init__(self, index: int, config: Config, target: Target) -> None:
        self.index, self.config, self.target = index, config, target
        self.runtime: Runtime | None = None
        self.provider: Provider | None = None
        self.turns = self.steps = 0  # of the level running, for the driver's progress view

    async def clock(self) -> float:
        """The worker's time, for the driver's round-trip estimate of the offset between the two clocks."""
        return time.time()

    async def prepare(self) -> str:
        """Connected to the server before the first level, so no level counts the start-up; the worker's host."""
        from hotloop.core.runtime import Runtime

        if self.runtime is None:
            self.runtime = Runtime(self.config)
        if self.provider is None:
            self.provider = await self.runtime.connect(self.target)
            await asyncio.to_thread(warm_up)
        return socket.gethostname()

    async def run(self, workload: Workload, counts: list[int], first: int) -> WorkerReport:
        """`counts[n]` agents of each part at once, numbered from `first + 1` so their prompts differ from other
        workers'."""
        report = WorkerReport(self.index, await self.prepare(), sum(counts))
        assert self.runtime is not None and self.provider is not None  # prepared

        self.turns = self.steps = 0

        def take(event: AgentEvent) -> None:
            if isinstance(event, TurnFinished):
                self.turns += 1
            elif isinstance(event, StepFinished):
                self.steps += 1
                now = time.time()
                report.requests.append((now - event.model_time, now))

        watch = LoopWatch()
        watch.start()
        report.started = time.time()
        try:
            level = await workload.run(self.runtime, self.provider, counts, take, first=first)
        finally:
            report.ended = time.time()
            await watch.stop()
        report.events, report.errors, report.ramp = level.events, level.errors, level.ramp
        report.client = watch.figures(len(report.requests), f"worker {self.index + 1}")
        return report

    async def tally(self) -> tuple[int, int]:
        """The turns and steps its agents finished so far in the level running."""
        return self.turns, self.steps

    async def close(self) -> None:
        if self.runtime is not None:
            await self.runtime.aclose()
