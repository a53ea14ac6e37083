"""What a self-hosted server's Prometheus `/metrics` says, read with `prometheus_client`'s parser.

vLLM and SGLang name the same things differently, and llama.cpp and Ollama report less or
nothing. A `MetricsSample` is one scrape in common terms, `None` where the server has no
such series. `ServerWatch` turns scrapes into the figures the server panel shows: the prefix
cache's hit rate over the session and over the last minute, KV-cache use, the queue, TTFT
percentiles from the histogram, and speculative decoding's acceptance.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

RECENT_SECONDS = 60.0

# Counter and gauge names per server family, in common terms; every series is summed over its labels.
_SUMS = {
    "hits": ("vllm:prefix_cache_hits", "sglang:cached_tokens"),
    "queries": ("vllm:prefix_cache_queries", "sglang:prompt_tokens"),
    "running": ("vllm:num_requests_running", "sglang:num_running_reqs", "llamacpp:requests_processing"),
    "waiting": ("vllm:num_requests_waiting", "sglang:num_queue_reqs", "llamacpp:requests_deferred"),
    "drafts": ("vllm:spec_decode_num_drafts",),
    "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
    "accepted": ("vllm:spec_decode_num_accepted_tokens",),
}
_MAXIMA = {
    "kv_usage": ("vllm:kv_cache_usage_perc", "sglang:token_usage", "llamacpp:kv_cache_usage_ratio"),
    "hit_rate_gauge": ("sglang:cache_hit_rate",),
    "accept_length_gauge": ("sglang:spec_accept_length",),
}
_TTFT = ("vllm:time_to_first_token_seconds", "sglang:time_to_first_token_seconds")


@dataclass(frozen=True)
class MetricsSample:
    at: float
    hits: float | None = None
    queries: float | None = None
    running: float | None = None
    waiting: float | None = None
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    kv_usage: float | None = None
    hit_rate_gauge: float | None = None
    accept_length_gauge: float | None = None
    ttft_buckets: tuple[tuple[float, float], ...] = ()  # (upper bound, cumulative count), summed over labels


def parse_metrics(text: str, at: float) -> MetricsSample:
    """One scrape of Prometheus text; a malformed exposition raises ValueError."""
    from prometheus_client.parser import text_string_to_metric_families

    sums: dict[str, float] = {}
    maxima: dict[str, float] = {}
    buckets: dict[float, float] = {}
    for family in text_string_to_metric_families(text):
        name = family.name.removesuffix("_total")
        for sample in family.samples:
            if sample.name.endswith("_created"):
                continue
            value = sample.value
            if not math.isfinite(value):
                continue
            if name in _TTFT and sample.name.endswith("_bucket"):
                bound = float(sample.labels["le"])
                buckets[bound] = buckets.get(bound, 0.0) + value
            for field, names in _SUMS.items():
                if name in names:
                    sums[field] = sums.get(field, 0.0) + value
            for field, names in _MAXIMA.items():
                if name in names:
                    maxima[field] = max(maxima.get(field, value), value)
    return MetricsSample(at=at, **sums, **maxima, ttft_buckets=tuple(sorted(buckets.items())))


@dataclass(frozen=True)
class ServerStats:
    """The server panel's figures; `None` means the server does not report it."""

    hit_rate_session: float | None = None
    hit_rate_recent: float | None = None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    spec_acceptance: float | None = None
    spec_length: float | None = None
    # The server has the series but nothing to show yet (no request since it started).
    cache_reported: bool = False
    ttft_reported: bool = False


class ServerWatch:
    """Scrapes in, figures out: rates are differences from the first scrape (the session) and the last minute."""

    def __init__(self) -> None:
        self.first: MetricsSample | None = None
        self._recent: deque[MetricsSample] = deque()

    def observe(self, sample: MetricsSample) -> ServerStats:
        if self.first is None:
            self.first = sample
        self._recent.append(sample)
        while len(self._recent) > 2 and sample.at - self._recent[1].at >= RECENT_SECONDS:
            self._recent.popleft()
        minute_ago = self._recent[0]
        return ServerStats(
            hit_rate_session=_hit_rate(self.first, sample),
            hit_rate_recent=_hit_rate(minute_ago, sample),
            kv_usage=sample.kv_usage,
            running=_count(sample.running),
            waiting=_count(sample.waiting),
            ttft_p50=_quantile(0.50, self.first, sample),
            ttft_p95=_quantile(0.95, self.first, sample),
            spec_acceptance=_ratio(sample.accepted, sample.draft_tokens),
            spec_length=_spec_length(sample),
            cache_reported=(
                (sample.queries is not None and sample.hits is not None) or sample.hit_rate_gauge is not None
            ),
            ttft_reported=bool(sample.ttft_buckets),
        )


def _hit_rate(before: MetricsSample, now: MetricsSample) -> float | None:
    if now.hits is None or now.queries is None:
        return now.hit_rate_gauge  # SGLang also keeps its own running rate
    queries = now.queries - (before.queries or 0.0)
    if queries <= 0:
        # Nothing asked since `before`: the whole life of the server is the best figure there is.
        return now.hits / now.queries if now.queries > 0 else None
    return (now.hits - (before.hits or 0.0)) / queries


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def _ratio(part: float | None, whole: float | None) -> float | None:
    return part / whole if part is not None and whole else None


def _spec_length(sample: MetricsSample) -> float | None:
    # Each draft step yields its accepted tokens plus the one the target model samples itself.
    if sample.accepted is not None and sample.drafts:
        return 1.0 + sample.accepted / sample.drafts
    return sample.accept_length_gauge


def _quantile(q: float, before: MetricsSample, now: MetricsSample) -> float | None:
    """Prometheus's histogram_quantile over the requests since `before` (all of them if none came since)."""
    earlier = dict(before.ttft_buckets)
    buckets = [(bound, count - earlier.get(bound, 0.0)) for bound, count in now.ttft_buckets]
    if not buckets or buckets[-1][1] <= 0:
        buckets = list(now.ttft_buckets)
    if not buckets or buckets[-1][1] <= 0:
        return None
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower_bound  # beyond the last finite bucket: its bound is all that is known
            share = (rank - lower_count) / (count - lower_count) if count > lower_count else 1.0
            return lower_bound + (bound - lower_bound) * share
        lower_bound, lower_count = bound, count
    return None
