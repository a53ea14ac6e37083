"""What stopped an answer, named truly; a cut message's complete calls run; every protocol sends an output cap.

The streams are hand-written in each wire format's documented shape (tests/scripted.py) and served over
loopback HTTP to the official SDK clients; the real llama.cpp recordings are in test_llamacpp_protocols.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import Notice, ResponseFinished, StepFinished, ToolFinished, TurnFinished
from hotloop.agent.figures import step_summary
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.config import Config, ProviderSettings, Target
from hotloop.config.settings import Kind
from hotloop.core.runtime import Runtime
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import DEFAULT_MAX_TOKENS, Provider, ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.vllm import ServedModel, ServerInfo

from scripted import Refusal, anthropic_message, chat_call, chat_end, chat_text, data, events, scripted
from support import Recorder

MODEL = "m"
READ = '{"path": "README.md"}'


async def one_turn(provider: Provider, workspace: Path, steps: int = 2) -> Recorder:
    recorder = Recorder()
    agent = Agent(
        provider,
        ToolRegistry(builtin_tools()),
        emit=recorder,
        workspace=workspace,
        options=AgentOptions(max_steps=steps),
    )
    try:
        await agent.run_turn("Read the readme and the notes.")
    finally:
        await provider.aclose()
    return recorder


def chat(url: str) -> OpenAIChatProvider:
    return OpenAIChatProvider(ProviderOptions(name="local", model=MODEL, base_url=url, max_retries=0))


def anthropic(url: str) -> AnthropicProvider:
    return AnthropicProvider(
        ProviderOptions(name="local", model=MODEL, base_url=url.removesuffix("/v1"), max_retries=0)
    )


async def test_a_complete_call_in_a_message_the_output_limit_cut_runs(workspace: Path) -> None:
    """llama.cpp cut `</tool_call>` off, not the arguments: the call is whole, so it runs (it used to be refused as
    "cut off by the output limit before its arguments were complete")."""
    cut = data(chat_call(0, "call_a", "read_file", READ), *chat_end("length", 900, 24))
    answer = data(chat_text("Done."), *chat_end("stop", 960, 2))
    async with scripted(cut, answer) as (url, _):
        recorder = await one_turn(chat(url), workspace)

    [ran] = recorder.of(ToolFinished)
    assert ran.status == "ok" and "# Demo" in ran.result
    assert recorder.of(ResponseFinished)[0].finish_reason == "length"


async def test_only_the_call_whose_arguments_the_limit_cut_is_refused(workspace: Path) -> None:
    whole = chat_call(0, "call_a", "read_file", READ)
    half = chat_call(1, "call_b", "read_file", '{"path": "no')
    cut = data(whole, half, *chat_end("length", 900, 40))
    answer = data(chat_text("Done."), *chat_end("stop", 990, 2))
    async with scripted(cut, answer) as (url, script):
        recorder = await one_turn(chat(url), workspace)

    finished = {event.call_id: event for event in recorder.of(ToolFinished)}
    assert finished["call_a"].status == "ok"
    assert finished["call_b"].status == "error"
    assert "cut off by the output limit before its arguments were complete" in finished["call_b"].result
    assert script.bodies[1]["messages"][-3]["tool_calls"][1]["function"]["arguments"] == "{}"


async def test_a_complete_tool_use_in_an_anthropic_message_cut_by_max_tokens_runs(workspace: Path) -> None:
    cut = anthropic_message([{"name": "read_file", "input": READ}], "max_tokens", 900, 30)
    answer = anthropic_message([{"text": "Done."}], "end_turn", 960, 2)
    async with scripted(cut, answer) as (url, _):
        recorder = await one_turn(anthropic(url), workspace)

    [ran] = recorder.of(ToolFinished)
    assert ran.status == "ok"


async def test_anthropics_context_window_stop_is_named_as_the_window(workspace: Path) -> None:
    """`model_context_window_exceeded` is no output limit: raising max_tokens can't help, so nothing says to."""
    stopped = anthropic_message([{"text": "The answer goes on and"}], "model_context_window_exceeded", 199_000, 1000)
    async with scripted(stopped) as (url, _):
        recorder = await one_turn(anthropic(url), workspace)

    [step] = recorder.of(StepFinished)
    assert step.finish_reason == "context_window"
    line = step_summary(step)
    assert "cut off by the context window" in line and "output limit" not in line
    [turn] = recorder.of(TurnFinished)
    assert turn.reason == "cut_off"
    [notice] = [n for n in recorder.of(Notice) if "incomplete" in n.message]
    assert "/compact" in notice.message and "max_tokens" not in notice.message


def on_llama_cpp(provider: OpenAIChatProvider, window: int) -> OpenAIChatProvider:
    """What discovery finds of llama.cpp: one model, a slot's `n_ctx` as its window."""
    provider.server = ServerInfo("llama.cpp", (ServedModel(MODEL, window),), healthy=True, has_metrics=True)
    return provider


