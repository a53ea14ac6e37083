"""The server panel reads each server family's own series, over real loopback HTTP.

llama.cpp's figures come from a real server's recordings (tests/fixtures/llamacpp, see
PROVENANCE.md), served as recorded; every expected figure is computed here from the recorded
text, not by hotloop. vLLM's come from the embedded simulator, SGLang's from an exposition
declared as SGLang declares it, Ollama's from its documented endpoints.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from hotloop.config import load_config
from hotloop.core import server_watch
from hotloop.core.server_watch import ServerReport
from hotloop.core.session import Session, SessionOptions
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.server_metrics import ServerStats, ServerWatch, parse_metrics
from hotloop.providers.vllm import ServerInfo, discover, scrape
from hotloop.sim.engine import SimConfig

from support import FIXTURES, drawn, present, rows, serving, start_sim, wait_until

RECORDINGS = FIXTURES / "llamacpp"
METRICS = (RECORDINGS / "metrics_stock.prom").read_text()
MODELS_TEXT, PROPS_TEXT = (RECORDINGS / "v1_models.json").read_text(), (RECORDINGS / "props.json").read_text()
MODELS, PROPS = json.loads(MODELS_TEXT), json.loads(PROPS_TEXT)


def readings(name: str, text: str = METRICS) -> list[float]:
    """A series' values in an exposition, one per line (label set): what the server said."""
    return [float(line.split()[-1]) for line in text.splitlines() if line.split("{")[0].split(" ")[0] == name]


def recorded(name: str, text: str = METRICS) -> float:
    return sum(readings(name, text))


def declares(name: str, text: str = METRICS) -> bool:
    return any(line.startswith(f"# TYPE {name} ") for line in text.splitlines())


def with_values(text: str = METRICS, **values: float) -> str:
    """The recorded exposition with some series' values changed (`llamacpp:` left out of the names)."""
    lines = []
    for line in text.splitlines(keepends=True):
        name = line.split(" ")[0].removeprefix("llamacpp:") if not line.startswith("#") else ""
        lines.append(f"llamacpp:{name} {values[name]}\n" if name in values else line)
    return "".join(lines)


def answer(content_type: str, body: str) -> Any:
    async def handler(request: web.Request) -> web.Response:
        return web.Response(body=body.encode(), headers={"Content-Type": content_type})

    return handler


@asynccontextmanager
async def serve(routes: dict[str, tuple[str, str]]) -> AsyncIterator[str]:
    """A server answering GET `path` with `(content type, body)` as given, 404 elsewhere; yields its `/v1` base URL."""
    app = web.Application()
    for path, (content_type, body) in routes.items():
        app.router.add_get(path, answer(content_type, body))
    async with serving(app) as url:
        yield url


def llama_cpp(metrics: str = METRICS, props: str = PROPS_TEXT) -> dict[str, tuple[str, str]]:
    """The recorded llama-server: its /v1/models, /props and /metrics, byte for byte unless changed."""
    return {
        "/v1/models": ("application/json", MODELS_TEXT),
        "/props": ("application/json", props),
        "/metrics": ("text/plain; version=0.0.4", metrics),
    }


async def read_server(routes: dict[str, tuple[str, str]], model: str) -> tuple[ServerInfo, ServerStats | None, str]:
    """Discover and scrape the server once through a real provider; the panel as it draws them."""
    async with serve(routes) as url:
        provider = OpenAIChatProvider(ProviderOptions(name="local", model=model, base_url=url, max_retries=0))
        try:
            info = await discover(provider)
            sample = await scrape(provider)
        finally:
            await provider.aclose()
    stats = ServerWatch().observe(sample) if sample is not None else None
    return info, stats, drawn(ServerReport(info, url, model, stats))


