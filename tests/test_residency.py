"""The server's word on why a prefix left its cache: vLLM's KV residency histograms and the cached-token sources.

The simulator times each evicted block as vLLM's `--kv-cache-metrics` does (every block, not a sample) and
exports the histograms under vLLM's names; hotloop scrapes them over real loopback HTTP, shows them in the
server panel, and the cache explainer says how long evicted blocks had been resident beside its own verdict.
SGLang's `cached_tokens_total{cache_source}` is read from an exposition declared as SGLang declares it.
"""

from __future__ import annotations

import asyncio

import openai
from prometheus_client import CollectorRegistry, Counter, generate_latest

from hotloop.agent.cache_explainer import CacheExplainer, WireSegments
from hotloop.core.server_watch import ServerReport
from hotloop.providers.base import ProviderOptions
from hotloop.providers.events import UsageLedger
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.server_metrics import MetricsSample, ServerWatch, duration, parse_metrics
from hotloop.providers.vllm import ServerInfo, scrape
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig
from hotloop.sim.metrics import RESIDENCY_BUCKETS
from hotloop.tui.widgets.server_panel import CACHED_FROM, KV_RESIDENCY

from support import FIXTURES, drawn, present, rows, start_sim

MODEL = "sim-fast"
LLAMA_CPP = (FIXTURES / "llamacpp" / "metrics_stock.prom").read_text()
SETTLE_SECONDS = 15.0


def provider_for(sim: EmbeddedSimulator) -> OpenAIChatProvider:
    return OpenAIChatProvider(ProviderOptions(name="local", model=MODEL, base_url=sim.base_url, max_retries=0))


async def settled(provider: OpenAIChatProvider, sim: EmbeddedSimulator) -> MetricsSample:
    """A scrape that has every eviction the simulator made: a request's last blocks are cached as it finishes."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + SETTLE_SECONDS
    while True:
        sample = present(await scrape(provider))
        if present(sample.residency).evictions == sim.server.engine.cache.evictions:
            return sample
        if loop.time() > deadline:
            raise TimeoutError(f"the scrape never caught up with {sim.server.engine.cache.evictions} evictions")
        await asyncio.sleep(0.01)


def reading(text: str, series: str) -> float:
    """One series' value summed over its label sets, as the exposition has it."""
    return sum(float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0] == series)


VLLM = ServerInfo("vllm", (), None, True)


async def test_evicted_blocks_are_timed_under_vllms_names_and_read_back() -> None:
    sim = start_sim(SimConfig(cache_blocks=24))
    provider = provider_for(sim)
    api = openai.AsyncOpenAI(base_url=sim.base_url, api_key="-", max_retries=0)
    try:
        fresh = await settled(provider, sim)
        # One prompt used three times (its blocks' reuse gaps), then others that push it out.
        for prompt in ["alpha " * 200] * 3 + [f"topic {n} " * 150 for n in range(4)]:
            await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}])
        after = await settled(provider, sim)
        _, text = await provider.fetch(sim.url + "/metrics")
    finally:
        await api.close()
        await provider.aclose()
        sim.stop()
    evicted = sim.server.engine.cache.evictions
    assert evicted > 0
    # Registered at zero before any eviction, as vLLM does with --kv-cache-metrics: reported, and none yet.
    assert present(fresh.residency).evictions == 0
    residency = present(after.residency)
    assert residency.evictions == evicted == reading(text, "vllm:kv_block_lifetime_seconds_count")
    idle, gaps = present(residency.idle), present(residency.reuse_gap)
    assert idle.count == evicted == reading(text, "vllm:kv_block_idle_before_evict_seconds_count")
    assert gaps.count > 0 and gaps.total >= 0  # the reused prompt's blocks had gaps between their uses
    # A block sits idle for part of its stay at most.
    assert 0 <= idle.total <= residency.lifetime.total == reading(text, "vllm:kv_block_lifetime_seconds_sum")
    assert [bound for bound, _ in residency.lifetime.buckets] == [*map(float, RESIDENCY_BUCKETS), float("inf")]
    assert f'vllm:kv_block_lifetime_seconds_count{{engine="0",model_name="{MODEL}"}} {float(evicted)}' in text
    stats = ServerWatch().observe(after)
    evictions = present(stats.evictions)
    assert evictions.count == evicted
    assert present(evictions.lifetime) >= present(evictions.idle) >= 0
    # vLLM's prompt sources: cached tokens are the local hits; computed ones are not a cache source.
    hits = reading(text, "vllm:prefix_cache_hits_total")
    assert hits > 0 and dict(present(after.cache_sources)) == {"external_kv_transfer": 0.0, "local_cache_hit": hits}


async def test_the_panel_shows_residency_and_sources_only_when_the_server_reports_them() -> None:
    sim = start_sim(SimConfig(cache_blocks=16))
    provider = provider_for(sim)
    api = openai.AsyncOpenAI(base_url=sim.base_url, api_key="-", max_retries=0)
    try:
        watch = ServerWatch()
        quiet = watch.observe(await settled(provider, sim))
        for prompt in ["beta " * 120] * 2 + ["gamma " * 300]:
            await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": prompt}])
        busy = watch.observe(await settled(provider, sim))
    finally:
        await api.close()
        await provider.aclose()
        sim.stop()
    before = rows(drawn(ServerReport(VLLM, sim.base_url, MODEL, quiet)))
    assert before["evictions"] == "none yet" and before["any source"] == "none yet"
    report = ServerReport(VLLM, sim.base_url, MODEL, busy)
    assert report.residency is busy.residency is not None
    panel = drawn(report)
    assert KV_RESIDENCY in panel and CACHED_FROM in panel
    figures = rows(panel)
    assert figures["evictions"] == f"{sim.server.engine.cache.evictions:,}"
    assert figures["evicted after"].endswith(" s") and figures["idle before"].endswith(" s")
    assert figures["GPU"] == "100%"
    # llama.cpp has neither family: no section, not a row of zeros.
    llama = ServerWatch().observe(parse_metrics(LLAMA_CPP, at=0))
    assert llama.residency is None and llama.evictions is None and llama.cache_sources is None
    plain = drawn(ServerReport(ServerInfo("llama.cpp", (), None, True), "http://h/v1", "m", llama))
    assert KV_RESIDENCY not in plain and CACHED_FROM not in plain


