"""Admission to the simulated engine: at most `max_running` requests run, the rest wait.

vLLM's scheduler, reduced to what a client can observe: with `--max-num-seqs` reached, a new
request waits. Under the `fcfs` policy waiting requests start in arrival order; under
`priority`, by their `priority` value (lower first), then arrival. A running request is
never preempted for a slot: vLLM preempts only when KV-cache memory runs out.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

from hotloop.sim.defaults import POLICIES


class Admission:
    def __init__(
        self, max_running: int | None, policy: str = "fcfs", on_change: Callable[[str, int], None] | None = None
    ) -> None:
        if policy not in POLICIES:
            raise ValueError(f"scheduling policy must be one of {', '.join(POLICIES)} (got {policy!r})")
        self.max_running = max_running
        self.policy = policy
        self.running = 0
        self._waiting: list[tuple[int, int, str, asyncio.Future[None]]] = []
        self._waiting_by_model: Counter[str] = Counter()
        self._arrivals = itertools.count()
        self._on_change = on_change or (lambda model, waiting: None)

    @property
    def waiting(self) -> int:
        return len(self._waiting)

    def waiting_for(self, model: str) -> int:
        """How many requests for `model` wait for a slot."""
        return self._waiting_by_model[model]

    @asynccontextmanager
    async def slot(self, model: str, priority: int = 0) -> AsyncIterator[None]:
        """Held for the whole request, prefill and decode; waits while the engine is full."""
        if self.max_running is None or (self.running < self.max_running and not self._waiting):
            self.running += 1
        else:
            await self._wait(model, priority)
        try:
            yield
        finally:
            self.running -= 1
            self._admit_next()

    async def _wait(self, model: str, priority: int) -> None:
        ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        rank = priority if self.policy == "priority" else 0
        entry = (rank, next(self._arrivals), model, ready)
        heapq.heappush(self._waiting, entry)
        self._count(model, +1)
        try:
            await ready
        except asyncio.CancelledError:
            if ready.done() and not ready.cancelled():
                self.running -= 1  # admitted just as the client left: give the slot on
                self._admit_next()
            else:
                self._waiting.remove(entry)
                heapq.heapify(self._waiting)
                self._count(model, -1)
            raise

    def _admit_next(self) -> None:
        while self._waiting and (self.max_running is None or self.running < self.max_running):
            _, _, model, ready = heapq.heappop(self._waiting)
            self._count(model, -1)
            if not ready.done():
                self.running += 1
                ready.set_result(None)

    def _count(self, model: str, change: int) -> None:
        self._waiting_by_model[model] += change
        self._on_change(model, self._waiting_by_model[model])