async def test_a_recorded_llama_cpp_server_reads_as_it_reported() -> None:
    [card] = MODELS["data"]
    info, stats, panel = await read_server(llama_cpp(), card["id"])
    assert info.kind == "llama.cpp" and info.has_metrics
    # The model is named by its file; its context is the recorded one (the whole cache is one slot's: unified KV).
    n_ctx = card["meta"]["n_ctx"]
    assert n_ctx == PROPS["default_generation_settings"]["n_ctx"] == 4096
    # The file's name, cut in the middle to the panel's 30 columns, and the context on a line of its own.
    assert card["id"].endswith("/SmolLM2-135M-Instruct.Q4_1.gguf")
    assert panel.splitlines()[1:3] == ["SmolLM2-135M-In…ruct.Q4_1.gguf", f"{n_ctx:,} ctx"]
    # prompt_tokens_total counts only what was computed: a prompt is that plus what came from the cache.
    cached, computed = recorded("llamacpp:prompt_tokens_cached_total"), recorded("llamacpp:prompt_tokens_total")
    assert (cached, computed) == (2499, 2551)
    assert stats is not None and stats.hit_rate_since_start == cached / (cached + computed)
    # One scrape: the session's figure is the server's whole life, and the last minute has nothing to compare.
    assert stats.hit_rate_recent is None
    # `running` is requests_processing (0), never n_busy_slots_per_decode (an average, recorded as 1).
    assert (stats.running, stats.waiting) == (
        recorded("llamacpp:requests_processing"),
        recorded("llamacpp:requests_deferred"),
    )
    assert (stats.running, stats.waiting) == (0, 0)
    assert recorded("llamacpp:n_busy_slots_per_decode") == 1
    # No KV-use gauge and no TTFT histogram in this build; speculative counters present, nothing drafted.
    assert not any(declares(f"llamacpp:{name}") for name in ("kv_cache_usage_ratio", "kv_cache_tokens"))
    assert not any("_bucket" in line for line in METRICS.splitlines())
    assert recorded("llamacpp:spec_decode_num_draft_tokens_total") == 0
    assert rows(panel) == {
        "server hit rate": "",
        "last 1 min": "–",
        "since start": f"{cached / (cached + computed):.0%}",
        "KV cache used": "not reported",
        "running": "0",
        "waiting": "0",
        "TTFT p50": "not reported",
        "TTFT p95": "not reported",
        "spec decoding": "no drafts",
    }
    assert rows(panel)["since start"] == "49%"


async def test_llama_cpp_speculative_decoding_is_read_from_its_counters() -> None:
    # The recorded exposition with the counters of a run that accepted 16 of 62 draft tokens in 14 drafts.
    metrics = with_values(
        spec_decode_num_draft_tokens_total=62, spec_decode_num_accepted_tokens_total=16, spec_decode_num_drafts_total=14
    )
    _, stats, panel = await read_server(llama_cpp(metrics), "any name: llama-server serves its one model")
    assert stats is not None and stats.spec_acceptance == 16 / 62 and stats.spec_length == 1 + 16 / 14
    assert rows(panel)["spec accepted"] == "26%" and rows(panel)["spec mean length"] == "2.14"
    # Whatever name the config gives, the panel names the model the server serves.
    assert panel.splitlines()[1:3] == ["SmolLM2-135M-In…ruct.Q4_1.gguf", "4,096 ctx"]


async def test_a_llama_cpp_slot_holds_its_share_of_the_context() -> None:
    # Four slots without --kv-unified: /props says what one request may hold, /v1/models the whole cache.
    props = {**PROPS, "default_generation_settings": {**PROPS["default_generation_settings"], "n_ctx": 1024}}
    info, _, panel = await read_server(llama_cpp(props=json.dumps(props)), MODELS["data"][0]["id"])
    assert info.max_model_len(MODELS["data"][0]["id"]) == 1024
    assert panel.splitlines()[2] == "1,024 ctx"


async def test_a_fresh_llama_cpp_server_has_the_series_but_no_requests() -> None:
    fresh = with_values(prompt_tokens_total=0, prompt_tokens_cached_total=0)
    _, stats, panel = await read_server(llama_cpp(fresh), MODELS["data"][0]["id"])
    assert stats is not None and stats.cache_reported and stats.hit_rate_since_start is None
    assert rows(panel)["since start"] == rows(panel)["last 1 min"] == "no requests yet"


def test_running_is_the_scrape_s_own_reading() -> None:
    """A request that ended is gone from the next scrape's figures, however soon it comes."""
    watch = ServerWatch()
    assert watch.observe(parse_metrics(with_values(requests_processing=1), at=0.0)).running == 1
    assert watch.observe(parse_metrics(METRICS, at=0.5)).running == 0


