"""What a self-hosted server says of itself, for the server panel: found once, then scraped from `/metrics`.

Scrapes come every second while a turn runs or the server shows requests running, and every
five otherwise; a nudge (a turn starting or ending, a switch) scrapes at once. `None` is
reported for a provider that is not a server describing itself (a hosted API).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hotloop.core.runtime import Runtime
    from hotloop.providers.base import Provider
    from hotloop.providers.server_metrics import Residency, ServerStats
    from hotloop.providers.vllm import ServerInfo

BUSY_INTERVAL = 1.0  # seconds between /metrics scrapes while a turn runs
IDLE_INTERVAL = 5.0


@dataclass(frozen=True)
class ServerReport:
    """What a self-hosted server says of itself, for the server panel; `stats` is None until the first scrape."""

    info: ServerInfo
    base_url: str
    model: str
    stats: ServerStats | None = None

    @property
    def residency(self) -> Residency | None:
        """The server's KV residency reading as last scraped, for the cache explainer; None if it has none."""
        return self.stats.residency if self.stats is not None else None


class ServerFollower:
    """A session's server, followed from `follow` until `close`; `nudge` scrapes at once, `last` is the last report."""

    def __init__(
        self,
        runtime: Callable[[], Runtime | None],
        provider_now: Callable[[], Provider | None],
        busy: Callable[[], bool],
    ) -> None:
        self._runtime = runtime
        self._provider_now = provider_now
        self._busy = busy
        self._nudged = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.last: ServerReport | None = None

    def nudge(self) -> None:
        """A turn started or ended, or the provider changed: scrape now, not at the next interval."""
        self._nudged.set()

    def residency(self) -> Residency | None:
        """The server's KV residency as last scraped (the cache explainer quotes it); None if it reports none."""
        return self.last.residency if self.last is not None else None

    def follow(self, report: Callable[[ServerReport | None], None]) -> None:
        """Report what the current provider's server says of itself, from now until closed."""
        if self._task is None and self._runtime() is not None:
            self._task = asyncio.create_task(self.run(report))

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def run(self, report: Callable[[ServerReport | None], None]) -> None:
        """Report on whichever provider `provider_now` names, following it across switches, until cancelled."""
        from hotloop.providers.server_metrics import ServerWatch
        from hotloop.providers.vllm import scrape

        runtime = self._runtime()
        if runtime is None:
            return

        followed: Provider | None = None
        watch = ServerWatch()
        info: ServerInfo | None = None
        running = False  # the last scrape showed requests running: a cancelled one may still be winding down
        while True:
            provider = self._provider_now()
            if provider is not followed and provider is not None:
                followed, watch = provider, ServerWatch()
                info = await runtime.server_of(provider)
                self.last = ServerReport(info, provider.base_url, provider.model) if info is not None else None
                report(self.last)
            if info is not None and info.has_metrics and followed is not None:
                sample = await scrape(followed)
                if sample is not None:
                    stats = watch.observe(sample)
                    running = bool(stats.running)
                    self.last = ServerReport(info, followed.base_url, followed.model, stats)
                    report(self.last)
            self._nudged.clear()
            # While anything runs, a second apart: "running" drops to 0 within a second of the server's last request.
            interval = BUSY_INTERVAL if self._busy() or running else IDLE_INTERVAL
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._nudged.wait(), interval)