async def test_llama_cpps_length_stop_at_a_full_window_is_named_as_the_window(workspace: Path) -> None:
    """llama.cpp (and vLLM) say `length` when the window fills, as for the cap: prompt and answer filling the
    slot's 1,024 tokens, short of the cap sent, was the window."""
    stopped = data(chat_text("and so on, and so on"), *chat_end("length", 1000, 23))
    async with scripted(stopped) as (url, script):
        recorder = await one_turn(on_llama_cpp(chat(url), 1024), workspace)

    assert script.bodies[0]["max_tokens"] == 1024 // 4  # the default cap, a quarter of a small window
    [step] = recorder.of(StepFinished)
    assert step.finish_reason == "context_window"
    assert "cut off by the context window" in step_summary(step)


async def test_a_stop_at_the_cap_is_the_output_limit(workspace: Path) -> None:
    stopped = data(chat_text("and so on"), *chat_end("length", 700, 256))
    async with scripted(stopped) as (url, _):
        recorder = await one_turn(on_llama_cpp(chat(url), 1024), workspace)

    [step] = recorder.of(StepFinished)
    assert step.finish_reason == "length" and "cut off by the output limit" in step_summary(step)


REQUEST = ChatRequest("s", (), (UserMessage("hi"),))
LOCAL = "http://127.0.0.1:9/v1"


def body_of(provider: Provider) -> bytes:
    assert isinstance(provider, OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider)
    return provider.request_body(REQUEST)


@pytest.mark.parametrize(
    ("kind", "sent"),
    [
        ("openai-chat", b',"max_tokens":512'),
        ("openai-responses", b',"max_output_tokens":512'),
        ("anthropic", b',"max_tokens":512'),
    ],
)
async def test_every_protocol_sends_the_configured_cap(tmp_path: Path, kind: Kind, sent: bytes) -> None:
    """`[providers.X] max_tokens` reached only the Anthropic provider: Chat Completions and Responses sent none."""
    settings = ProviderSettings("local", kind, base_url=LOCAL, max_tokens=512)
    runtime = Runtime(Config(tmp_path / "config.toml", loaded=False, providers={"local": settings}))
    try:
        provider = await runtime.connect(Target(settings, MODEL))
        assert sent in body_of(provider)
    finally:
        await runtime.aclose()


@pytest.mark.parametrize(
    ("url", "sent"),
    [
        (LOCAL, b',"max_tokens":' + str(DEFAULT_MAX_TOKENS).encode()),  # a model that never stops, stopped
        ("https://api.openai.com/v1", b""),  # the API caps each model itself; a cap would cut a reasoning model short
    ],
)
async def test_an_openai_compatible_server_gets_the_default_cap(url: str, sent: bytes) -> None:
    for provider in (
        OpenAIChatProvider(ProviderOptions(name="p", model=MODEL, base_url=url)),
        OpenAIResponsesProvider(ProviderOptions(name="p", model=MODEL, base_url=url)),
    ):
        body = body_of(provider)
        await provider.aclose()
        field = (
            sent.replace(b"max_tokens", b"max_output_tokens") if isinstance(provider, OpenAIResponsesProvider) else sent
        )
        assert (field in body) if sent else (b"max_tokens" not in body and b"max_output_tokens" not in body)


VLLM_REFUSAL = (
    "'max_tokens' or 'max_completion_tokens' is too large: 8192. This model's maximum context length is 8192 tokens "
    "and your request has 7000 input tokens (8192 > 8192 - 7000). None"
)


async def test_a_cap_vllm_refuses_is_lowered_to_the_room_it_says_is_left(workspace: Path) -> None:
    """vLLM refuses a request whose prompt and cap pass the window, and says by how much: the request goes again,
    capped at the room left by its own count, and a line says so."""
    answer = data(chat_text("Short."), *chat_end("stop", 7000, 2))
    async with scripted(Refusal(400, VLLM_REFUSAL), answer) as (url, script):
        recorder = await one_turn(chat(url), workspace)

    assert [body["max_tokens"] for body in script.bodies] == [DEFAULT_MAX_TOKENS, 8192 - 7000]
    assert recorder.of(TurnFinished)[0].reason == "answer"
    assert any("room for 1,192 more tokens" in notice.message for notice in recorder.of(Notice))


async def test_a_tool_use_block_a_server_never_closes_is_ready_at_the_messages_end(workspace: Path) -> None:
    """A call is ready when its item is done, whichever event says so: here the message's end (no
    `content_block_stop`). It was never ready, so never run, and the turn ended as if nothing was asked."""
    opened: list[dict[str, Any]] = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 900, "output_tokens": 1}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "read_file", "input": {}},
        },
        {"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": READ}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 20}},
        {"type": "message_stop"},
    ]
    answer = anthropic_message([{"text": "Done."}], "end_turn", 960, 2)
    async with scripted(events(*opened), answer) as (url, _):
        recorder = await one_turn(anthropic(url), workspace)

    [ran] = recorder.of(ToolFinished)
    assert ran.status == "ok" and "# Demo" in ran.result
