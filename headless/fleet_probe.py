"""What the client adds to a bench's figures: its CPU per request, its event loop's lateness, and its TTFT beside
the server's own (from the server's `/metrics`, where it has them). A saturated client queues its own requests and
reads its queueing as the server's latency: these figures say when that happened."""

from __future__ import annotations

import asyncio
import contextlib
import math
import statistics
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hotloop.providers.base import Provider

TICK_S = 0.05  # the heartbeat's period
LAG_WARN_S = 0.05  # a heartbeat this late at p99: the loop was busy for a few ticks, and every timestamp waited too

# The server's counters, by family (`_total` and `_sum`/`_count` suffixes left off): vLLM (and the simulator), SGLang.
PROMPT = ("vllm:prompt_tokens", "sglang:prompt_tokens")
OUTPUT = ("vllm:generation_tokens", "sglang:generation_tokens")
TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")


@dataclass
class LoopWatch:
    """A heartbeat on the running loop (how late each tick woke) and the process's CPU time, from start to stop."""

    lateness: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    _task: asyncio.Task[None] | None = field(default=None, init=False)
    _cpu: float = field(default=0.0, init=False)

    def start(self) -> None:
        self._cpu = time.process_time()
        self._task = asyncio.create_task(self._beat())

    async def _beat(self) -> None:
        while True:
            due = time.perf_counter() + TICK_S
            await asyncio.sleep(TICK_S)
            self.lateness.append(max(time.perf_counter() - due, 0.0))

    async def stop(self) -> None:
        self.cpu_s = time.process_time() - self._cpu
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def figures(self, requests: int, who: str) -> dict[str, Any]:
        """CPU per request, the loop's lateness at p99, and a one-line warning when it lagged."""
        from hotloop.headless.bench import percentile

        lag = percentile(self.lateness, 99)
        lagged = lag is not None and lag > LAG_WARN_S
        return {
            "cpu_ms_per_request": self.cpu_s * 1000 / requests if requests else None,
            "loop_lag_p99_ms": None if lag is None else lag * 1000,
            "warning": f"{who}'s event loop lagged {lag * 1000:,.0f} ms at p99 (over {LAG_WARN_S * 1000:.0f} ms): "
            "its latencies include its own queueing"
            if lagged and lag is not None
            else None,
        }


@dataclass(frozen=True)
class ServerCounts:
    """One scrape of the server's counters; None where it has no such series."""

    prompt: float | None
    output: float | None
    ttft_sum: float | None
    ttft_count: float | None


async def server_counts(provider: Provider) -> ServerCounts | None:
    """The server's prompt and output token counters and its TTFT histogram's sum and count; None for a server
    without a Prometheus `/metrics` (a hosted API, Ollama) or one that didn't answer."""
    from hotloop.providers.errors import ProviderError

    if getattr(provider, "official", False):
        return None
    root = provider.base_url.rstrip("/").removesuffix("/v1")
    try:
        status, body = await provider.fetch(root + "/metrics")
    except ProviderError:
        return None
    if status != 200 or not body.lstrip().startswith("#"):
        return None
    return await asyncio.to_thread(_parsed, body)


def _parsed(text: str) -> ServerCounts | None:
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if math.isfinite(sample.value) and not sample.name.endswith("_created"):
                    sums[sample.name] = sums.get(sample.name, 0.0) + sample.value
    except ValueError:
        return None

    def first(names: tuple[str, ...], suffix: str) -> float | None:
        return next((sums[name + suffix] for name in names if name + suffix in sums), None)

    return ServerCounts(first(PROMPT, "_total"), first(OUTPUT, "_total"), first(TTFT, "_sum"), first(TTFT, "_count"))


def _delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def server_figures(before: ServerCounts | None, after: ServerCounts | None, ttfts: list[float]) -> dict[str, Any]:
    """What the server counted over a level, and the client's mean TTFT less the server's own: what the client (its
    loop, its connections, the network) added to each first token."""
    if before is None or after is None:
        return {"prompt_tokens": None, "output_tokens": None, "ttft_mean_s": None, "client_ttft_gap_ms": None}
    count, total = _delta(before.ttft_count, after.ttft_count), _delta(before.ttft_sum, after.ttft_sum)
    server = total / count if total is not None and count else None
    prompt, output = _delta(before.prompt, after.prompt), _delta(before.output, after.output)
    return {
        "prompt_tokens": None if prompt is None else round(prompt),
        "output_tokens": None if output is None else round(output),
        "ttft_mean_s": server,
        "client_ttft_gap_ms": (statistics.fmean(ttfts) - server) * 1000 if server is not None and ttfts else None,
    }
