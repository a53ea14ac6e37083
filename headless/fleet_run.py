"""One bench level measured: its agents run in this process or on the workers, with the server's counters read
before and after and what the client added (CPU per request, loop lateness, TTFT beside the server's)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from hotloop.agent.events import StepFinished
from hotloop.headless.fleet_mix import cut_off
from hotloop.headless.fleet_probe import LoopWatch, server_counts, server_figures

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from hotloop.agent.events import AgentEvent
    from hotloop.config import Config
    from hotloop.config.choice import Target
    from hotloop.core.runtime import Runtime
    from hotloop.core.telemetry import Telemetry
    from hotloop.headless.bench import Level
    from hotloop.headless.fleet import Fleet
    from hotloop.headless.fleet_mix import Part, Workload
    from hotloop.providers.base import Provider


async def start_fleet(
    workers: int, address: str | None, config: Config, target: Target, provider: Provider, err: Console
) -> Fleet | None:
    """The workers, or None (and one line why) where Ray isn't installed; a RuntimeError where the cluster fails."""
    from hotloop.headless.fleet import Fleet, ray_missing, worker_target

    missing = ray_missing()
    if missing is not None:
        err.print(
            f"{missing}: the bench runs its agents in this process", markup=False, highlight=False, soft_wrap=True
        )
        return None
    fleet = await Fleet.start(workers, address, config, worker_target(target, provider))
    err.print(
        f"{workers} Ray workers on {fleet.address} in {fleet.startup_s:.1f} s",
        markup=False,
        highlight=False,
        soft_wrap=True,
    )
    return fleet


async def measured_level(
    runtime: Runtime,
    provider: Provider,
    workload: Workload,
    agents: int,
    on_event: Callable[[AgentEvent], None],
    on_tally: Callable[[int, int], None],
    telemetry: Telemetry | None,
    fleet: Fleet | None,
) -> tuple[Level, dict[str, Any], list[Part]]:
    """The level; its figures: the bench's, the server's counters over it, the client's cost, and a row per worker
    when it ran on workers; and each agent's part, in the order of the level's events."""
    before = await server_counts(provider)
    rows: list[dict[str, Any]] = []
    if fleet is None:
        counts = workload.split(agents)
        parts = workload.agents(counts)
        watch = LoopWatch()
        watch.start()
        try:
            level = await workload.run(runtime, provider, counts, on_event, telemetry)
        finally:
            await watch.stop()
        steps = sum(isinstance(e, StepFinished) for agent in level.events for e in agent)
        mine = watch.figures(steps, "the client")
        warning = mine.pop("warning")
        client = {**mine, "warnings": [warning] if warning else []}
    else:
        from hotloop.headless.fleet import client_of

        level, reports, parts = await fleet.run_level(workload, agents, on_tally)
        rows = fleet.rows(reports)
        client = client_of(rows)
    after = await server_counts(provider)
    figures = level.figures()
    figures["cut_off"] = cut_off(level, parts)
    ttfts = [e.ttft for agent in level.events for e in agent if isinstance(e, StepFinished) and e.ttft is not None]
    server = server_figures(before, after, ttfts)
    client["ttft_gap_ms"] = server.pop("client_ttft_gap_ms")
    figures.update(client=client, server=server)
    if rows:
        figures["workers"] = rows
    return level, figures, parts
