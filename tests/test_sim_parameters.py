"""The simulator takes every field the hosted APIs take, and refuses an unknown one only where the API does.

Its lists of parameters are its own (a server's contract doesn't move with the client library installed); these
tests hold them to the installed SDKs' own lists, so a new SDK parameter fails here until the simulator knows it.
"""

from __future__ import annotations

import json
import typing
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from anthropic.types import message_create_params
from anthropic.types.beta import message_create_params as beta_message_create_params
from openai.types.chat import completion_create_params
from openai.types.responses import response_create_params

from hotloop.sim import anthropic_api, responses_api
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig


def keys(params: Any) -> set[str]:
    """A TypedDict's keys, required and optional."""
    return {*params.__annotations__, *params.__required_keys__, *params.__optional_keys__}


def required(params: Any) -> set[str]:
    hints = typing.get_type_hints(params, include_extras=True)
    return {name for name, hint in hints.items() if typing.get_origin(hint) is typing.Required}


RESPONSES_SDK = keys(response_create_params.ResponseCreateParamsBase)
CHAT_SDK = keys(completion_create_params.CompletionCreateParamsBase)
# The beta params are a superset; `betas` is the SDK's: it sends them as the anthropic-beta header.
MESSAGES_SDK = (
    keys(message_create_params.MessageCreateParamsBase) | keys(beta_message_create_params.MessageCreateParamsBase)
) - {"betas"}


def test_responses_takes_the_sdks_parameters_and_says_why_it_takes_more() -> None:
    assert set(responses_api.PARAMETERS) == RESPONSES_SDK | responses_api.BEYOND_THE_SDK
    assert not responses_api.BEYOND_THE_SDK & RESPONSES_SDK  # once the SDK names one, it leaves the extras
    assert "stream" in keys(response_create_params.ResponseCreateParamsStreaming)


def test_messages_takes_the_sdks_parameters_and_says_why_it_takes_more() -> None:
    assert anthropic_api.PARAMETERS == MESSAGES_SDK
    assert not anthropic_api.BEYOND_THE_SDK & MESSAGES_SDK
    assert "stream" in keys(message_create_params.MessageCreateParamsStreaming)
    assert required(message_create_params.MessageCreateParamsBase) == {"model", "max_tokens", "messages"}


@pytest.fixture(scope="module")
def sim() -> Iterator[EmbeddedSimulator]:
    with EmbeddedSimulator(SimConfig().with_latency(0.0, 0.0, 0.0)) as started:
        yield started


