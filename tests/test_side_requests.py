"""Side requests (auto's classifier, titles) on every protocol: sent with caps the real APIs accept, through each
protocol's SDK client over loopback to the simulator, which refuses what the APIs refuse."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotloop.agent.events import SessionTitled, StepFinished
from hotloop.config import Choice, load_config, resolve
from hotloop.core.routing import Router
from hotloop.core.runtime import Runtime

from support import Recorder, present

FAST = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
TIER_NAMES = ("fast", "balanced", "strong")


def tiers_on(provider: str) -> str:
    return "".join(f'[tiers.{name}]\nprovider = "{provider}"\nmodel = "sim-{name}"\n' for name in TIER_NAMES)


@pytest.mark.parametrize(
    ("provider", "extra"),
    [
        ("sim", ""),
        # The classifier asks for 4 tokens: the Responses API refuses fewer than 16.
        ("sim-responses", ""),
        # Anthropic refuses a `max_tokens` not above the thinking budget: a title's 24 with a budget of 1,024.
        ("sim-anthropic", "[providers.sim-anthropic]\nthinking_budget = 1024\n"),
    ],
)
async def test_the_classifier_and_the_title_are_accepted_on_every_protocol(
    isolated_home: Path, workspace: Path, provider: str, extra: str
) -> None:
    """auto's classifier routes the turn (no "classifier failed") and the session gets its title, on each protocol,
    with the helper tier on the same provider as the conversation."""
    (isolated_home / "config.toml").write_text(FAST + tiers_on(provider) + extra)
    config = load_config()
    runtime = Runtime(config)
    try:
        agent_provider = await runtime.connect(resolve(config, Choice(tier="auto")))
        recorder = Recorder()
        router = Router(config, runtime, auto=True)
        agent = router.new_agent(agent_provider, emit=recorder, workspace=workspace)
        await router.turn(agent, "hi there!")
        await router.side_jobs.settle(30)
        requests = list(present(runtime.simulator).server.requests)
    finally:
        await runtime.aclose()
    (step, *_) = recorder.of(StepFinished)
    assert step.route == "auto: simple → fast"
    (titled,) = recorder.of(SessionTitled)
    assert titled.title and titled.model == "sim-fast"
    assert {r.status for r in requests} == {200} and len(requests) >= 3  # classify, answer, title
