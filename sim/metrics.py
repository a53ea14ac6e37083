"""vLLM's Prometheus metrics, under vLLM's names, labels and help texts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

if TYPE_CHECKING:
    from hotloop.sim.cache import PrefixCache

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
        ):
            metric.labels(model, "0")

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
        self.running.labels(model, "0").inc()
        self.kv_usage.labels(model, "0").set(len(cache) / cache.capacity_blocks)

    def finished(self, model: str, output_tokens: int, reason: str, cache: PrefixCache) -> None:
        self.generation_tokens.labels(model, "0").inc(output_tokens)
        self.running.labels(model, "0").dec()
        self.kv_usage.labels(model, "0").set(len(cache) / cache.capacity_blocks)
        if reason != "abort":
            # The engine stops on its end token; "tool_calls" is only the API's reading of that.
            self.request_success.labels(model, "0", "stop" if reason == "tool_calls" else reason).inc()

    def exposition(self) -> bytes:
        return generate_latest(self.registry)