def post(sim: EmbeddedSimulator, path: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    request = urllib.request.Request(
        f"{sim.url}{path}",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "anthropic-version": "2023-06-01"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


ESSENTIALS: dict[str, tuple[set[str], dict[str, Any]]] = {
    "/v1/chat/completions": (CHAT_SDK, {"model": "sim-fast", "messages": [{"role": "user", "content": "hi"}]}),
    "/v1/responses": (RESPONSES_SDK | responses_api.BEYOND_THE_SDK, {"model": "sim-fast", "input": "hi"}),
    "/v1/messages": (
        MESSAGES_SDK | anthropic_api.BEYOND_THE_SDK,
        {"model": "sim-fast", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]},
    ),
}


@pytest.mark.parametrize("path", list(ESSENTIALS))
def test_every_parameter_is_taken(sim: EmbeddedSimulator, path: str) -> None:
    """Each parameter the SDK names, sent as null beside the essentials, is taken."""
    names, essentials = ESSENTIALS[path]
    status, body = post(sim, path, {**dict.fromkeys(names - set(essentials)), **essentials})
    assert status == 200, body


def test_codexs_client_metadata_is_taken(sim: EmbeddedSimulator) -> None:
    metadata = {"x-codex-installation-id": "1", "session_id": "2"}
    status, body = post(sim, "/v1/responses", {**ESSENTIALS["/v1/responses"][1], "client_metadata": metadata})
    assert status == 200, body


def test_an_unknown_parameter_is_refused_where_the_api_refuses_it(sim: EmbeddedSimulator) -> None:
    status, body = post(sim, "/v1/responses", {**ESSENTIALS["/v1/responses"][1], "bogus": 1})
    assert (status, body["error"]["message"]) == (400, "Unknown parameter: 'bogus'.")
    status, body = post(sim, "/v1/messages", {**ESSENTIALS["/v1/messages"][1], "bogus": 1})
    assert (status, body["error"]["message"]) == (400, "bogus: Extra inputs are not permitted")
    # vLLM's Chat Completions ignores fields it doesn't know, and so does the simulator that plays it.
    status, body = post(sim, "/v1/chat/completions", {**ESSENTIALS["/v1/chat/completions"][1], "bogus": 1})
    assert status == 200, body


SYSTEM = {"role": "system", "content": "The working directory is /tmp/x."}
USER = {"role": "user", "content": "hi"}
ASSISTANT = {"role": "assistant", "content": "hello"}


@pytest.mark.parametrize(
    ("messages", "refusal"),
    [
        ([USER, SYSTEM], None),  # Claude Code's first request: its environment, last
        ([USER, SYSTEM, ASSISTANT, USER], None),
        ([SYSTEM, USER], "messages.0: a message with role 'system' must follow a 'user' message"),
        ([USER, SYSTEM, USER], "messages.1: role 'system' must precede an 'assistant' message or end the array"),
    ],
    ids=["last", "before-an-answer", "first", "before-a-user"],
)
def test_a_system_message_is_taken_where_the_api_takes_it(
    sim: EmbeddedSimulator, messages: list[dict[str, Any]], refusal: str | None
) -> None:
    status, body = post(sim, "/v1/messages", {"model": "sim-fast", "max_tokens": 64, "messages": messages})
    if refusal is None:
        assert status == 200, body
    else:
        assert status == 400
        assert body["error"]["message"].startswith(refusal)


def _tool(name: str, deferred: bool = False) -> dict[str, Any]:
    schema = {"type": "object", "properties": {"file_path": {"type": "string"}}, "required": ["file_path"]}
    return {"name": name, "description": "Read a file", "input_schema": schema, "defer_loading": deferred}


def _change(kind: str, name: str) -> dict[str, Any]:
    return {"type": kind, "tool": {"type": "tool_reference", "name": name}}


@pytest.mark.parametrize(
    ("tools", "change", "called"),
    [
        ([_tool("Read", deferred=True)], _change("tool_addition", "Read"), "Read"),
        ([_tool("Read")], _change("tool_removal", "Read"), None),
    ],
    ids=["a-deferred-tool-added", "a-tool-removed"],
)
def test_a_tool_change_mid_conversation_is_taken_and_followed(
    sim: EmbeddedSimulator, tools: list[dict[str, Any]], change: dict[str, Any], called: str | None
) -> None:
    """Claude Code's resumed session changes its tools with `tool_addition`/`tool_removal` blocks in a system
    message (the `mid-conversation-tool-changes` beta): refused, it sent the request again without them. The model
    calls an added tool, and no longer a removed one."""
    ask = {"role": "user", "content": "read README.md"}
    messages = [ask, {"role": "system", "content": [change]}]
    status, body = post(
        sim, "/v1/messages", {"model": "sim-fast", "max_tokens": 256, "messages": messages, "tools": tools}
    )
    assert status == 200, body
    assert [block["name"] for block in body["content"] if block["type"] == "tool_use"] == ([called] if called else [])


def test_a_tool_change_outside_a_system_message_is_refused(sim: EmbeddedSimulator) -> None:
    messages = [{"role": "user", "content": [_change("tool_addition", "Read")]}]
    status, body = post(
        sim, "/v1/messages", {"model": "sim-fast", "max_tokens": 64, "messages": messages, "tools": [_tool("Read")]}
    )
    assert status == 400
    assert "only permitted within role" in body["error"]["message"]
