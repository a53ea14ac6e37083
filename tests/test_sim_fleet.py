"""The simulator as a fleet: replicas with their own caches behind each router, and continuous batching."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from hotloop.agent.events import StepFinished, TurnFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.server_metrics import parse_metrics
from hotloop.sim.defaults import ROUTERS
from hotloop.sim.engine import NO_LATENCY, SimConfig, SimEngine, SimRequest
from hotloop.sim.fleet import PREFIX_SLACK, EmbeddedFleet, Fleet
from hotloop.sim.template import Turn

from support import Recorder, sim_served, wait_until

INSTANT = SimConfig().with_latency(**vars(NO_LATENCY))
SYSTEM = "You review code. " * 60  # a few hundred tokens: several whole cache blocks
CHAT = "/v1/chat/completions"


def chat(text: str, system: str = SYSTEM) -> dict[str, Any]:
    messages = [{"role": "system", "content": system}, {"role": "user", "content": text}]
    return {"model": "sim-fast", "messages": messages, "stream": True, "stream_options": {"include_usage": True}}


@pytest.fixture
async def http() -> AsyncIterator[aiohttp.ClientSession]:
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session:
        yield session


async def post(http: aiohttp.ClientSession, url: str, body: dict[str, Any], **headers: str) -> int:
    """Send a streamed chat request through `url`; the cached tokens its usage reports."""
    async with http.post(f"{url}{CHAT}", json=body, headers=headers) as response:
        assert response.status == 200, await response.text()
        events = [line[6:] for line in (await response.read()).decode().splitlines() if line.startswith("data: {")]
    usage = json.loads(events[-1])["usage"]
    return int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0))


def routed(fleet: Fleet) -> dict[tuple[str, str], float]:
    """The router's own counter: requests by (replica, decision)."""
    return {
        (sample.labels["replica"], sample.labels["decision"]): sample.value
        for family in fleet.registry.collect()
        if family.name == "hotloop_router_requests"
        for sample in family.samples
        if sample.name.endswith("_total")
    }


# -- the routers ------------------------------------------------------------------------


async def test_round_robin_takes_replicas_in_turn_so_each_prefills_what_another_holds(
    http: aiohttp.ClientSession,
) -> None:
    with EmbeddedFleet(INSTANT, replicas=2, router="round-robin") as sim:
        cached = [await post(http, sim.url, chat("review the diff")) for _ in range(4)]
        assert [len(replica.requests) for replica in sim.fleet.replicas] == [2, 2]
    assert cached[0] == cached[1] == 0  # the second went to the other replica, which had nothing
    assert cached[2] > 0 and cached[3] > 0
    assert routed(sim.fleet) == {("0", "round-robin"): 2, ("1", "round-robin"): 2}


async def test_affinity_keeps_each_session_on_one_replica_and_spreads_the_sessions(
    http: aiohttp.ClientSession,
) -> None:
    with EmbeddedFleet(INSTANT, replicas=4, router="affinity", affinity_header="x-user") as sim:
        cached = [
            [await post(http, sim.url, chat(f"session {session}"), **{"x-user": f"s{session}"}) for session in range(8)]
            for _ in range(3)
        ]
        assert cached[1] == cached[2] and min(cached[1]) > 0  # each session's prompt, read whole from its replica
        homes = {
            request.headers["x-user"]: n for n, replica in enumerate(sim.fleet.replicas) for request in replica.requests
        }
        for n, replica in enumerate(sim.fleet.replicas):
            assert all(homes[request.headers["x-user"]] == n for request in replica.requests)
        assert len(set(homes.values())) > 1 and len(homes) == 8

        await post(http, sim.url, chat("no key"), **{"x-session-id": "the wrong header"})
    assert sum(v for (_, decision), v in routed(sim.fleet).items() if decision == "no-session-key") == 1


def test_affinity_without_a_key_goes_to_the_least_busy_replica() -> None:
    fleet = Fleet(INSTANT, replicas=3, router="affinity")
    fleet.busy[:] = [2, 0, 1]
    assert fleet.pick(CHAT, {}, b"{}") == (1, "no-session-key")
    assert fleet.pick(CHAT, {"x-session-id": "a"}, b"{}") == fleet.pick(CHAT, {"x-session-id": "a"}, b"{}")