def test_the_last_minute_is_a_real_minute() -> None:
    cached, computed = recorded("llamacpp:prompt_tokens_cached_total"), recorded("llamacpp:prompt_tokens_total")

    def at(seconds: float, more_cached: float, more_computed: float) -> ServerStats:
        text = with_values(
            prompt_tokens_cached_total=cached + more_cached, prompt_tokens_total=computed + more_computed
        )
        return watch.observe(parse_metrics(text, at=seconds))

    watch = ServerWatch()
    assert at(0, 0, 0).hit_rate_recent is None  # nothing to compare with yet
    busy = at(30, 900, 100)  # 1,000 prompt tokens, 900 of them cached
    assert busy.hit_rate_recent == busy.hit_rate_since_start == 900 / 1000
    assert at(50, 900, 100).hit_rate_recent == 900 / 1000  # the requests at 0–30 s are still within the minute
    quiet = at(95, 900, 100)  # the minute since 35 s holds scrapes but no request
    assert quiet.hit_rate_recent is None and quiet.hit_rate_since_start == 900 / 1000
    again = at(100, 1000, 200)  # 200 more tokens since the 50 s scrape, 100 cached
    assert again.hit_rate_recent == 100 / 200 and again.hit_rate_since_start == 1000 / 1200
    late = at(400, 1500, 300)  # requests came, but no scrape shows when: the last one was 300 s ago
    assert late.hit_rate_recent is None and late.hit_rate_since_start == 1500 / 1800
    info = ServerInfo("llama.cpp", (), None, True)
    assert rows(drawn(ServerReport(info, "http://h/v1", "m", late)))["last 1 min"] == "–"


async def test_discovery_and_the_panel_figures_come_from_the_vllm_servers_own_endpoints() -> None:
    sim = start_sim(SimConfig(max_model_len=32_768))
    provider = OpenAIChatProvider(
        ProviderOptions(name="local", model="sim-balanced", base_url=sim.base_url, max_retries=0)
    )
    try:
        info = await discover(provider)
        watch = ServerWatch()
        watch.observe(present(await scrape(provider)))
        api = openai.AsyncOpenAI(base_url=sim.base_url, api_key="-", max_retries=0)
        for _ in range(2):
            await api.chat.completions.create(model="sim-balanced", messages=[{"role": "user", "content": "hi " * 40}])
        await api.close()
        stats = watch.observe(present(await scrape(provider)))
        _, text = await provider.fetch(sim.url + "/metrics")
    finally:
        await provider.aclose()
        sim.stop()
    panel = rows(drawn(ServerReport(info, sim.base_url, "sim-balanced", stats)))
    hits, queries = recorded("vllm:prefix_cache_hits_total", text), recorded("vllm:prefix_cache_queries_total", text)
    assert stats.hit_rate_since_start == stats.hit_rate_recent == hits / queries
    assert panel["since start"] == panel["last 1 min"] == f"{hits / queries:.0%}"
    assert panel["KV cache used"] == f"{max(readings('vllm:kv_cache_usage_perc', text)):.0%}"  # a ratio: not summed
    assert (panel["running"], panel["waiting"]) == ("0", "0")
    assert panel["TTFT p50"].endswith(" s") and panel["TTFT p95"].endswith(" s")
    assert not stats.spec_reported and not any(label.startswith("spec") for label in panel)  # none: not 0
    # The simulator speaks vLLM's dialect (kind "vllm": it reads `priority`), and its /version says what it is.
    assert (info.kind, info.label, info.healthy, info.has_metrics) == ("vllm", "hotloop's simulator", True, True)
    assert info.max_model_len("sim-balanced") == 32_768


def sglang_exposition(prompt: int = 0, cached: int = 0) -> str:
    """An exposition declared as SGLang declares it: labelled series, the cached-token counter bumped only on a hit."""
    registry, labels = CollectorRegistry(), ("model_name",)
    prompt_tokens = Counter("sglang:prompt_tokens", "Number of prefill tokens processed.", labels, registry=registry)
    cached_tokens = Counter("sglang:cached_tokens", "Number of cached prompt tokens.", labels, registry=registry)
    Histogram("sglang:time_to_first_token_seconds", "TTFT.", labels, registry=registry)
    gauges = {
        name: Gauge(f"sglang:{name}", name, labels, registry=registry)
        for name in ("num_running_reqs", "num_queue_reqs", "token_usage", "cache_hit_rate", "spec_accept_length")
    }
    for gauge in gauges.values():
        gauge.labels("q").set(0)  # the scheduler logs every gauge, 0 included
    if prompt:
        prompt_tokens.labels("q").inc(prompt)
    if cached:
        cached_tokens.labels("q").inc(cached)
    return generate_latest(registry).decode()


