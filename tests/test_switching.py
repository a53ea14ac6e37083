"""One conversation across providers: rendered per protocol, repaired when broken, and what a switch costs."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

from hotloop.agent.events import Notice, StepFinished, ToolFinished, fan_out
from hotloop.agent.loop import Agent
from hotloop.agent.prompt import system_prompt
from hotloop.config import Choice, Config, SimSettings
from hotloop.core.runtime import Runtime
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolCall,
    ToolResultMessage,
    ToolSpec,
    UserMessage,
    portable_call_id,
)
from hotloop.providers.events import ReasoningSignature
from hotloop.sessions.log import SessionLog
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.server import RecordedRequest

from support import Recorder, present, scenario_file

# The simulator's generation prompt: the only part of an Anthropic prompt after its newest breakpoint.
GENERATION_PROMPT_TOKENS = 4


def sim_config(tmp_path: Path, scenario: list[dict[str, Any]] | None = None, cache_min_tokens: int = 256) -> Config:
    sim = SimSettings(
        ttft_ms=0,
        prefill_us_per_token=0,
        decode_ms_per_token=0,
        cache_min_tokens=cache_min_tokens,
        scenario=scenario_file(tmp_path, scenario) if scenario else None,
    )
    return Config(path=tmp_path / "config.toml", loaded=False, sim=sim)


async def agent_on(runtime: Runtime, provider: str, workspace: Path) -> tuple[Agent, Recorder]:
    from hotloop.config import resolve

    recorder = Recorder()
    connected = await runtime.connect(resolve(runtime.config, Choice(provider=provider)))
    return Agent(connected, runtime.tools, emit=recorder, workspace=workspace), recorder


def steps_of(recorder: Recorder, turn: int) -> list[StepFinished]:
    return [step for step in recorder.of(StepFinished) if step.turn == turn]


async def test_openai_to_anthropic_and_back_keeps_one_conversation(tmp_path: Path, workspace: Path) -> None:
    runtime = Runtime(sim_config(tmp_path))
    try:
        agent, recorder = await agent_on(runtime, "sim", workspace)
        assert (await agent.run_turn("read README.md then grep for TODO")).reason == "answer"
        to_anthropic = await runtime.switch(agent, Choice(provider="sim-anthropic"))
        assert (await agent.run_turn("read pyproject.toml and notes.txt")).reason == "answer"
        back = await runtime.switch(agent, Choice(provider="sim"))
        assert (await agent.run_turn("list the files in .")).reason == "answer"
    finally:
        await runtime.aclose()

    assert not recorder.of(Notice)
    assert all(any(step.tool_count for step in steps_of(recorder, turn)) for turn in (1, 2, 3))
    assert {tool.status for tool in recorder.of(ToolFinished)} == {"ok"}
    requests = list(present(runtime.simulator).server.requests)
    assert [r.path for r in requests] == ["/v1/chat/completions"] * 3 + ["/v1/messages"] * 2 + [
        "/v1/chat/completions"
    ] * 2
    assert len(requests) == len(recorder.of(StepFinished))  # every request was accepted
    # Each provider saw the whole conversation: the Anthropic request carries turn 1's calls and results.
    first_anthropic = json.loads(requests[3].body)
    uses = [b for m in first_anthropic["messages"] for b in m["content"] if b["type"] == "tool_use"]
    results = [b for m in first_anthropic["messages"] for b in m["content"] if b["type"] == "tool_result"]
    assert len(uses) == len(results) == 2 and {b["id"] for b in uses} == {b["tool_use_id"] for b in results}
    # vLLM's 46-character call ids went back to OpenAI's protocol within its 40-character limit.
    last_openai = json.loads(requests[-1].body)
    ids = [c["id"] for m in last_openai["messages"] for c in m.get("tool_calls", [])]
    assert len(ids) == 5 and all(len(i) <= 40 for i in ids)

    # The second Anthropic step reads the first one's prefix from the cache.
    first, second = (present(step.usage) for step in steps_of(recorder, 2))
    assert second.cache_read == present(first.prompt_total) - GENERATION_PROMPT_TOKENS

    # The cost of each switch: the conversation so far, all cold on a new provider...
    last_of_turn_1 = present(steps_of(recorder, 1)[-1].usage)
    assert (
        to_anthropic.context_tokens
        == to_anthropic.cold_tokens
        == present(last_of_turn_1.prompt_total) + present(last_of_turn_1.output)
    )
    # ...and only what was added since, on a provider that has seen the start.
    last_of_turn_2 = present(steps_of(recorder, 2)[-1].usage)
    assert back.context_tokens == present(last_of_turn_2.prompt_total) + present(last_of_turn_2.output)
    assert back.cold_tokens == back.context_tokens - present(to_anthropic.context_tokens)
    assert (back.previous_provider, back.provider) == ("sim-anthropic", "sim")


async def test_chat_responses_anthropic_responses_keeps_one_valid_conversation(tmp_path: Path, workspace: Path) -> None:
    """Every request accepted on every protocol; reasoning a protocol can't carry is dropped for it, and
    the Responses API gets its own reasoning items back when the conversation returns to it."""
    from msgspec import structs

    config = sim_config(tmp_path)
    providers = dict(config.providers)
    providers["sim-responses"] = structs.replace(providers["sim-responses"], reasoning_summary=True)
    providers["sim-anthropic"] = structs.replace(providers["sim-anthropic"], thinking_budget=1024, max_tokens=4096)
    runtime = Runtime(structs.replace(config, providers=providers))
    try:
        agent, recorder = await agent_on(runtime, "sim", workspace)
        assert (await agent.run_turn("read README.md then grep for TODO")).reason == "answer"
        for provider, prompt in (
            ("sim-responses", "read pyproject.toml"),
            ("sim-anthropic", "read notes.txt"),
            ("sim-responses", "list the files in ."),
        ):
            await runtime.switch(agent, Choice(provider=provider))
            assert (await agent.run_turn(prompt)).reason == "answer"
    finally:
        await runtime.aclose()

    assert not recorder.of(Notice)
    requests = list(present(runtime.simulator).server.requests)
    assert len(requests) == len(recorder.of(StepFinished))  # every request was accepted
    paths = [path for path, _ in itertools.groupby(r.path for r in requests)]
    assert paths == ["/v1/chat/completions", "/v1/responses", "/v1/messages", "/v1/responses"]
    answers = [m for m in agent.messages if isinstance(m, AssistantMessage)]
    assert any(m.reasoning_items for m in answers) and any(m.thinking for m in answers)
    # Back on Responses, its first request carries turn 2's reasoning items verbatim and no thinking signature.
    back = next(r for r in requests[::-1] if r.path == "/v1/responses" and b'"list the files in .' in r.body)
    turn_2_items = [item for m in answers for item in m.reasoning_items if item.encode() in requests_of(requests, 2)]
    assert turn_2_items and all(item.encode() in back.body for item in turn_2_items)
    assert b"signature" not in back.body


def requests_of(requests: list[RecordedRequest], turn: int) -> bytes:
    """Every request body of the `turn`-th run of consecutive requests to one path, joined."""
    runs = [list(group) for _, group in itertools.groupby(requests, key=lambda r: r.path)]
    return b"".join(r.body for r in runs[turn - 1])


async def test_a_broken_history_is_repaired_before_sending_and_the_log_says_so(tmp_path: Path, workspace: Path) -> None:
    runtime = Runtime(sim_config(tmp_path))
    log = SessionLog.create(tmp_path / "sessions", provider="sim-anthropic", model="sim-balanced", workspace=workspace)
    try:
        agent, recorder = await agent_on(runtime, "sim-anthropic", workspace)
        agent.emit = fan_out(recorder, log.write)
        read = ToolCall("toolu_a", "read_file", '{"path": "README.md"}')
        lost = ToolCall("toolu_b", "read_file", '{"path": "notes.txt"}')
        agent.messages = [
            UserMessage("read README.md and notes.txt"),
            AssistantMessage(tool_calls=(read, lost), interrupted=True),
            ToolResultMessage("toolu_a", "read_file", "# Demo"),
            ToolResultMessage("toolu_zz", "grep", "a result nobody asked for"),
        ]
        finished = await agent.run_turn("go on")
    finally:
        log.close()
        await runtime.aclose()

    assert finished.reason == "answer"
    [notice] = recorder.of(Notice)
    assert notice.level == "warning" and notice.message.startswith("repaired the conversation before sending it: ")
    assert "added an error result for call toolu_b (read_file)" in notice.message
    assert "dropped a result for call toolu_zz (grep)" in notice.message
    assert any(b'"type":"notice"' in line and b"toolu_zz" in line for line in log.path.read_bytes().splitlines())
    assert [type(m).__name__ for m in agent.messages[:4]] == [
        "UserMessage",
        "AssistantMessage",
        "ToolResultMessage",
        "ToolResultMessage",
    ]
    repaired = agent.messages[3]
    assert isinstance(repaired, ToolResultMessage) and repaired.is_error and repaired.call_id == "toolu_b"


async def test_overloaded_mid_stream_keeps_the_partial_answer_marked(tmp_path: Path, workspace: Path) -> None:
    scenario = [{"text": "Here is the first half of", "error": "overloaded_error"}, {"text": "Recovered."}]
    runtime = Runtime(sim_config(tmp_path, scenario))
    try:
        agent, recorder = await agent_on(runtime, "sim-anthropic", workspace)
        failed = await agent.run_turn("write something")
        recovered = await agent.run_turn("try again")
    finally:
        await runtime.aclose()

    assert failed.reason == "error" and recovered.reason == "answer"
    [error] = [n for n in recorder.of(Notice) if n.level == "error"]
    assert error.message == (
        "sim-anthropic (the embedded simulator) is overloaded and stopped mid-answer (Overloaded); "
        "try again, or switch with /provider"
    )
    partial = agent.messages[1]
    assert isinstance(partial, AssistantMessage) and partial.interrupted and partial.text == "Here is the first half of"
    # The partial answer went back to the API with the next turn, which accepted it.
    sent = json.loads(present(runtime.simulator).server.requests[-1].body)["messages"]
    assert sent[1] == {"role": "assistant", "content": [{"type": "text", "text": "Here is the first half of"}]}


async def test_thinking_blocks_go_back_signed_through_a_tool_loop(sim: EmbeddedSimulator, workspace: Path) -> None:
    provider = AnthropicProvider(
        ProviderOptions(name="claude", model="sim-fast", base_url=sim.url, max_retries=0),
        thinking_budget=1024,
        max_tokens=4096,
    )
    recorder = Recorder()
    from hotloop.agent.tools.builtins import builtin_tools
    from hotloop.agent.tools.registry import ToolRegistry

    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace)
    try:
        finished = await agent.run_turn("read README.md")
    finally:
        await provider.aclose()

    # The simulator rejects a tool loop whose assistant message does not start with its signed thinking.
    assert finished.reason == "answer" and finished.steps == 2
    assert len(recorder.of(ReasoningSignature)) == 2
    first_reply = agent.messages[1]
    assert isinstance(first_reply, AssistantMessage) and len(first_reply.thinking) == 1
    assert first_reply.thinking[0].text == first_reply.reasoning and first_reply.thinking[0].signature


def anthropic_request_body(**options: Any) -> dict[str, Any]:
    provider = AnthropicProvider(ProviderOptions(name="a", model="m", base_url="http://127.0.0.1:9"), **options)
    tools = tuple(ToolSpec(name, "d", {"type": "object"}) for name in ("grep", "read_file"))
    call = ToolCall("toolu_1", "grep", '{"pattern": "x"}')
    messages = (
        UserMessage("find x"),
        AssistantMessage("Looking.", tool_calls=(call,)),
        ToolResultMessage("toolu_1", "grep", "x:1"),
        AssistantMessage("Found it."),
        UserMessage("thanks"),
    )
    body: dict[str, Any] = json.loads(
        provider.request_body(ChatRequest(system=system_prompt(), tools=tools, messages=messages))
    )
    return body


def breakpoints(body: dict[str, Any]) -> list[str]:
    found = [f"tool {t['name']}" for t in body.get("tools", []) if "cache_control" in t]
    found += ["system" for b in body["system"] if "cache_control" in b]
    found += [f"message {n}" for n, m in enumerate(body["messages"]) for b in m["content"] if "cache_control" in b]
    return found


def test_breakpoints_sit_on_the_static_prefix_and_the_newest_messages() -> None:
    body = anthropic_request_body()
    assert breakpoints(body) == ["tool read_file", "system", "message 2", "message 4"]
    assert body["messages"][4]["content"][-1]["cache_control"] == {"type": "ephemeral"}
    # Tool results come first in their user message, with is_error only when set.
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "x:1", "cache_control": {"type": "ephemeral"}}
    ]
    assert breakpoints(anthropic_request_body(cache_breakpoints=2)) == ["system", "message 4"]
    assert breakpoints(anthropic_request_body(cache_breakpoints=0)) == []
    hour = anthropic_request_body(cache_ttl="1h")
    assert hour["system"][0]["cache_control"] == {"type": "ephemeral", "ttl": "1h"}


def test_moving_breakpoints_leave_the_content_byte_stable() -> None:
    """Step after step, the request minus its cache_control markers only grows at the end."""
    provider = AnthropicProvider(ProviderOptions(name="a", model="m", base_url="http://127.0.0.1:9"))
    history: list[Message] = [UserMessage("find x")]
    bodies = []
    for n in range(4):
        bodies.append(provider.request_body(ChatRequest(system="s", tools=(), messages=tuple(history))))
        call = ToolCall(f"toolu_{n}", "grep", "{}")
        history += [AssistantMessage(f"step {n}", tool_calls=(call,)), ToolResultMessage(call.id, "grep", "r")]
    plain = [body.replace(b',"cache_control":{"type":"ephemeral"}', b"") for body in bodies]
    assert all(later.startswith(earlier[:-2]) for earlier, later in itertools.pairwise(plain))
    assert all(body.count(b"cache_control") <= 4 for body in bodies)


def test_call_ids_are_portable_and_stable() -> None:
    assert portable_call_id("call_abc-1") == "call_abc-1"
    vllm = "chatcmpl-tool-" + "a" * 32
    assert portable_call_id(vllm) == portable_call_id(vllm) != vllm and len(portable_call_id(vllm)) <= 40
    assert portable_call_id("functions.get_weather:0").startswith("call_")


async def test_prompt_cache_key_goes_only_where_asked(sim: EmbeddedSimulator, workspace: Path) -> None:
    from hotloop.providers.openai_chat import OpenAIChatProvider

    for routed in (True, False):
        provider = OpenAIChatProvider(
            ProviderOptions(name="o", model="sim-fast", base_url=sim.base_url, max_retries=0), prompt_cache_key=routed
        )
        agent = Agent(
            provider,
            Runtime(sim_config(workspace)).tools,
            emit=Recorder(),
            workspace=workspace,
            cache_key="session-123",
        )
        await agent.run_turn("hello")
        await provider.aclose()
        body = json.loads(sim.server.requests[-1].body)
        assert body.get("prompt_cache_key") == ("session-123" if routed else None)


def test_official_openai_routes_by_session_and_others_do_not() -> None:
    from hotloop.config import BUILTIN_PROVIDERS, ProviderSettings

    assert BUILTIN_PROVIDERS["openai"].sends_prompt_cache_key
    assert not ProviderSettings("vllm", "openai", "http://localhost:8000/v1").sends_prompt_cache_key
    assert ProviderSettings("gw", "openai", "http://gw/v1", prompt_cache_key=True).sends_prompt_cache_key
    assert BUILTIN_PROVIDERS["anthropic"].key_required
    assert not ProviderSettings("gw", "anthropic", "http://gateway.local").key_required


def test_the_switch_cost_reads_right_in_every_case() -> None:
    from hotloop.agent.switching import CacheWarmth, describe_cost
    from hotloop.providers.events import UsageLedger

    warmth = CacheWarmth()
    assert describe_cost(*warmth.cost("a", "m")) == "nothing to prefill yet"
    warmth.record("a", "m", UsageLedger(prompt_total=1_000, output=200))
    assert (
        describe_cost(*warmth.cost("b", "m"))
        == "~1,200 prompt tokens to prefill uncached (its cache is cold for this conversation)"
    )
    assert describe_cost(*warmth.cost("a", "m")).startswith("none of the ~1,200 prompt tokens is new to its cache")
    warmth.record("b", "m", UsageLedger(prompt_total=1_500, output=100))
    assert describe_cost(*warmth.cost("a", "m")) == (
        "~400 of ~1,600 prompt tokens to prefill uncached (the rest may still be cached from earlier)"
    )
    warmth.record("b", "m", UsageLedger(output=5))  # a provider that reported no prompt figure
    assert describe_cost(*warmth.cost("a", "m")) == "prompt size unknown until a provider reports usage"
