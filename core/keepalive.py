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
from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from hotloop.agent.events import AgentEvent, StepStarted
from hotloop.agent.pause_pings import Pause, PauseScheduler
from hotloop.config import Config, Target
from hotloop.core.prewarm import CHARS_PER_TOKEN, prewarm_request, side_request

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.core.runtime import Runtime


class Pinger(PauseScheduler):
    """A session's keep-alive: one policy per provider, and the pause's pings in one task."""

    def __init__(
        self, config: Callable[[], Config], runtime: Callable[[], Runtime | None], emit: Callable[[AgentEvent], None]
    ) -> None:
        super().__init__(time.monotonic)
        self._config = config
        self._runtime = runtime
        self.emit = emit
        self.task: asyncio.Task[None] | None = None  # the last pause's pings
        self._used_at: float | None = None  # the last request's start: the prefix's last use
        self._pause: Pause | None = None

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, StepStarted):
            self._used_at = self.clock()

    def turn_started(self) -> None:
        """A request goes out: the ping in flight is cancelled, and the pause ends."""
        if self._pause is not None:
            self._pause.end(self.clock())
            self._pause = None

    def after_turn(self, agent: Agent) -> None:
        """The pause starts: plan its pings, and send them while it lasts."""
        config, runtime, provider = self._config(), self._runtime(), agent.provider
        settings = config.providers.get(provider.name)
        if config.keepalive.mode == "off" or settings is None or runtime is None or self._used_at is None:
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
        pause, offsets = self.plan(
            config.keepalive,
            provider.name,
            provider.cache_ttl,
            tokens,
            provider.model,
            provider.base_url,
            self._used_at,
        )
        self._pause = pause
        target = Target(settings, provider.model)

        async def ping() -> bool:
            helper = await runtime.helper(target)
            return await side_request(helper, request, "keep-alive", "pause", self.emit, pause.taken)

        self.send(pause, offsets, ping)
        if pause.task is not None:
            self.task = pause.task

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.gather(self.task, return_exceptions=True)
