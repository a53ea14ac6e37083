"""A session's affinity key: on every request, over every protocol, across a resume and a fork."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from test_openai_fixtures import sse_file

from hotloop.cli import main
from hotloop.config import ProviderSettings
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import Provider, ProviderOptions
from hotloop.providers.conversation import ChatRequest, UserMessage
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sessions.store import session_id_of
from hotloop.sim.embedded import EmbeddedSimulator

from support import serving

# Each protocol's provider, the route it posts to and a recorded stream to answer with.
PROTOCOLS = {
    "chat": (OpenAIChatProvider, "/v1/chat/completions", "openai_chat_parallel_tools.sse"),
    "responses": (OpenAIResponsesProvider, "/v1/responses", "openai_responses_tool_call.sse"),
    "anthropic": (AnthropicProvider, "/v1/messages", "anthropic_tool_use.sse"),
}


async def sent(
    protocol: str, cache_key: str | None, affinity_header: str | None = None, **options: Any
) -> tuple[Mapping[str, str], dict[str, Any]]:
    """The headers and body one request of `protocol` went out with."""
    provider_class, route, recording = PROTOCOLS[protocol]
    seen: list[tuple[Mapping[str, str], dict[str, Any]]] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        seen.append((request.headers, await request.json()))
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in sse_file(recording):
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(route, answer)
    async with serving(app) as base_url:
        url = base_url.removesuffix("/v1") if protocol == "anthropic" else base_url
        where = ProviderOptions("p", "m", url, max_retries=0, affinity_header=affinity_header)
        provider: Provider = provider_class(where, **options)
        try:
            request = ChatRequest("Be brief.", (), (UserMessage("hi"),), cache_key=cache_key)
            [event async for event in provider.stream(request)]
        finally:
            await provider.aclose()
    [(headers, body)] = seen
    return headers, body


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_every_protocol_sends_the_key_in_the_configured_header(protocol: str) -> None:
    headers, body = await sent(protocol, "session-1", affinity_header="x-session-id")
    assert headers["x-session-id"] == "session-1" and "user" not in body
    headers, _ = await sent(protocol, "session-1", affinity_header="x-routing-key")
    assert headers["x-routing-key"] == "session-1" and "x-session-id" not in headers
    headers, _ = await sent(protocol, None, affinity_header="x-session-id")  # a request outside any session
    assert "x-session-id" not in headers
    headers, _ = await sent(protocol, "session-1")  # `affinity_header = ""`: none
    assert "x-session-id" not in headers


@pytest.mark.parametrize("protocol", ["chat", "responses"])
async def test_openai_compatible_servers_get_the_key_as_user_when_asked(protocol: str) -> None:
    _, body = await sent(protocol, "session-1", user=True, prompt_cache_key=True)
    assert (body["user"], body["prompt_cache_key"]) == ("session-1", "session-1")


def test_the_config_sends_x_session_id_by_default_and_refuses_a_header_that_isnt_one(tmp_path: Path) -> None:
    from hotloop.config import ConfigError, load_config

    assert ProviderSettings("local", "openai").affinity_header == "x-session-id"
    config = tmp_path / "config.toml"
    config.write_text('[providers.local]\nkind = "openai"\naffinity_header = "x session"\n')
    with pytest.raises(ConfigError, match="affinity_header must be an HTTP header name, or empty for none"):
        load_config(config)
    config.write_text('[providers.local]\nkind = "openai"\naffinity_header = ""\nuser = true\n')
    settings = load_config(config).provider("local")
    assert (settings.affinity_header, settings.user) == ("", True)


# -- one session, resumed and forked ---------------------------------------------------------


def test_every_request_of_a_session_carries_its_key_across_a_resume_and_a_fork(
    sim: EmbeddedSimulator, tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    """The conversation's steps, its title (a side job on another model) and both continuations: one key."""
    here = tmp_path / "here"
    here.mkdir()
    (here / "README.md").write_text("# Demo\n\nTODO: write the docs.\n")
    monkeypatch.chdir(here)
    (isolated_home / "config.toml").write_text(
        'default_provider = "local"\n'
        "[providers.local]\n"
        'kind = "openai"\n'
        f'base_url = "{sim.base_url}"\n'
        'models = ["sim-balanced", "sim-fast"]\n'
        'default_model = "sim-balanced"\n'
        "user = true\n"
        "[tiers]\n"
        'fast = { provider = "local", model = "sim-fast" }\n'
    )
    assert main(["run", "read README.md then grep for TODO"]) == 0
    (log,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    parent = session_id_of(log)
    assert main(["run", "--resume", parent, "and now list the files"]) == 0
    capsys.readouterr()
    assert main(["sessions", "fork", parent, "--turn", "1"]) == 0
    fork = capsys.readouterr().out.strip()
    assert main(["run", "--resume", fork, "what else is there?"]) == 0

    requests = list(sim.server.requests)
    assert {request.headers.get("x-session-id") for request in requests} == {parent}
    assert {json.loads(request.body).get("user") for request in requests} == {parent}
    assert {request.model for request in requests} == {"sim-balanced", "sim-fast"}  # the title went out keyed too
    prompts = [json.loads(r.body)["messages"][-1]["content"] for r in requests if r.model == "sim-balanced"]
    for asked in ("read README.md", "and now list the files", "what else is there?"):
        assert any(asked in prompt for prompt in prompts)  # the first session, its resume and its fork's turn
