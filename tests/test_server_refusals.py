"""A self-hosted server started without what agents need: hotloop says which launch flag fixes it.

The servers here answer as the recorded llama-server does (tests/fixtures/llamacpp: its
/v1/models and /props byte for byte), or as Ollama documents, over real loopback HTTP to the
real `openai` SDK. The refusal texts are the servers' own (see providers/server_fixes.py).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from aiohttp import web

from hotloop.agent.events import Notice
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.vllm import discover

from support import FIXTURES, Recorder, serving

LLAMA_CPP = FIXTURES / "llamacpp"
MODEL = json.loads((LLAMA_CPP / "v1_models.json").read_text())["data"][0]["id"]
NO_JINJA = {"error": {"code": 500, "message": "tools param requires --jinja flag", "type": "server_error"}}

Chat = Callable[[web.Request], Awaitable[web.StreamResponse]]


@asynccontextmanager
async def server(gets: dict[str, str], chat: Chat) -> AsyncIterator[tuple[str, list[bytes]]]:
    """GET `path` answers its JSON text; POST /v1/chat/completions goes to `chat`. Yields the /v1 URL and the bodies."""
    bodies: list[bytes] = []

    async def chat_recorded(request: web.Request) -> web.StreamResponse:
        bodies.append(await request.read())
        return await chat(request)

    def answer(text: str) -> Chat:
        async def handler(request: web.Request) -> web.StreamResponse:
            return web.Response(text=text, content_type="application/json")

        return handler

    app = web.Application()
    for path, text in gets.items():
        app.router.add_get(path, answer(text))
    app.router.add_post("/v1/chat/completions", chat_recorded)
    async with serving(app) as url:
        yield url, bodies


def recorded_llama_cpp() -> dict[str, str]:
    return {
        "/v1/models": (LLAMA_CPP / "v1_models.json").read_text(),
        "/props": (LLAMA_CPP / "props.json").read_text(),
        "/health": '{"status":"ok"}',
    }


async def refuse_without_jinja(request: web.Request) -> web.StreamResponse:
    return web.json_response(NO_JINJA, status=500)


def streaming(prompt_tokens: int) -> Chat:
    """An answer of one word, with usage reporting `prompt_tokens`."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        chunks: list[dict[str, Any]] = [
            {"choices": [{"index": 0, "delta": {"role": "assistant", "content": "Done."}}]},
            {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]},
            {"choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 2, "total_tokens": 0}},
        ]
        for chunk in chunks:
            await response.write(
                b"data: " + json.dumps({"id": "c", "object": "chat.completion.chunk", **chunk}).encode()
            )
            await response.write(b"\n\n")
        await response.write(b"data: [DONE]\n\n")
        await response.write_eof()
        return response

    return handler


async def test_a_server_without_jinja_is_told_the_flag_and_not_asked_again(isolated_home: Path) -> None:
    """One line names --jinja; the refused request is sent once: a missing flag fails the same way every time."""
    async with server(recorded_llama_cpp(), refuse_without_jinja) as (url, bodies):
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "hotloop",
            "run",
            "--provider",
            "openai",
            "--base-url",
            url,
            "hi",
            cwd=isolated_home,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        _, err = await asyncio.wait_for(process.communicate(), 60)
    assert process.returncode == 1
    lines = [line for line in err.decode().splitlines() if line.startswith("error:")]
    assert lines == [
        f"error: openai ({url}) answered 500: tools param requires --jinja flag; llama-server takes tools only "
        "when started with --jinja: restart it with --jinja (hotloop recipe llama.cpp MODEL)"
    ]
    assert len(bodies) == 1


async def agent_on(url: str, recorder: Recorder, workspace: Path, model: str) -> Agent:
    provider = OpenAIChatProvider(ProviderOptions(name="local", model=model, base_url=url, max_retries=0))
    provider.server = await discover(provider)
    return Agent(
        provider, ToolRegistry(builtin_tools()), emit=recorder, workspace=workspace, options=AgentOptions(max_steps=1)
    )


async def test_a_template_with_no_place_for_tools_is_said_once(workspace: Path) -> None:
    """The recorded llama-server's /props says its chat template takes no tools: said at the first request only."""
    recorder = Recorder()
    async with server(recorded_llama_cpp(), streaming(40)) as (url, _):
        agent = await agent_on(url, recorder, workspace, MODEL)
        await agent.run_turn("hi")
        await agent.run_turn("again")
        await agent.provider.aclose()
    warnings = [n.message for n in recorder.of(Notice) if n.level == "warning"]
    assert warnings == [
        "this model's chat template has no place for tools, so llama-server drops them: start it with "
        "--chat-template-file and a tool-use template from llama.cpp's models/templates/"
    ]


async def test_ollama_cutting_the_prompt_is_said(workspace: Path) -> None:
    """Ollama reports 2,048 prompt tokens for a ~6,000-token prompt: it cut it, and the warning says how to stop it."""
    ollama = {
        "/v1/models": json.dumps(
            {"object": "list", "data": [{"id": "qwen3:8b", "object": "model", "owned_by": "library"}]}
        ),
        "/api/version": '{"version":"0.12.3"}',
        "/api/ps": '{"models":[]}',
    }
    recorder = Recorder()
    async with server(ollama, streaming(2048)) as (url, bodies):
        agent = await agent_on(url, recorder, workspace, "qwen3:8b")
        assert agent.provider.server is not None and agent.provider.server.kind == "ollama"
        await agent.run_turn("Summarise this: " + "the quick brown fox jumps over the lazy dog " * 550)
        await agent.provider.aclose()
    assert len(bodies[0]) > 4 * 2048 * 2  # clearly more than the 2,048 tokens it says it read
    warnings = [n.message for n in recorder.of(Notice) if n.level == "warning"]
    assert len(warnings) == 1
    assert warnings[0].startswith("Ollama truncated the prompt to 2048 tokens: ")
    assert "OLLAMA_CONTEXT_LENGTH=32768" in warnings[0]
