"""`hotloop bench --workers N`: the bench's agents in N worker processes, Ray actors each running an asyncio loop
of closed-loop agents, on a local Ray cluster it starts or on a running one (`--ray-address`).

The driver splits each level's agents over the workers, measures each worker's clock against its own at start (the
round trip with the least delay of a few, halved), and merges the workers' reports into one `Level` after the run,
in a thread: the same table, JSON and `bench compare` as in one process, plus a row per worker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from msgspec import structs

from hotloop.config.choice import Target
from hotloop.headless.bench import Level, spread
from hotloop.headless.fleet_worker import Worker, WorkerReport

if TYPE_CHECKING:
    from collections.abc import Callable

    from hotloop.config import Config
    from hotloop.headless.fleet_mix import Part, Workload
    from hotloop.providers.base import Provider

INSTALL = "pip install 'hotloop[fleet]'"
# The simulator's kinds, as the protocol the workers speak to the driver's simulator over HTTP.
SIM_KINDS = {"sim": "openai-chat", "sim-responses": "openai-responses", "sim-anthropic": "anthropic"}
OBJECT_STORE_BYTES = 100 * 2**20  # the reports are small; Ray's default takes 30% of the machine's memory
PLACED_WITHIN_S = 120.0  # a cluster without room for a worker leaves it pending for ever
CLOCK_SAMPLES = 5
TALLY_S = 0.5  # the progress view's tick, from the workers' counts
REACH_S = 5.0  # to open a connection to a cluster's address


def ray_missing() -> str | None:
    """Why the workers can't run here, or None."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return f"Ray is not installed ({INSTALL})"
    return None


def worker_target(target: Target, provider: Provider) -> Target:
    """What the workers connect to: the driver's embedded simulator by its URL (a simulator in each worker would
    split the load over N servers and leave the driver's `/metrics` empty); any other server as configured."""
    settings = target.settings
    if not settings.is_simulator:
        return target
    moved = structs.replace(settings, kind=SIM_KINDS[settings.kind], base_url=provider.base_url)
    return Target(moved, provider.model)


def dealt(counts: list[int], workers: int) -> list[list[int]]:
    """Each worker's agents of each part: the level's agents dealt round, part after part, so every worker holds
    as many as the others or one fewer, and a mix's parts spread over them all."""
    hands = [[0] * len(counts) for _ in range(workers)]
    n = 0
    for part, count in enumerate(counts):
        for _ in range(count):
            hands[n % workers][part] += 1
            n += 1
    return hands


