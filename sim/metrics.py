"""vLLM's Prometheus metrics, under vLLM's names, labels and help texts.

The KV residency histograms are vLLM's `--kv-cache-metrics` ones, as registered in
https://github.com/vllm-project/vllm/blob/main/vllm/v1/metrics/loggers.py (fed by
vllm/v1/core/kv_cache_metrics.py); the simulator keeps every block rather than vLLM's sample, so
their count is the evictions it made. `vllm:prompt_tokens_by_source` is vLLM's per-source prompt
counter from the same file.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from hotloop.sim.cache import Eviction, PrefixCache

_LABELS = ("model_name", "engine")
# vLLM's buckets for time to first token, in seconds.
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    7.5,
    10.0,
    20.0,
    40.0,
    80.0,
    160.0,
    640.0,
    2560.0,
)

# vLLM's buckets for the KV residency histograms, in seconds.
RESIDENCY_BUCKETS = (
    0.001,
    0.002,
    0.005,
    0.01,
    0.02,
    0.05,
    0.1,
    0.2,
    0.5,
    1,
    2,
    5,
    10,
    20,
    30,
    60,
    120,
    300,
    600,
    1200,
    1800,
)
# vLLM's prompt token sources; the simulator has no KV connector, so nothing comes from a transfer.
PROMPT_SOURCES = ("local_compute", "local_cache_hit", "external_kv_transfer")
_SAMPLED = " Sampled metrics (controlled by --kv-cache-metrics-sample)."


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.prefix_cache_queries = Counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            _LABELS,
            registry=r,
        )
        self.prefix_cache_hits = Counter(
            "vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.", _LABELS, registry=r
        )
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Number of prefill tokens processed.", _LABELS, registry=r)
        self.generation_tokens = Counter(
            "vllm:generation_tokens", "Number of generation tokens processed.", _LABELS, registry=r
        )
        self.request_success = Counter(
            "vllm:request_success",
            "Count of successfully processed requests.",
            (*_LABELS, "finished_reason"),
            registry=r,
        )
        self.running = Gauge(
            "vllm:num_requests_running", "Number of requests in model execution batches.", _LABELS, registry=r
        )
        self.waiting = Gauge(
            "vllm:num_requests_waiting", "Number of requests waiting to be processed.", _LABELS, registry=r
        )
        self.kv_usage = Gauge(
            "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", _LABELS, registry=r
        )
        self.ttft = Histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            _LABELS,
            buckets=TTFT_BUCKETS,
            registry=r,
        )
        self.queue_time = Histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            _LABELS,
            registry=r,
        )
        self.prompt_by_source = Counter(
            "vllm:prompt_tokens_by_source", "Number of prompt tokens by source.", (*_LABELS, "source"), registry=r
        )
        self.block_lifetime = self._residency(
            "vllm:kv_block_lifetime_seconds", "Histogram of KV cache block lifetime from allocation to eviction."
        )
        self.block_idle = self._residency(
            "vllm:kv_block_idle_before_evict_seconds", "Histogram of idle time before KV cache block eviction."
        )
        self.block_reuse_gap = self._residency(
            "vllm:kv_block_reuse_gap_seconds",
            "Histogram of time gaps between consecutive KV cache block accesses. Only the most recent accesses are"
            " recorded (ring buffer).",
        )

    def _residency(self, name: str, documentation: str) -> Histogram:
        return Histogram(name, documentation + _SAMPLED, _LABELS, buckets=RESIDENCY_BUCKETS, registry=self.registry)

    def register_model(self, model: str) -> None:
        """Expose every series at zero before the first request, as vLLM does."""
        for metric in (
            self.prefix_cache_queries,
            self.prefix_cache_hits,
            self.prompt_tokens,
            self.generation_tokens,
            self.running,
            self.waiting,
            self.kv_usage,
            self.ttft,
            self.queue_time,
            self.block_lifetime,
            self.block_idle,
            self.block_reuse_gap,
        ):
            metric.labels(model, "0")
        for source in PROMPT_SOURCES:
            self.prompt_by_source.labels(model, "0", source)

    def first_token(self, model: str, ttft: float) -> None:
        self.ttft.labels(model, "0").observe(ttft)

    def queued(self, model: str, seconds: float) -> None:
        self.queue_time.labels(model, "0").observe(seconds)

    def set_waiting(self, model: str, waiting: int) -> None:
        self.waiting.labels(model, "0").set(waiting)

    def started(self, model: str, prompt_tokens: int, cached: int, cache: PrefixCache) -> None:
        self.prefix_cache_queries.labels(model, "0").inc(prompt_tokens)
        self.prefix_cache_hits.labels(model, "0").inc(cached)
        self.prompt_tokens.labels(model, "0").inc(prompt_tokens)
        self.prompt_by_source.labels(model, "0", "local_compute").inc(prompt_tokens - cached)
        self.prompt_by_source.labels(model, "0", "local_cache_hit").inc(cached)
        self.evicted(model, cache.drain())
        self.running.labels(model, "0").inc()
        self.kv_usage.labels(model, "0").set(len(cache) / cache.capacity_blocks)

    def finished(self, model: str, output_tokens: int, reason: str, cache: PrefixCache) -> None:
        self.generation_tokens.labels(model, "0").inc(output_tokens)
        self.evicted(model, cache.drain())
        self.running.labels(model, "0").dec()
        self.kv_usage.labels(model, "0").set(len(cache) / cache.capacity_blocks)
        if reason != "abort":
            # The engine stops on its end token; "tool_calls" is only the API's reading of that.
            self.request_success.labels(model, "0", "stop" if reason == "tool_calls" else reason).inc()

    def evicted(self, model: str, evictions: list[Eviction]) -> None:
        """Observe evicted blocks under the model whose request made room: the simulator's models share one cache."""
        for eviction in evictions:
            self.block_lifetime.labels(model, "0").observe(eviction.lifetime)
            self.block_idle.labels(model, "0").observe(eviction.idle)
            for gap in eviction.reuse_gaps:
                self.block_reuse_gap.labels(model, "0").observe(gap)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
