"""The watch's hot path: what arrives in one block is logged as one delta per stream, and the answer's last block goes
out with its end, the client's bytes unchanged."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import openai
import pytest
from aiohttp import web

from hotloop import paths
from hotloop.agent.events import AgentEvent
from hotloop.providers.events import TextDelta, ToolCallArgsDelta, ToolCallReady
from hotloop.sessions.store import read_session
from hotloop.watch import Watch, upstream_at

from support import serving

FIXTURES = Path(__file__).parent / "fixtures"
KEY = "sk-hot-path-secret-0123456789abcdef"
TOOLS: Any = [{"type": "function", "function": {"name": "GetWeatherArgs", "parameters": {"type": "object"}}}]

pytestmark = pytest.mark.usefixtures("isolated_home")


async def test_a_block_of_deltas_is_one_logged_delta_per_stream_and_the_bytes_are_unchanged() -> None:
    """A real recorded answer (two parallel calls, their arguments in 20 pieces) sent in one write: the client gets
    it byte for byte, its end with it, and the log has each call's arguments whole, never two calls' joined, in
    fewer deltas than the stream had (one per received block, not one per token)."""
    recorded = (FIXTURES / "openai_chat_parallel_tools.sse").read_bytes()
    seen: list[AgentEvent] = []

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        await response.write_eof(recorded)  # the whole stream and its end in one write, as a fast server sends it
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    async with serving(app) as base:
        watch = Watch(
            upstream_at(base, "recorded"),
            lambda _conversation, event: seen.append(event),
            folder=paths.sessions_dir(),
            workspace=Path.cwd(),
        )
        url = await watch.start()
        api = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0)
        async with api.chat.completions.with_streaming_response.create(
            model="gpt-4o", messages=[{"role": "user", "content": "weather in two cities"}], tools=TOOLS, stream=True
        ) as response:
            got = b"".join([chunk async for chunk in response.iter_bytes()])
        await api.close()
        await watch.aclose()
    assert got == recorded
    [info] = watch.conversations.values()
    logged = read_session(Path(info.path)).events
    assert [event for event in logged if isinstance(event, (TextDelta, ToolCallArgsDelta))] == [
        event for event in seen if isinstance(event, (TextDelta, ToolCallArgsDelta))
    ]
    deltas = [event for event in logged if isinstance(event, ToolCallArgsDelta)]
    calls = [event for event in logged if isinstance(event, ToolCallReady)]
    assert len(calls) == 2
    for call in calls:
        assert "".join(delta.fragment for delta in deltas if delta.call_id == call.call_id) == call.arguments
    streamed = recorded.count(b'"arguments":"') - recorded.count(b'"arguments":""')
    assert len(deltas) < streamed, (len(deltas), streamed)
    assert KEY not in Path(info.path).read_text()