@dataclass
class Fleet:
    actors: list[Any]
    offsets: list[float]  # the driver's clock less each worker's, in seconds
    round_trips: list[float]
    startup_s: float
    address: str
    ray: RayThread

    @classmethod
    async def start(cls, workers: int, address: str | None, config: Config, target: Target) -> Fleet:
        """Ray started (or joined) in a thread and the workers placed, each clock measured; a RuntimeError in a
        line if the cluster can't place them."""
        import ray

        started = time.perf_counter()
        if address is not None and address != "auto":
            await _reachable(address)
        held = RayThread()
        try:
            await held.start(lambda: _init(workers, address), PLACED_WITHIN_S)
        except TimeoutError:
            raise RuntimeError(f"Ray did not start in {PLACED_WITHIN_S:.0f} s") from None
        except Exception as error:
            raise RuntimeError(f"Ray could not start: {_line(error)}") from None
        actor = ray.remote(Worker)
        actors = [
            actor.options(num_cpus=1, scheduling_strategy="SPREAD").remote(n, config, target) for n in range(workers)
        ]
        fleet = cls(actors, [], [], 0.0, address or "local", held)
        try:
            clocks = await asyncio.wait_for(asyncio.gather(*(_clock(a) for a in actors)), PLACED_WITHIN_S)
        except TimeoutError:
            await fleet.close()
            raise RuntimeError(
                f"the Ray cluster at {fleet.address} placed fewer than {workers} workers in {PLACED_WITHIN_S:.0f} s "
                "(each takes one CPU)"
            ) from None
        except Exception as error:  # a worker that can't import hotloop, or can't reach the server
            await fleet.close()
            raise RuntimeError(f"a bench worker failed to start: {_line(error)}") from None
        fleet.offsets, fleet.round_trips = [c[0] for c in clocks], [c[1] for c in clocks]
        fleet.startup_s = time.perf_counter() - started
        return fleet

    async def run_level(
        self, workload: Workload, agents: int, on_tally: Callable[[int, int], None]
    ) -> tuple[Level, list[WorkerReport], list[Part]]:
        """The level's agents dealt over the workers, each agent numbered apart; their reports,
        merged in a thread, and each agent's part in the merged order."""
        calls, parts, first = [], [], 0
        for n, (actor, counts) in enumerate(
            zip(self.actors, dealt(workload.split(agents), len(self.actors)), strict=True)
        ):
            if sum(counts):
                calls.append(_report(n, sum(counts), actor.run.remote(workload, counts, first)))
                parts.append(workload.agents(counts))
                first += sum(counts)
        running = asyncio.gather(*calls)
        while not running.done():
            await asyncio.wait([running], timeout=TALLY_S)
            await self._tally(on_tally)
        reports = list(await running)
        level = await asyncio.to_thread(self.merged, agents, reports)
        # A worker that failed has no events: its agents leave the list with them.
        return level, reports, [p for report, mine in zip(reports, parts, strict=True) if report.events for p in mine]

    async def _tally(self, on_tally: Callable[[int, int], None]) -> None:
        """The turns and steps the workers finished so far, for the progress view; a worker that doesn't say in a
        tick (busy, or gone) is left out of it."""
        asked = [actor.tally.remote() for actor in self.actors]
        try:
            tallies = await asyncio.wait_for(asyncio.gather(*asked, return_exceptions=True), TALLY_S)
        except TimeoutError:
            return
        counted = [t for t in tallies if isinstance(t, tuple)]
        on_tally(sum(t[0] for t in counted), sum(t[1] for t in counted))

    def merged(self, agents: int, reports: list[WorkerReport]) -> Level:
        """One level of every worker's agents; its wall time from the first worker's start to the last one's end,
        and its ramp to the last worker's last agent's start, on the driver's clock."""
        level = Level(agents)
        for report in reports:
            level.events.extend(report.events)
            level.errors.extend(report.errors)
        spans = [(r.started + self.offsets[r.worker], r.ended + self.offsets[r.worker]) for r in reports if r.ended]
        level.wall = max(end for _, end in spans) - min(start for start, _ in spans) if spans else 0.0
        ramps = [r.started + self.offsets[r.worker] + r.ramp for r in reports if r.ended]
        level.ramp = max(ramps) - min(start for start, _ in spans) if spans else 0.0
        return level

    def rows(self, reports: list[WorkerReport]) -> list[dict[str, Any]]:
        """A row per worker: its host, agents, requests and their TTFT, what the client cost it, its clock."""
        from hotloop.agent.events import StepFinished

        rows = []
        for report in reports:
            ttft = [e.ttft for a in report.events for e in a if isinstance(e, StepFinished) and e.ttft is not None]
            sent = [self.offsets[report.worker] + s for s, _ in report.requests]
            rows.append(
                {
                    "worker": report.worker + 1,
                    "host": report.host,
                    "agents": report.agents,
                    "requests": len(report.requests),
                    "errors": len(report.errors),
                    "ttft_s": spread(ttft),
                    # When its first request left, on the driver's clock: how far apart the workers started.
                    "first_request_s": min(sent) if sent else None,
                    **report.client,
                    "clock_offset_ms": self.offsets[report.worker] * 1000,
                    "clock_round_trip_ms": self.round_trips[report.worker] * 1000,
                }
            )
        starts = [row["first_request_s"] for row in rows if row["first_request_s"] is not None]
        for row in rows:
            if row["first_request_s"] is not None:
                row["first_request_s"] -= min(starts)
        return rows

    async def close(self) -> None:
        """Each worker's connections closed (bounded), then Ray shut down."""
        closing = [actor.close.remote() for actor in self.actors]
        with contextlib.suppress(TimeoutError):  # a worker that hangs is ended with the cluster
            await asyncio.wait_for(asyncio.gather(*closing, return_exceptions=True), 10)
        await self.ray.stop()


