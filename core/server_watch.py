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
    from hotloop.providers.server_metrics import ServerStats
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


async def follow_server(
    runtime: Runtime,
    provider_now: Callable[[], Provider | None],
    busy: Callable[[], bool],
    nudge: asyncio.Event,
    report: Callable[[ServerReport | None], None],
) -> None:
    """Report on whichever provider `provider_now` names, following it across switches, until cancelled."""
    from hotloop.providers.server_metrics import ServerWatch
    from hotloop.providers.vllm import scrape

    followed: Provider | None = None
    watch = ServerWatch()
    info: ServerInfo | None = None
    running = False  # the last scrape showed requests running: a cancelled one may still be winding down
    while True:
        provider = provider_now()
        if provider is not followed and provider is not None:
            followed, watch = provider, ServerWatch()
            info = await runtime.server_of(provider)
            report(ServerReport(info, provider.base_url, provider.model) if info is not None else None)
        if info is not None and info.has_metrics and followed is not None:
            sample = await scrape(followed)
            if sample is not None:
                stats = watch.observe(sample)
                running = bool(stats.running)
                report(ServerReport(info, followed.base_url, followed.model, stats))
        nudge.clear()
        # While anything runs, a second apart: "running" drops to 0 within a second of the server's last request.
        interval = BUSY_INTERVAL if busy() or running else IDLE_INTERVAL
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(nudge.wait(), interval)
