"""A pause's pings, scheduled: the part the app's keep-alive (`core/keepalive.py`) and the watch's
(`watch/keepalive.py`) share.

Each plans a pause with its own policy per key (a provider, a conversation), or at `[keepalive]`'s fixed interval,
then sends its pings at their offsets after the prefix's last use, none after one that failed; the next request ends
the pause, cancels the ping in flight and teaches the policy the pause's length. Here, in the agent layer beside the
policy, because core and watch may not import each other; the settings come in as a protocol (config is above).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from hotloop.agent.cache_lifetime import LIFETIME
from hotloop.agent.keepalive import KeepAlive, PingCosts
from hotloop.agent.pricing import Ttl


class PingSettings(Protocol):
    """What the scheduler reads of `[keepalive]` (config's `KeepaliveSettings`)."""

    @property
    def mode(self) -> str: ...

    def fixed_plan(self, lifetime: float) -> list[float]: ...

    def policy(self, costs: PingCosts, priced: bool) -> KeepAlive: ...


@dataclass
class Pause:
    """A pause going on: its adaptive policy (None at a fixed interval) and start, and the task sending its pings."""

    keep: KeepAlive | None
    start: float
    task: asyncio.Task[None] | None = None
    preempted: bool = False  # its ping in flight was cancelled by a request: said as cancelled

    def end(self, now: float | None) -> None:
        """The ping in flight cancelled, and the pause's length learned (`now`: a request came)."""
        if self.task is not None and not self.task.done():
            self.preempted = True
            self.task.cancel()
        if self.keep is not None and now is not None:
            self.keep.observe_pause(now - self.start)

    def taken(self) -> bool:
        """Whether the ping in flight was cancelled by a request (asked once)."""
        taken, self.preempted = self.preempted, False
        return taken


class PauseScheduler:
    """One policy per key, and each pause's pings in a task; `clock` and `wait` a test may hold."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.wait: Callable[[float], Awaitable[None]] = asyncio.sleep  # until a ping's time; a test steps it
        self._keeps: dict[str, KeepAlive] = {}

    def policy(self, key: str) -> KeepAlive | None:
        """`key`'s policy, once a pause of it was planned (mode "adaptive")."""
        return self._keeps.get(key)

    def plan(
        self, settings: PingSettings, key: str, ttl: Ttl, tokens: int, model: str, base_url: str, start: float
    ) -> tuple[Pause, list[float]]:
        """A pause of `key`'s prefix (`tokens` long, last used at `start`) and the offsets to ping at: the policy's,
        in dollars where the price is known (the daily cap applies there), else in input-token equivalents."""
        if settings.mode != "adaptive":
            return Pause(None, start), settings.fixed_plan(LIFETIME[ttl])
        priced = PingCosts.priced(tokens, ttl, model, base_url)
        costs = priced or PingCosts.anthropic(tokens, ttl)
        keep = self._keeps.get(key)
        if keep is None:
            keep = self._keeps[key] = settings.policy(costs, priced is not None)
        return Pause(keep, start), keep.plan(ttl, costs, at=time.time())

    def send(self, pause: Pause, offsets: list[float], ping: Callable[[], Awaitable[bool]]) -> None:
        """Ping at each offset while the pause lasts; a ping not answered is the last (the renewal is unknown: a
        later one could come after the prefix is gone)."""
        if offsets:
            pause.task = asyncio.create_task(self._pings(pause, offsets, ping))

    async def _pings(self, pause: Pause, offsets: list[float], ping: Callable[[], Awaitable[bool]]) -> None:
        for offset in offsets:
            await self.wait(max(pause.start + offset - self.clock(), 0.0))
            if not await ping():
                return