def test_prefix_routing_goes_where_the_prompt_is_cached_unless_that_replica_is_too_busy() -> None:
    fleet = Fleet(INSTANT, replicas=3, router="prefix")
    known = json.dumps(chat("what does this function do?")).encode()
    assert fleet.pick(CHAT, {}, known) == (0, "least-busy")  # cached nowhere: the least busy, the first of equals
    # Replica 2 served the conversation; replica 1 only the system prompt.
    fleet.replicas[2].engine.generate(
        SimRequest("sim-fast", [Turn("system", SYSTEM), Turn("user", "what does it do")], [])
    )
    fleet.replicas[1].engine.generate(SimRequest("sim-fast", [Turn("system", SYSTEM), Turn("user", "else")], []))
    longer = fleet.replicas[2].engine.cached_prefix(SimRequest("sim-fast", [Turn("system", SYSTEM)], []))
    assert longer > 0
    continued = json.dumps(chat("what does it do")).encode()
    assert fleet.pick(CHAT, {}, continued) == (2, "cached-prefix")

    fleet.busy[:] = [0, 0, PREFIX_SLACK + 1]
    assert fleet.pick(CHAT, {}, continued) == (1, "spilled")  # the next longest prefix, on a replica with room
    fleet.busy[:] = [0, 3, PREFIX_SLACK]
    assert fleet.pick(CHAT, {}, continued) == (2, "cached-prefix")  # within the slack, the prefix wins

    assert fleet.pick(CHAT, {}, b"not json") == (0, "least-busy")
    assert fleet.pick("/v1/embeddings", {}, continued) == (0, "least-busy")


def test_a_fleet_is_refused_an_unknown_router_or_no_replicas() -> None:
    with pytest.raises(ValueError, match="router must be one of round-robin, affinity, prefix"):
        Fleet(INSTANT, 2, "random")
    with pytest.raises(ValueError, match="at least 1 replica"):
        Fleet(INSTANT, 0)


# -- the router's own endpoints -----------------------------------------------------------


async def test_the_router_answers_models_health_and_metrics_for_every_replica(http: aiohttp.ClientSession) -> None:
    with EmbeddedFleet(INSTANT, replicas=3, router="round-robin") as sim:
        for _ in range(3):
            await post(http, sim.url, chat("one request per replica"))
        async with http.get(f"{sim.base_url}/models") as models, http.get(f"{sim.url}/health") as health:
            assert [m["id"] for m in (await models.json())["data"]] == list(INSTANT.models) and health.status == 200
        async with http.post(f"{sim.base_url}/embeddings", json={}) as unknown:
            assert unknown.status == 404
        async with http.get(f"{sim.url}/metrics") as response:
            text = await response.text()
        replicas = sim.fleet.replicas

    families = {family.name: family for family in text_string_to_metric_families(text)}
    queries = [s for s in families["vllm:prefix_cache_queries"].samples if s.name.endswith("_total")]
    assert {s.labels["replica"] for s in queries} == {"0", "1", "2"}
    for n, replica in enumerate(replicas):
        own = sum(s.value for s in queries if s.labels["replica"] == str(n))
        assert own == replica.engine.cache.queries > 0
    router = [s for s in families["hotloop_router_requests"].samples if s.name.endswith("_total")]
    assert sum(s.value for s in router) == 4  # the embeddings request too: routed, then refused by its replica
    # hotloop's server panel reads the fleet as one server: the replicas' series add up.
    sample = parse_metrics(text, at=0.0)
    assert sample.queries == sum(r.engine.cache.queries for r in replicas)
    assert sample.hits == sum(r.engine.cache.hits for r in replicas)


# -- agents through the fleet ----------------------------------------------------------------


def provider_on(sim: EmbeddedFleet, protocol: str, stored: bool) -> Provider:
    if protocol == "anthropic":
        return AnthropicProvider(
            ProviderOptions(name="a", model="sim-fast", base_url=sim.url, affinity_header="x-session-id")
        )
    if protocol == "responses":
        return OpenAIResponsesProvider(
            ProviderOptions(name="r", model="sim-fast", base_url=sim.base_url, affinity_header="x-session-id"),
            previous_response_id=stored,
        )
    return OpenAIChatProvider(
        ProviderOptions(name="o", model="sim-fast", base_url=sim.base_url, affinity_header="x-session-id")
    )