def client_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The level's client figures from its workers': CPU per request over them all, the worst loop's lateness."""
    requests = sum(row["requests"] for row in rows)
    cpu = sum((row["cpu_ms_per_request"] or 0) * row["requests"] for row in rows)
    lags = [row["loop_lag_p99_ms"] for row in rows if row["loop_lag_p99_ms"] is not None]
    return {
        "cpu_ms_per_request": cpu / requests if requests else None,
        "loop_lag_p99_ms": max(lags, default=None),
        "warnings": [row["warning"] for row in rows if row["warning"]],
    }


def _init(workers: int, address: str | None) -> None:
    import ray

    # Ray's own start-up notices (its token, a signal handler it leaves to the main thread) would interleave with
    # the bench's lines; the bench says in one line where its workers run.
    logging.getLogger("ray").setLevel(logging.ERROR)
    # No dashboard, a small object store, and the workers' output kept off the driver's terminal.
    if address is None:
        ray.init(
            num_cpus=workers,
            object_store_memory=OBJECT_STORE_BYTES,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
        )
    else:
        ray.init(address=address, log_to_driver=False, configure_logging=False)


async def _reachable(address: str) -> None:
    """A RuntimeError in a line if nothing answers at the cluster's address: Ray itself retries for minutes,
    logging each try from its C++ core."""
    host, _, port = address.split("://")[-1].rpartition(":")
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host or "127.0.0.1", int(port)), REACH_S)
    except (OSError, ValueError, TimeoutError) as error:
        raise RuntimeError(f"cannot reach the Ray cluster at {address}: {error or 'no answer'}") from None
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()


class RayThread:
    """Ray started, held and shut down by a daemon thread of its own. Ray's processes are killed when the thread that
    started them ends (its parent-death signal follows the thread, on Linux): a pool's thread, reused or retired, or
    one that returned after `ray.init`, would take the local cluster with it. A daemon: a start that never ends can't
    hold the exit."""

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._ended = threading.Event()

    async def start(self, init: Callable[[], None], within: float) -> None:
        loop = asyncio.get_running_loop()
        started: asyncio.Future[None] = loop.create_future()

        def settle(error: BaseException | None) -> None:
            if started.done():
                return  # the wait gave up
            if error is None:
                started.set_result(None)
            else:
                started.set_exception(error)

        def run() -> None:
            import ray

            try:
                init()
            except Exception as error:
                loop.call_soon_threadsafe(settle, error)
                self._ended.set()
                return
            loop.call_soon_threadsafe(settle, None)
            self._stop.wait()
            ray.shutdown()
            self._ended.set()

        threading.Thread(target=run, name="ray", daemon=True).start()
        await asyncio.wait_for(started, within)

    async def stop(self) -> None:
        """Ray shut down by its thread; waited for a bounded time."""
        self._stop.set()
        await asyncio.to_thread(self._ended.wait, 30)


async def _clock(actor: Any) -> tuple[float, float]:
    """The worker connected; the offset of the driver's clock from the worker's, from the quickest of a few round
    trips, and that trip."""
    await actor.prepare.remote()
    samples = []
    for _ in range(CLOCK_SAMPLES):
        sent = time.time()
        theirs = await actor.clock.remote()
        back = time.time()
        samples.append((back - sent, (sent + back) / 2 - theirs))
    trip, offset = min(samples)
    return offset, trip


async def _report(worker: int, agents: int, call: Any) -> WorkerReport:
    """A worker's report; a worker that failed (its process died, or it couldn't connect) fails each of its agents,
    in one line."""
    try:
        report: WorkerReport = await call
    except Exception as error:
        return WorkerReport(worker, "", agents, errors=[f"worker {worker + 1}: {_line(error)}"] * agents)
    return report


def _line(error: Exception) -> str:
    """What went wrong in a worker, in a line: the cause Ray wraps, without its traceback."""
    cause = getattr(error, "cause", None) or error
    return (str(cause).strip().splitlines() or [type(cause).__name__])[0]
