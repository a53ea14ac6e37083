"""Anthropic's cache diagnostics: the beta header and `diagnostics` sent when configured, the server's
`cache_miss_reason` parsed and shown beside hotloop's own verdict, against the simulator's Anthropic side."""

from __future__ import annotations

import json
from pathlib import Path

from hotloop.agent.cache_explainer import CacheExplainer
from hotloop.agent.events import ResponseFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.anthropic import CACHE_DIAGNOSIS_BETA, AnthropicProvider, DiagnosedUsage
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.sim.server import RecordedRequest

from support import Recorder, sim_with_scenario

# Long enough to be cached on its own (the simulator keeps Anthropic's 1,024-token minimum).
SYSTEM = "\n".join(f"Rule {n}: answer plainly, and name the file and line you mean." for n in range(1, 121))


async def three_turns(tmp_path: Path, diagnostics: bool) -> tuple[list[ResponseFinished], list[RecordedRequest]]:
    """Two turns with the same system prompt, then one after its third line changed."""
    sim = sim_with_scenario(tmp_path, [{"text": "one"}, {"text": "two"}, {"text": "three"}])
    options = ProviderOptions("sim-anthropic", "sim-fast", base_url=sim.url, max_retries=0, cache_min_tokens=1024)
    provider = AnthropicProvider(options, max_tokens=1024, cache_diagnostics=diagnostics)
    recorder = Recorder()
    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=tmp_path, system=SYSTEM)
    try:
        await agent.run_turn("first")
        await agent.run_turn("second")
        agent.system = SYSTEM.replace("Rule 3: answer plainly", "Rule 3: answer in verse")
        await agent.run_turn("third")
    finally:
        await provider.aclose()
        sim.stop()
    return recorder.of(ResponseFinished), list(sim.server.requests)


async def test_the_servers_reason_stands_beside_hotloops_verdict(tmp_path: Path) -> None:
    responses, requests = await three_turns(tmp_path, diagnostics=True)
    assert all(request.headers.get("anthropic-beta") == CACHE_DIAGNOSIS_BETA for request in requests)
    previous = [json.loads(request.body)["diagnostics"]["previous_message_id"] for request in requests]
    assert previous[0] is None and all(isinstance(named, str) and named.startswith("msg_") for named in previous[1:])
    assert previous[1] != previous[2]  # each request names the response just before it

    first, second, third = (response.usage for response in responses)
    # A first turn has nothing to compare with, and a second that only extends the first diverged nowhere.
    assert isinstance(first, DiagnosedUsage) and first.miss_reason == ""
    assert isinstance(second, DiagnosedUsage) and second.miss_reason == "" and responses[1].cache_note == ""
    assert isinstance(third, DiagnosedUsage) and third.miss_reason == "system_changed"
    assert third.missed is not None and third.missed > 1024
    note = responses[2].cache_note
    assert note.startswith("cache miss: system prompt changed at line 3 (")
    assert f"; Anthropic's diagnostics: system_changed, {third.missed:,} tokens" in note
    assert "disagrees" not in note


async def test_without_the_setting_no_header_is_sent_and_no_field_comes_back(tmp_path: Path) -> None:
    responses, requests = await three_turns(tmp_path, diagnostics=False)
    assert all("anthropic-beta" not in request.headers for request in requests)
    assert all("diagnostics" not in json.loads(request.body) for request in requests)
    assert not any(isinstance(response.usage, DiagnosedUsage) for response in responses)
    assert responses[2].cache_note.startswith("cache miss: system prompt changed at line 3 (")
    assert "Anthropic's diagnostics" not in responses[2].cache_note


def test_a_server_reason_that_differs_from_hotloops_comparison_is_said() -> None:
    """The server blames the tools where hotloop saw the system prompt change: the note says they disagree."""
    explainer = CacheExplainer()
    messages = (UserMessage("hello"),)
    explainer.fingerprint(ChatRequest(SYSTEM, (), messages), "anthropic", "claude", 0.0)
    explainer.explain(DiagnosedUsage(prompt_total=3000, cache_read=0, cache_write=3000), [], anthropic=True)
    explainer.fingerprint(ChatRequest(SYSTEM + "\nRule 121: be brief.", (), messages), "anthropic", "claude", 1.0)
    usage = DiagnosedUsage(prompt_total=3010, cache_read=0, cache_write=3010, miss_reason="tools_changed", missed=3010)
    note = explainer.explain(usage, [], anthropic=True)
    assert note.startswith("cache miss: system prompt changed at line 121")
    assert note.endswith(
        "Anthropic's diagnostics: tools_changed, 3,010 tokens (hotloop's comparison disagrees: system changed)"
    )