@pytest.mark.parametrize("router", ROUTERS)
@pytest.mark.parametrize("protocol", ["openai", "responses", "anthropic"])
async def test_an_agent_runs_through_each_router_and_the_keyed_ones_keep_its_cache(
    router: str, protocol: str, workspace: Path
) -> None:
    (workspace / "README.md").write_text("# Demo\n\nTODO: docs\n")
    with EmbeddedFleet(INSTANT, replicas=3, router=router) as sim:
        # Behind a keyed router, a Responses request may continue a response its replica stored.
        provider = provider_on(sim, protocol, stored=router != "round-robin")
        recorder = Recorder()
        agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace, cache_key="s-1")
        try:
            await asyncio.wait_for(agent.run_turn("read README.md then grep for TODO"), 30)
        finally:
            await provider.aclose()
        served = [len(replica.requests) for replica in sim.fleet.replicas]
    assert [t.reason for t in recorder.of(TurnFinished)] == ["answer"]
    steps = recorder.of(StepFinished)
    assert len(steps) == 3 == sum(served)
    if router == "round-robin":
        assert served == [1, 1, 1]
    else:
        assert sorted(served) == [0, 0, 3]  # one replica served the whole turn
        if protocol != "anthropic":  # Anthropic's prompts here are under its minimum cacheable length
            assert all(s.usage is not None and (s.usage.cache_read or 0) > 0 for s in steps[1:])


# -- continuous batching -------------------------------------------------------------------


def generation_on(engine: SimEngine, text: str) -> Any:
    return engine.generate(SimRequest("sim-fast", [Turn("user", text)], []))


def test_each_request_decoding_at_once_slows_every_token_by_the_batch_slowdown() -> None:
    engine = SimEngine(SimConfig(batch_slowdown=0.5))
    base = engine.config.models["sim-fast"].decode_per_token
    first, second, third = (generation_on(engine, f"ask {n}") for n in range(3))
    assert engine.pace(first) == base  # alone on the server
    engine.start_decoding(first)
    engine.start_decoding(second)
    assert engine.pace(first) == engine.pace(second) == base * 1.5
    assert engine.pace(third) == base * 2.0  # still prefilling: when it joins, the batch is three
    engine.start_decoding(third)
    engine.start_decoding(third)  # said twice, counted once
    assert engine.decoding == 3 and engine.pace(third) == base * 2.0
    engine.finish(second)
    engine.abort(third)
    engine.abort(third)
    assert engine.decoding == 1 and engine.pace(first) == base


def test_batching_off_or_no_latency_leaves_the_pace_alone() -> None:
    for config, expected in ((SimConfig(batch_slowdown=0), None), (INSTANT, 0.0)):
        engine = SimEngine(config)
        crowd = [generation_on(engine, f"ask {n}") for n in range(8)]
        for generation in crowd:
            engine.start_decoding(generation)
        pace = crowd[0].profile.decode_per_token if expected is None else expected
        assert all(engine.pace(g) == pace for g in crowd)


async def test_concurrent_streams_leave_the_batch_empty_when_done(http: aiohttp.ClientSession) -> None:
    config = SimConfig(batch_slowdown=0.02).with_latency(ttft=0, prefill_per_token=0, decode_per_token=0.001)
    with EmbeddedFleet(config, replicas=2, router="round-robin") as sim:
        await asyncio.gather(*(post(http, sim.url, chat(f"write 30 words about {n}")) for n in range(8)))
        # A replica leaves the batch once its handler ends, which can be just after the client read the last byte.
        await wait_until(
            lambda: [replica.engine.decoding for replica in sim.fleet.replicas] == [0, 0], what="the batches to empty"
        )
        assert [len(replica.requests) for replica in sim.fleet.replicas] == [4, 4]


# -- hotloop sim serve --replicas -------------------------------------------------------------


async def test_sim_serve_runs_a_fleet_behind_the_router_it_is_given(http: aiohttp.ClientSession) -> None:
    with sim_served("--replicas", "3", "--router", "affinity", "--affinity-header", "x-conversation") as (line, v1):
        assert "3 replicas behind the affinity router on x-conversation" in line
        url = v1.removesuffix("/v1")
        for _ in range(2):
            await post(http, url, chat("hello"), **{"x-conversation": "c-1"})
        async with http.get(f"{url}/metrics") as response:
            text = await response.text()
        router = [
            s
            for family in text_string_to_metric_families(text)
            if family.name == "hotloop_router_requests"
            for s in family.samples
            if s.name.endswith("_total")
        ]
        assert [(s.labels["decision"], s.value) for s in router] == [("session-key", 2)]
