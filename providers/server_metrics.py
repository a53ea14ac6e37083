"""What a self-hosted server's Prometheus `/metrics` says, read with `prometheus_client`'s parser.

vLLM, SGLang and llama.cpp name the same things differently (`SERIES`); Ollama has no
/metrics at all. A `MetricsSample` is one scrape in common terms, `None` where the server has
no such series. `ServerWatch` turns scrapes into the figures the server panel shows: the prefix
cache's hit rate over every request the server served since the first scrape and over the last
minute (titles and other clients included: the server's figure, not the session's), KV-cache
use, the queue, TTFT percentiles from the histogram, and speculative decoding's acceptance.

Two families say why a prefix left the cache and where a hit came from. vLLM's KV residency
histograms (`--kv-cache-metrics`, sampled by `--kv-cache-metrics-sample`), registered in
https://github.com/vllm-project/vllm/blob/main/vllm/v1/metrics/loggers.py, time each sampled block
from allocation to eviction and from its last use to eviction (`Residency`). Cached prompt tokens
by source are vLLM's `vllm:prompt_tokens_by_source{source}` (same file) and SGLang's
`sglang:cached_tokens_total{cache_source}` (device/host/storage_<backend>, "total" when the server
has no breakdown), https://github.com/sgl-project/sglang/blob/main/python/sglang/srt/observability/metrics_collector.py.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from prometheus_client.samples import Sample

RECENT_SECONDS = 60.0

# Per server family, the series (names without `_total`) behind each common term. A term with
# several series adds them up; each series is summed over its labels, a ratio (`_RATIOS`) maxed.
SERIES: Mapping[str, Mapping[str, tuple[str, ...]]] = {
    "vllm": {
        "hits": ("vllm:prefix_cache_hits",),
        "queries": ("vllm:prefix_cache_queries",),
        "running": ("vllm:num_requests_running",),
        "waiting": ("vllm:num_requests_waiting",),
        "kv_usage": ("vllm:kv_cache_usage_perc",),
        "drafts": ("vllm:spec_decode_num_drafts",),
        "draft_tokens": ("vllm:spec_decode_num_draft_tokens",),
        "accepted": ("vllm:spec_decode_num_accepted_tokens",),
        "ttft": ("vllm:time_to_first_token_seconds",),
    },
    "sglang": {
        "hits": ("sglang:cached_tokens",),
        "queries": ("sglang:prompt_tokens",),  # every prompt token, cached or not
        "running": ("sglang:num_running_reqs",),
        "waiting": ("sglang:num_queue_reqs",),
        "kv_usage": ("sglang:token_usage",),
        "hit_rate_gauge": ("sglang:cache_hit_rate",),
        "accept_rate_gauge": ("sglang:spec_accept_rate",),
        "accept_length_gauge": ("sglang:spec_accept_length",),
        "ttft": ("sglang:time_to_first_token_seconds",),
    },
    "llama.cpp": {
        "hits": ("llamacpp:prompt_tokens_cached",),
        # llama.cpp's prompt_tokens counts only the tokens it computed; the cached ones complete the prompt.
        "queries": ("llamacpp:prompt_tokens", "llamacpp:prompt_tokens_cached"),
        "running": ("llamacpp:requests_processing",),
        "waiting": ("llamacpp:requests_deferred",),
        "kv_usage": ("llamacpp:kv_cache_usage_ratio",),  # older builds; the recorded one has none
        "drafts": ("llamacpp:spec_decode_num_drafts",),
        "draft_tokens": ("llamacpp:spec_decode_num_draft_tokens",),
        "accepted": ("llamacpp:spec_decode_num_accepted_tokens",),
    },
}
# Ratios: the largest over labels (engines, models), never a sum.
_RATIOS = frozenset({"kv_usage", "hit_rate_gauge", "accept_rate_gauge", "accept_length_gauge"})
# vLLM's KV residency histograms; one development build spelled them `vllm_` rather than `vllm:`.
RESIDENCY_SERIES: Mapping[str, tuple[str, ...]] = {
    "lifetime": ("vllm:kv_block_lifetime_seconds", "vllm_kv_block_lifetime_seconds"),
    "idle": ("vllm:kv_block_idle_before_evict_seconds", "vllm_kv_block_idle_before_evict_seconds"),
    "reuse_gap": ("vllm:kv_block_reuse_gap_seconds", "vllm_kv_block_reuse_gap_seconds"),
}
_RESIDENCY_OF = {name: part for part, names in RESIDENCY_SERIES.items() for name in names}
# Prompt tokens by source: series (without `_total`) → its source label and the sources that were not cached.
SOURCE_SERIES: Mapping[str, tuple[str, frozenset[str]]] = {
    "vllm:prompt_tokens_by_source": ("source", frozenset({"local_compute"})),
    "sglang:cached_tokens": ("cache_source", frozenset()),
}
Buckets = tuple[tuple[float, float], ...]  # (upper bound, cumulative count), summed over labels


def _terms_of(series: Mapping[str, Mapping[str, tuple[str, ...]]]) -> dict[str, tuple[str, ...]]:
    """Series name → the terms it adds to (one series can feed two: llama.cpp's cached tokens)."""
    terms: dict[str, tuple[str, ...]] = {}
    for family in series.values():
        for term, names in family.items():
            for name in names:
                terms[name] = (*terms.get(name, ()), term)
    return terms


_TERMS = _terms_of(SERIES)


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
    accept_rate_gauge: float | None = None
    accept_length_gauge: float | None = None
    # (upper bound, cumulative count), summed over labels; () when the histogram has no observation yet.
    ttft_buckets: Buckets | None = None
    residency: Residency | None = None
    # Cached prompt tokens by source, summed over other labels; () when the series has none yet.
    cache_sources: tuple[tuple[str, float], ...] | None = None


@dataclass(frozen=True)
class Observed:
    """One histogram as scraped, summed over its label sets."""

    buckets: Buckets
    count: float
    total: float


@dataclass(frozen=True)
class Evictions:
    """Blocks evicted between two readings (sampled, on vLLM) and the medians of their stays, in seconds."""

    count: int
    lifetime: float | None = None
    idle: float | None = None
    reuse_gap: float | None = None


@dataclass(frozen=True)
class Residency:
    """vLLM's KV residency histograms as one scrape has them: cumulative over the server's life."""

    lifetime: Observed
    idle: Observed | None = None
    reuse_gap: Observed | None = None

    @property
    def evictions(self) -> int:
        return int(self.lifetime.count)

    def since(self, before: Residency | None) -> Evictions | None:
        """The evictions after `before` (all of them without it); None if the server restarted in between."""
        if before is not None and before.lifetime.count > self.lifetime.count:
            return None
        count = self.evictions - (before.evictions if before is not None else 0)
        return Evictions(
            count,
            _median(self.lifetime, before.lifetime if before else None),
            _median(self.idle, before.idle if before else None),
            _median(self.reuse_gap, before.reuse_gap if before else None),
        )


def duration(seconds: float) -> str:
    """A stay in seconds, as precise as its size needs: "41 s", "2.5 s", "0.25 s", "< 0.01 s"."""
    if seconds >= 10:
        return f"{seconds:,.0f} s"
    if seconds >= 1:
        return f"{seconds:.1f} s"
    # Below 10 ms a median interpolated within vLLM's finest buckets claims more than they know.
    return f"{seconds:.2f} s" if seconds >= 0.01 else "< 0.01 s"


def _median(now: Observed | None, before: Observed | None) -> float | None:
    if now is None:
        return None
    return _bucket_quantile(0.5, _diff(before.buckets if before else None, now.buckets))


def parse_metrics(text: str, at: float) -> MetricsSample:
    """One scrape of Prometheus text; a malformed exposition raises ValueError.

    A family declared without samples reads 0: a labelled series shows none until its first
    increment (SGLang's cached tokens before the first hit), yet the server has it.
    """
    from prometheus_client.parser import text_string_to_metric_families

    readings: dict[str, list[float]] = {}
    buckets: dict[float, float] | None = None
    residency: dict[str, Observed] = {}
    sources: dict[str, float] | None = None
    for family in text_string_to_metric_families(text):
        if family.name in _RESIDENCY_OF:
            residency[_RESIDENCY_OF[family.name]] = _observed(family.samples)
            continue
        by_source = SOURCE_SERIES.get(family.name.removesuffix("_total"))
        if by_source is not None:
            sources = _add_sources(sources or {}, family.samples, *by_source)
        terms = _TERMS.get(family.name.removesuffix("_total"), ())
        if "ttft" in terms:
            buckets = _add_buckets(buckets or {}, family.samples)
            continue
        for term in terms:
            readings.setdefault(term, []).extend(_values(family.samples))
    values = {term: max(found, default=0.0) if term in _RATIOS else sum(found) for term, found in readings.items()}
    return MetricsSample(
        at=at,
        **values,
        ttft_buckets=None if buckets is None else tuple(sorted(buckets.items())),
        residency=Residency(residency["lifetime"], residency.get("idle"), residency.get("reuse_gap"))
        if "lifetime" in residency
        else None,
        cache_sources=None if sources is None else tuple(sorted(sources.items())),
    )


def _values(samples: Iterable[Sample]) -> list[float]:
    """A family's readings, one per label set; `_created` timestamps and NaNs left out."""
    return [s.value for s in samples if not s.name.endswith("_created") and math.isfinite(s.value)]


def _observed(samples: Iterable[Sample]) -> Observed:
    samples = list(samples)
    finite = [s for s in samples if math.isfinite(s.value)]
    return Observed(
        tuple(sorted(_add_buckets({}, samples).items())),
        sum(s.value for s in finite if s.name.endswith("_count")),
        sum(s.value for s in finite if s.name.endswith("_sum")),
    )


def _add_sources(
    sources: dict[str, float], samples: Iterable[Sample], label: str, uncached: frozenset[str]
) -> dict[str, float]:
    for sample in samples:
        source = sample.labels.get(label)
        counted = not sample.name.endswith("_created") and math.isfinite(sample.value)
        if source is not None and source not in uncached and counted:
            sources[source] = sources.get(source, 0.0) + sample.value
    return sources


def _add_buckets(buckets: dict[float, float], samples: Iterable[Sample]) -> dict[float, float]:
    for sample in samples:
        if sample.name.endswith("_bucket") and math.isfinite(sample.value):
            bound = float(sample.labels["le"])
            buckets[bound] = buckets.get(bound, 0.0) + sample.value
    return buckets


@dataclass(frozen=True)
class ServerStats:
    """The server panel's figures; `None` means not reported, unless a `*_reported` flag says the series is there.

    With the series there, `None` means nothing to show yet: no request since the server
    started, none in the last minute (`hit_rate_recent`), or no draft (speculative decoding).
    """

    hit_rate_since_start: float | None = None  # since the first scrape: the whole server's, not the session's
    hit_rate_recent: float | None = None
    kv_usage: float | None = None
    running: int | None = None
    waiting: int | None = None
    ttft_p50: float | None = None
    ttft_p95: float | None = None
    spec_acceptance: float | None = None
    spec_length: float | None = None
    cache_reported: bool = False
    ttft_reported: bool = False
    spec_reported: bool = False
    # The latest residency reading as scraped (for the cache explainer), and the evictions since the first scrape
    # (the server's whole life when none came since); None when the server has no residency histograms.
    residency: Residency | None = None
    evictions: Evictions | None = None
    cache_sources: tuple[tuple[str, float], ...] | None = None  # cached tokens by source, since the first scrape


class ServerWatch:
    """Scrapes in, figures out: rates are differences from the first scrape and within the last minute."""

    def __init__(self) -> None:
        self.first: MetricsSample | None = None
        self._recent: deque[MetricsSample] = deque()  # the scrapes of the last minute, oldest first

    def observe(self, sample: MetricsSample) -> ServerStats:
        if self.first is None:
            self.first = sample
        while self._recent and sample.at - self._recent[0].at > RECENT_SECONDS:
            self._recent.popleft()
        minute_ago = self._recent[0] if self._recent else None
        self._recent.append(sample)
        return ServerStats(
            hit_rate_since_start=_hit_rate_since(self.first, sample),
            hit_rate_recent=_window_hit_rate(minute_ago, sample),
            # Gauges are read as this scrape has them, never held over: a request that ended is gone at once.
            kv_usage=sample.kv_usage,
            running=_count(sample.running),
            waiting=_count(sample.waiting),
            ttft_p50=_quantile(0.50, self.first, sample),
            ttft_p95=_quantile(0.95, self.first, sample),
            spec_acceptance=_spec_acceptance(sample),
            spec_length=_spec_length(sample),
            cache_reported=_has_cache_counters(sample) or sample.hit_rate_gauge is not None,
            ttft_reported=sample.ttft_buckets is not None,
            spec_reported=_has_spec_series(sample),
            residency=sample.residency,
            evictions=_evictions_since(self.first, sample),
            cache_sources=_sources_since(self.first, sample),
        )


def _evictions_since(first: MetricsSample, now: MetricsSample) -> Evictions | None:
    if now.residency is None:
        return None
    since = now.residency.since(first.residency)
    return since if since is not None and since.count > 0 else now.residency.since(None)


def _sources_since(first: MetricsSample, now: MetricsSample) -> tuple[tuple[str, float], ...] | None:
    if now.cache_sources is None:
        return None
    earlier = dict(first.cache_sources or ())
    since = tuple((source, tokens - earlier.get(source, 0.0)) for source, tokens in now.cache_sources)
    return since if any(tokens > 0 for _, tokens in since) else now.cache_sources


def _has_cache_counters(sample: MetricsSample) -> bool:
    return sample.hits is not None and sample.queries is not None


def _has_spec_series(sample: MetricsSample) -> bool:
    series = (sample.drafts, sample.draft_tokens, sample.accepted, sample.accept_rate_gauge, sample.accept_length_gauge)
    return any(value is not None for value in series)


def _hit_rate_since(first: MetricsSample, now: MetricsSample) -> float | None:
    if now.hits is None or now.queries is None:
        return _positive(now.hit_rate_gauge)  # an older SGLang without the counters keeps its own rate
    rate = _window_hit_rate(first, now)
    # Nothing asked since the first scrape: the whole life of the server is the best figure there is.
    return rate if rate is not None else _ratio(now.hits, now.queries)


def _window_hit_rate(before: MetricsSample | None, now: MetricsSample) -> float | None:
    """Hits ÷ queries between two scrapes; None with no earlier scrape, no counters, or nothing asked in between."""
    if before is None or before is now or now.hits is None or now.queries is None:
        return None
    return _ratio(now.hits - (before.hits or 0.0), now.queries - (before.queries or 0.0))


def _count(value: float | None) -> int | None:
    return None if value is None else int(value)


def _ratio(part: float | None, whole: float | None) -> float | None:
    """part ÷ whole; None when either is missing or whole is not positive (nothing counted, or a reset server)."""
    return part / whole if part is not None and whole is not None and whole > 0 else None


def _positive(value: float | None) -> float | None:
    # SGLang's gauges read 0 before any batch (and always, for speculative decoding that is off).
    return value if value is not None and value > 0 else None


def _spec_acceptance(sample: MetricsSample) -> float | None:
    share = _ratio(sample.accepted, sample.draft_tokens)
    return share if share is not None else _positive(sample.accept_rate_gauge)


def _spec_length(sample: MetricsSample) -> float | None:
    # Each draft step yields its accepted tokens plus the one the target model samples itself.
    per_step = _ratio(sample.accepted, sample.drafts)
    return 1.0 + per_step if per_step is not None else _positive(sample.accept_length_gauge)


def _quantile(q: float, before: MetricsSample, now: MetricsSample) -> float | None:
    """Prometheus's histogram_quantile over the requests since `before` (all of them if none came since)."""
    since = _diff(before.ttft_buckets, now.ttft_buckets)
    return _bucket_quantile(q, since if since and since[-1][1] > 0 else now.ttft_buckets)


def _diff(before: Buckets | None, now: Buckets | None) -> Buckets | None:
    """The observations in `now` that `before` did not have, bucket by bucket."""
    if not now:
        return None
    earlier = dict(before or ())
    return tuple((bound, count - earlier.get(bound, 0.0)) for bound, count in now)


def _bucket_quantile(q: float, buckets: Buckets | None) -> float | None:
    """Prometheus's histogram_quantile; None with no observation."""
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
