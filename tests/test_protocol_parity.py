"""The three protocols alike on a server someone runs: helper requests keep the conversation's prefix, a
configured server's tiers are its own models, and `auto` asks nothing where there is nothing to choose."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import SessionTitled, StepFinished
from hotloop.agent.loop import Agent
from hotloop.config import TIER_NAMES, Choice, Config, ProviderSettings, RoutingSettings, SimSettings, Tier, resolve
from hotloop.config.settings import BUILTIN_PROVIDERS
from hotloop.core.routing import Router
from hotloop.core.runtime import Runtime
from hotloop.core.side_jobs import CLASSIFY_ASK, TITLE, TITLE_ASK
from hotloop.sim.embedded import EmbeddedSimulator

from support import Recorder, present

PROMPT = "Please read README.md, then grep for TODO"


def quick(tmp_path: Path, **fields: Any) -> Config:
    sim = SimSettings(ttft_ms=0, prefill_us_per_token=0, decode_ms_per_token=0)
    return Config(path=tmp_path / "config.toml", loaded=False, sim=sim, **fields)


async def routed(config: Config, workspace: Path, choice: Choice) -> tuple[Agent, Router, Recorder]:
    runtime = Runtime(config)
    provider = await runtime.connect(resolve(config, choice))
    router = Router(config, runtime, auto=choice.tier == "auto")
    recorder = Recorder()
    return router.new_agent(provider, emit=recorder, workspace=workspace), router, recorder


def unmarked(value: Any) -> Any:
    """A request's JSON without Anthropic's `cache_control` markers: they move each request, and are no content."""
    if isinstance(value, dict):
        return {key: unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [unmarked(item) for item in value]
    return value


@pytest.mark.parametrize(("provider", "key"), [("sim-anthropic", "messages"), ("sim-responses", "input")])
async def test_a_title_keeps_the_conversations_prefix_on_anthropic_and_responses(
    tmp_path: Path, workspace: Path, provider: str, key: str
) -> None:
    """It went out as a fresh prompt on these two (only Chat reused the prefix): 455 uncached tokens on llama.cpp,
    and on one slot the conversation evicted, the next turn recomputing all of it."""
    tiers = {name: Tier(name, provider, f"sim-{name}") for name in TIER_NAMES}
    agent, router, recorder = await routed(quick(tmp_path, tiers=tiers), workspace, Choice(tier="fast"))
    try:
        await router.turn(agent, PROMPT)
        await router.side_jobs.settle(30)  # a bound, not a wait: it returns when the job is done
        requests = list(present(router.runtime.simulator).server.requests)
    finally:
        await router.runtime.aclose()
    *_, answered, title = requests
    assert [titled.model for titled in recorder.of(SessionTitled)] == ["sim-fast"]
    sent, conversation = (unmarked(json.loads(request.body)) for request in (title, answered))
    assert TITLE not in json.dumps(sent)  # not the fresh prompt
    assert sent[key][: len(conversation[key])] == conversation[key]  # the conversation's request, then more
    assert sent["tools"] == conversation["tools"]
    assert TITLE_ASK in json.dumps(sent[key][-1])
    assert title.cached_tokens >= answered.prompt_tokens - 16  # it read the conversation from the cache


async def test_a_configured_self_hosted_providers_tiers_are_its_own_models(
    tmp_path: Path, workspace: Path, sim: EmbeddedSimulator
) -> None:
    """`[providers.local]` on a server someone runs, without --base-url: titles went to the embedded simulator as
    `sim-fast`; now every tier left at its default is on that server, fitted to the models it lists."""
    local = ProviderSettings("local", "openai", base_url=sim.base_url, default_model="sim-balanced")
    config = quick(tmp_path, providers={**BUILTIN_PROVIDERS, "local": local}, default_provider="local")
    config, choice = config.pointed_at(Choice())
    assert {tier.provider for tier in config.tiers.values()} == {"local"}
    runtime = Runtime(config)
    try:
        await runtime.fit_tiers(resolve(config, choice))
        agent, router, recorder = await routed(runtime.config, workspace, choice)
        await router.turn(agent, PROMPT)
        await router.side_jobs.settle(30)
        await router.runtime.aclose()
    finally:
        await runtime.aclose()
    assert runtime.simulator is None and router.runtime.simulator is None  # never started
    assert [titled.title for titled in recorder.of(SessionTitled)] == ["Read README.md"]
    # On the server the session is on: its fast model isn't the session's, so the title is a fresh prompt there.
    assert [request.model for request in sim.server.requests if TITLE.encode() in request.body] == ["sim-fast"]


async def test_auto_on_a_one_model_server_asks_no_classifier(tmp_path: Path, workspace: Path) -> None:
    """Every tier on one model: the classifier's answer can't change the model, so it isn't asked (1.1 s a turn)."""
    one = {name: Tier(name, "sim", "sim-balanced") for name in TIER_NAMES}
    config = quick(tmp_path, tiers=one, routing=RoutingSettings(titles=False))  # only the turns' requests, then
    agent, router, recorder = await routed(config, workspace, Choice(tier="auto"))
    try:
        await router.turn(agent, "hi there!")
        await router.turn(agent, PROMPT)
        requests = list(present(router.runtime.simulator).server.requests)
    finally:
        await router.runtime.aclose()
    assert not [request for request in requests if CLASSIFY_ASK.encode() in request.body]
    assert len(requests) == len(recorder.of(StepFinished))  # the turns' own steps, nothing else
    assert {step.route for step in recorder.of(StepFinished)} == {"auto: fast = strong, not asked"}


def test_default_tiers_stay_on_the_simulator_for_a_hosted_api(tmp_path: Path) -> None:
    config = quick(tmp_path, default_provider="openai")
    assert config.pointed_at(Choice())[0].tiers == config.tiers


@pytest.mark.parametrize("side", ["sim-anthropic", "sim-responses"])
def test_default_tiers_follow_the_simulators_protocol_chosen(tmp_path: Path, side: str) -> None:
    """Started on the simulator's Anthropic side, `/tier fast` went back to its Chat side (and titles with it)."""
    config = quick(tmp_path, default_provider=side)
    assert {tier.provider for tier in config.pointed_at(Choice())[0].tiers.values()} == {side}