def test_sglang_reports_what_it_has() -> None:
    fresh = ServerWatch().observe(parse_metrics(sglang_exposition(), at=0))
    # Declared but not yet incremented is still the server's series: no requests yet, not "not reported".
    assert fresh.cache_reported and fresh.ttft_reported and fresh.hit_rate_since_start is None
    assert (fresh.running, fresh.waiting, fresh.kv_usage) == (0, 0, 0.0)
    # An accept length of 0 is speculative decoding that drafted nothing (or is off), never a mean length.
    assert fresh.spec_reported and fresh.spec_length is None
    panel = rows(drawn(ServerReport(ServerInfo("sglang", (), None, True), "http://h/v1", "q", fresh)))
    assert panel["since start"] == panel["TTFT p50"] == "no requests yet" and panel["spec decoding"] == "no drafts"
    missed = ServerWatch().observe(parse_metrics(sglang_exposition(prompt=300), at=0))
    assert missed.hit_rate_since_start == 0.0  # 300 prompt tokens, none cached: the counter never appeared
    hit = ServerWatch().observe(parse_metrics(sglang_exposition(prompt=300, cached=240), at=0))
    assert hit.hit_rate_since_start == 240 / 300  # SGLang's prompt_tokens counts the cached ones too


async def test_ollama_has_no_metrics_and_says_so() -> None:
    # Ollama's documented answers: /v1/models owned by "library", /api/version, /api/ps for loaded models.
    routes = {
        "/v1/models": ("application/json", json.dumps({"data": [{"id": "qwen2.5:0.5b", "owned_by": "library"}]})),
        "/api/version": ("application/json", '{"version":"0.12.3"}'),
        "/api/ps": ("application/json", json.dumps({"models": [{"name": "qwen2.5:0.5b", "context_length": 8192}]})),
    }
    info, stats, panel = await read_server(routes, "qwen2.5:0.5b")
    assert (info.kind, info.has_metrics, stats) == ("ollama", False, None)
    assert panel.splitlines()[1:] == ["qwen2.5:0.5b · 8,192 ctx", "", "no /metrics: every figure not reported"]
    # A model not loaded has no context yet: the panel leaves it out rather than guess.
    idle = replace(info, models=(replace(info.models[0], context=None),))
    assert drawn(ServerReport(idle, "http://h/v1", "qwen2.5:0.5b", None)).splitlines()[1] == "qwen2.5:0.5b"


async def test_running_drops_to_zero_soon_after_a_cancelled_turn(
    monkeypatch: pytest.MonkeyPatch, workspace: Path
) -> None:
    """A turn cancelled mid-answer: the panel's "running" reaches 0 at the server's pace, not the idle scrape's.

    The recorded llama-server, answering slowly, still counts the request as processing for a
    second and a half after its client has gone (as llama.cpp does while it finishes a batch),
    so the scrape that follows the turn reads 1. The idle scrape is an hour away here: only
    the scrapes that go on while the server shows a request running can see it end.
    """
    monkeypatch.setattr(server_watch, "IDLE_INTERVAL", 3600.0)
    processing = [0]

    async def chat(request: web.Request) -> web.StreamResponse:
        processing[0] = 1
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        try:
            await response.prepare(request)
            for _ in range(2000):
                delta = {"choices": [{"index": 0, "delta": {"content": " word"}}]}
                await response.write(b"data: " + json.dumps(delta).encode() + b"\n\n")
                await asyncio.sleep(0.05)
        finally:
            asyncio.get_running_loop().call_later(1.5, processing.__setitem__, 0, 0)
        return response

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=with_values(requests_processing=processing[0]), content_type="text/plain")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/models", answer("application/json", MODELS_TEXT))
    app.router.add_get("/props", answer("application/json", PROPS_TEXT))
    reports: list[ServerReport | None] = []

    def running() -> int | None:
        last = reports[-1] if reports else None
        return last.stats.running if last is not None and last.stats is not None else None

    async with serving(app) as url:
        options = SessionOptions(provider="openai", base_url=url, workspace=workspace)
        session = Session(load_config(), options, emit=lambda event: None)
        try:
            await session.open()
            session.server.follow(reports.append)
            turn = asyncio.create_task(session.turn("go"))
            await wait_until(lambda: running() == 1)
            turn.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await turn
            await wait_until(lambda: running() == 0)
        finally:
            await session.close()
