"""The keep-alive, live: pings that keep a timed prompt cache warm through a pause, when `[keepalive]` is on.

At a pause's start (a turn's answer given) the policy (`agent/keepalive.py`) plans the offsets, after the prefix's
last use, at which to ping if the pause still lasts; each ping is the request the pre-warmer builds (the prefix the
next step sends, a one-token answer) sent as a side request (`SideRequest`, kind "keep-alive": counted, priced,
shown). Each lands before the prefix it renews expires, and none follows one that failed: never after the prefix is
gone. A turn that starts cancels the ping in flight, as it does a pre-warm, and ends the pause the policy learns.
Only a cache that forgets a prefix after a known time (Anthropic's, the API's and the simulator's) is pinged.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

import msgspec

from hotloop.agent.cache_lifetime import LIFETIME
from hotloop.agent.events import AgentEvent, StepStarted
from hotloop.agent.keepalive import KeepAlive, PingCosts
from hotloop.config import Config, KeepaliveSettings, Target
from hotloop.core.prewarm import CHARS_PER_TOKEN, prewarm_request, side_request

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.runtime import Runtime
    from hotloop.providers.conversation import ChatRequest


class Pinger:
    """A session's keep-alive: one policy per provider, and the pause's pings in one task."""

    def __init__(
        self, config: Callable[[], Config], runtime: Callable[[], Runtime | None], emit: Callable[[AgentEvent], None]
    ) -> None:
        self._config = config
        self._runtime = runtime
        self.emit = emit
        self.clock: Callable[[], float] = time.monotonic
        self.wait: Callable[[float], Awaitable[None]] = asyncio.sleep  # until a ping's time; a test steps it
        self.task: asyncio.Task[None] | None = None
        self._keeps: dict[str, KeepAlive] = {}
        self._used_at: float | None = None  # the last request's start: the prefix's last use
        self._pause: tuple[KeepAlive, float] | None = None  # the pause going on: its policy and its start
        self._preempted = False

    def policy(self, provider: str) -> KeepAlive | None:
        """`provider`'s policy, once a pause on it was planned (`[keepalive] mode = "adaptive"`)."""
        return self._keeps.get(provider)

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, StepStarted):
            self._used_at = self.clock()

    def turn_started(self) -> None:
        """A request goes out: the ping in flight is cancelled, and the pause ends."""
        if self.task is not None and not self.task.done():
            self._preempted = True
            self.task.cancel()
        if self._pause is not None:
            keep, start = self._pause
            keep.observe_pause(self.clock() - start)
            self._pause = None

    def after_turn(self, agent: Agent) -> None:
        """The pause starts: plan its pings, and send them while it lasts."""
        config, runtime, provider = self._config(), self._runtime(), agent.provider
        settings = config.providers.get(provider.name)
        wanted = config.keepalive
        if wanted.mode == "off" or settings is None or runtime is None or self._used_at is None:
            return
        if not provider.protocol.traits.cache.lifetimes or (
            settings.thinking_budget and provider.protocol.traits.thinking_budget
        ):
            return  # no known lifetime to ping within; a thinking budget makes a one-token answer impossible
        request = prewarm_request(agent)
        tokens = len(msgspec.json.encode(request)) // CHARS_PER_TOKEN
        minimum = settings.cache_min_tokens or (config.sim.cache_min_tokens if settings.is_simulator else 1024)
        if tokens < minimum:
            return  # nothing is cached to keep
        ttl = provider.cache_ttl
        life = LIFETIME[ttl]
        if wanted.mode == "adaptive":
            priced = PingCosts.priced(tokens, ttl, provider.model, provider.base_url)
            costs = priced or PingCosts.anthropic(tokens, ttl)
            keep = self._keep(provider.name, wanted, costs, priced is not None)
            offsets = keep.plan(ttl, costs, at=time.time())
            self._pause = (keep, self._used_at)
        else:
            offsets = wanted.fixed_plan(life)
        if offsets:
            self._preempted = False
            target = Target(settings, provider.model)
            self.task = asyncio.create_task(self._pings(runtime, target, request, offsets, self._used_at))

    def _keep(self, name: str, wanted: KeepaliveSettings, costs: PingCosts, priced: bool) -> KeepAlive:
        """The provider's policy: in dollars where the price is known (the daily cap applies there), else in
        input-token equivalents."""
        keep = self._keeps.get(name)
        if keep is None:
            keep = self._keeps[name] = wanted.policy(costs, priced)
        return keep

    async def _pings(
        self, runtime: Runtime, target: Target, request: ChatRequest, offsets: list[float], start: float
    ) -> None:
        provider = await runtime.helper(target)
        for offset in offsets:
            await self.wait(max(start + offset - self.clock(), 0.0))
            if not await side_request(provider, request, "keep-alive", "pause", self.emit, self._taken):
                return  # the prefix's renewal is unknown: a later ping could come after it is gone

    def _taken(self) -> bool:
        taken, self._preempted = self._preempted, False
        return taken

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