def sglang_exposition(**by_source: int) -> str:
    """`sglang:cached_tokens_total` declared as SGLang declares it: labelled by `cache_source`, bumped on a hit."""
    registry = CollectorRegistry()
    cached = Counter(
        "sglang:cached_tokens",
        "Number of cached prompt tokens by source (device/host/storage).",
        ("model_name", "engine_type", "cache_source"),
        registry=registry,
    )
    Counter(
        "sglang:prompt_tokens", "Number of prefill tokens processed.", ("model_name", "engine_type"), registry=registry
    )
    for source, tokens in by_source.items():
        cached.labels("q", "unified", source).inc(tokens)
    return generate_latest(registry).decode()


def test_sglang_cache_sources_are_read_and_shown_as_shares() -> None:
    sample = parse_metrics(sglang_exposition(device=700, host=200, storage_mooncake=100), at=0)
    assert sample.hits == 1000  # the hit rate still counts every source
    assert dict(present(sample.cache_sources)) == {"device": 700, "host": 200, "storage_mooncake": 100}
    stats = ServerWatch().observe(sample)
    assert stats.residency is None  # SGLang has no residency histograms: no section for them
    figures = rows(drawn(ServerReport(ServerInfo("sglang", (), None, True), "http://h/v1", "q", stats)))
    assert (figures["GPU"], figures["host memory"], figures["L3 mooncake"]) == ("70%", "20%", "10%")
    assert "evictions" not in figures
    # An SGLang without the breakdown counts under "total": that names no source, so no section.
    total = ServerWatch().observe(parse_metrics(sglang_exposition(total=500), at=0))
    assert CACHED_FROM not in drawn(ServerReport(ServerInfo("sglang", (), None, True), "http://h/v1", "q", total))


class Conversation:
    """One client's growing conversation, fingerprinted from its wire segments as `hotloop watch` does."""

    def __init__(self, api: openai.AsyncOpenAI) -> None:
        self.api = api
        self.messages: list[dict[str, str]] = []
        self.explainer = CacheExplainer()

    async def step(self, text: str) -> UsageLedger:
        self.messages.append({"role": "user", "content": text})
        segments = WireSegments(
            "", {}, [m["content"].encode() for m in self.messages], ["user"] * len(self.messages), b""
        )
        self.explainer.fingerprint_wire(segments, "local", MODEL, 0.0)
        response = await self.api.chat.completions.create(model=MODEL, messages=list(self.messages))  # type: ignore[arg-type]
        self.messages.append({"role": "assistant", "content": present(response.choices[0].message.content)})
        return UsageLedger.from_openai(present(response.usage).model_dump(exclude_none=True))


async def test_a_miss_after_evictions_says_how_long_the_blocks_were_resident() -> None:
    sim = start_sim(SimConfig(cache_blocks=128))
    provider = provider_for(sim)
    api = openai.AsyncOpenAI(base_url=sim.base_url, api_key="-", max_retries=0)
    chat = Conversation(api)
    try:
        first = await chat.step("the plan " * 300)
        notes = [chat.explainer.explain(first, [], False, residency=(await settled(provider, sim)).residency)]
        second = await chat.step("and then")
        settled_before = present((await settled(provider, sim)).residency)
        notes.append(chat.explainer.explain(second, [], False, residency=settled_before))
        # Another client's long prompt pushes the conversation's blocks out of the server's cache.
        await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "other " * 2500}])
        third = await chat.step("go on")
        after = present((await settled(provider, sim)).residency)
        notes.append(chat.explainer.explain(third, [], False, residency=after))
    finally:
        await api.close()
        await provider.aclose()
        sim.stop()
    assert present(second.cache_read) > 0 and not third.cache_read
    assert notes[:2] == ["", ""]  # the second step read what the first left: no miss, no server figure
    evicted = present(after.since(settled_before))
    assert evicted.count == after.evictions - settled_before.evictions > 0
    note = notes[2]
    assert note.startswith("cache miss: evicted: nothing changed, yet the server no longer had the prefix (")
    lifetime = duration(present(evicted.lifetime))
    assert f"; evicted after {lifetime} resident (server's figure; median of {evicted.count:,} sampled blocks" in note
    assert "evicted since the last step, idle " in note


def test_without_a_reading_or_a_miss_the_server_is_not_quoted() -> None:
    explainer = CacheExplainer()
    segments = WireSegments("", {}, [b"x"], ["user"], b"")
    explainer.fingerprint_wire(segments, "local", MODEL, 0.0)
    usage = UsageLedger(prompt_total=4000, cache_read=0)
    assert explainer.explain(usage, [], False) == ""  # the first step: nothing to compare with
    explainer.fingerprint_wire(WireSegments("", {}, [b"x", b"y"], ["user"] * 2, b""), "local", MODEL, 0.0)
    note = explainer.explain(UsageLedger(prompt_total=4100, cache_read=0), [], False)
    assert note.startswith("cache miss: evicted") and "server's figure" not in note  # no reading passed
