"""`hotloop watch` against the embedded simulator, driven by the official SDKs over real loopback HTTP.

The bytes a client gets through the pass-through are the bytes it gets from the simulator
directly (ids and timestamps, which the simulator draws afresh for every answer, aside); each
request's ledger is the simulator's own record of it; the client's key reaches the simulator and
no file hotloop writes.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from hotloop import paths
from hotloop.agent.events import (
    Notice,
    ResponseFinished,
    StepFinished,
    ToolFinished,
    TurnStarted,
)
from hotloop.sessions.store import list_sessions, read_session
from hotloop.sessions.titles import headline
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.watch import Watch, upstream_at

from support import READ_FILE, Seen, close_clients, start_sim, wait_until, watching

__all__ = ["close_clients"]
KEY = "sk-watch-secret-0123456789abcdef"
MODEL = "sim-balanced"
# What the simulator draws afresh for every answer: ids (hex runs) and timestamps.
_VOLATILE = re.compile(rb"[0-9a-f]{16,}|\b1[0-9]{9}\b")


@pytest.fixture
async def watched(sim: EmbeddedSimulator) -> AsyncIterator[tuple[Watch, Seen, str]]:
    async with watching(sim) as started:
        yield started


def _clients(url: str) -> tuple[openai.AsyncOpenAI, anthropic.AsyncAnthropic]:
    return (
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=KEY, max_retries=0),
        anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0),
    )


Ask = Callable[[openai.AsyncOpenAI, anthropic.AsyncAnthropic], Awaitable[bytes]]


async def _chat(api: openai.AsyncOpenAI, _: anthropic.AsyncAnthropic, stream: bool) -> bytes:
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if stream else {}
    async with api.chat.completions.with_streaming_response.create(
        model=MODEL, messages=[{"role": "user", "content": "say hello"}], stream=stream, **extra
    ) as response:
        return b"".join([chunk async for chunk in response.iter_bytes()])


async def _responses(api: openai.AsyncOpenAI, _: anthropic.AsyncAnthropic, stream: bool) -> bytes:
    async with api.responses.with_streaming_response.create(model=MODEL, input="say hello", stream=stream) as response:
        return b"".join([chunk async for chunk in response.iter_bytes()])


async def _messages(_: openai.AsyncOpenAI, api: anthropic.AsyncAnthropic, stream: bool) -> bytes:
    async with api.messages.with_streaming_response.create(
        model=MODEL, max_tokens=200, messages=[{"role": "user", "content": "say hello"}], stream=stream
    ) as response:
        return b"".join([chunk async for chunk in response.iter_bytes()])


@pytest.mark.parametrize("stream", [True, False], ids=["streamed", "whole"])
@pytest.mark.parametrize("ask", [_chat, _responses, _messages], ids=["chat", "responses", "messages"])
async def test_the_bytes_pass_through_and_the_ledger_is_the_servers(
    sim: EmbeddedSimulator,
    watched: tuple[Watch, Seen, str],
    ask: Callable[[openai.AsyncOpenAI, anthropic.AsyncAnthropic, bool], Awaitable[bytes]],
    stream: bool,
) -> None:
    watch, seen, url = watched
    direct = _clients(sim.url)
    through = _clients(url)
    expected = await ask(*direct, stream)
    received = await ask(*through, stream)
    for api in (*direct, *through):
        await api.close()
    assert _VOLATILE.sub(b"X", received) == _VOLATILE.sub(b"X", expected)
    assert len(received) == len(expected)

    record = sim.server.requests[-1]
    assert KEY in (record.headers.get("Authorization", "") + record.headers.get("X-Api-Key", ""))
    [(conversation, response)] = seen.of(ResponseFinished)
    usage = response.usage
    assert usage is not None and usage.prompt_total == record.prompt_tokens
    assert (usage.cache_read or 0) == record.cached_tokens
    assert usage.output is not None and usage.output > 0
    assert response.ttft is not None and response.model_time >= response.ttft
    assert [type(event).__name__ for _, event in seen.of(StepFinished)] == ["StepFinished"]

    await watch.aclose()
    logged = read_session(Path(watch.conversations[conversation].path))
    assert logged.header.origin.startswith("watch:") and "Python" in logged.header.origin
    assert [event for event in logged.events if isinstance(event, ResponseFinished)] == [response]
    for written in paths.sessions_dir().iterdir():
        assert KEY not in written.read_text(), written


async def test_a_tool_loop_is_one_conversation_and_a_side_request_branches_off(
    watched: tuple[Watch, Seen, str],
) -> None:
    watch, seen, url = watched
    api, other = _clients(url)
    tools = [READ_FILE]
    asked: list[Any] = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "read README.md"}]
    first = await api.chat.completions.create(model=MODEL, messages=asked, tools=tools)
    calls = first.choices[0].message.tool_calls
    assert calls, "the simulator's planner calls read_file for 'read README.md'"
    answered = [
        *asked,
        first.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": call.id, "content": "# Demo"} for call in calls),
    ]
    await api.chat.completions.create(model=MODEL, messages=answered, tools=tools)
    # A title asked on the conversation's prefix: it extends it without the model's answer.
    await api.chat.completions.create(
        model=MODEL, messages=[*asked, {"role": "user", "content": "Title this conversation."}], tools=tools
    )
    await api.close()
    await other.close()

    steps = seen.of(StepFinished)
    main, side = steps[0][0], steps[-1][0]
    assert [conversation for conversation, _ in steps] == [main, main, side] and side != main
    assert [(event.turn, event.step) for _, event in steps] == [(1, 1), (1, 2), (1, 1)]
    assert watch.conversations[side].parent == main and watch.conversations[main].parent == ""
    assert watch.conversations[main].title == "read README.md"
    [(_, finished)] = seen.of(ToolFinished)
    assert finished.status == "ok" and finished.result == "# Demo" and finished.duration > 0
    first_step = steps[0][1]
    assert first_step.tool_count == 1 and first_step.tool_wall == pytest.approx(finished.duration)
    assert [event.turn for _, event in seen.of(TurnStarted)] == [1, 1]

    await watch.aclose()
    listing = list_sessions(paths.sessions_dir(), search="watch:")
    assert {summary.id for summary in listing.sessions} == {main, side}
    assert read_session(Path(watch.conversations[side].path)).header.side_of == main


async def test_the_explainer_names_the_tool_that_changed_and_where_the_bodies_diverged(
    watched: tuple[Watch, Seen, str],
) -> None:
    _, seen, url = watched
    api, other = _clients(url)

    def tool(name: str) -> Any:
        return {"type": "function", "function": {"name": name, "description": f"The {name} tool", "parameters": {}}}

    system = {"role": "system", "content": "You are a careful assistant. " * 40}
    asked: list[Any] = [system, {"role": "user", "content": "say hello"}]
    first = await api.chat.completions.create(model=MODEL, messages=asked, tools=[tool("alpha")])
    following = [
        *asked,
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "again"},
    ]
    await api.chat.completions.create(model=MODEL, messages=following, tools=[tool("alpha"), tool("beta")])
    await api.close()
    await other.close()

    responses = seen.of(ResponseFinished)
    assert len({conversation for conversation, _ in responses}) == 1
    note = responses[-1][1].cache_note
    assert note.startswith("cache miss: tools changed (+beta); the request differs from byte "), note
    assert "tokens re-prefilled" in note


async def test_hostile_traffic_is_one_line_each_and_the_pass_through_goes_on(
    tmp_path: Path, watched: tuple[Watch, Seen, str]
) -> None:
    _, seen, url = watched
    api, other = _clients(url)
    with pytest.raises(openai.BadRequestError):
        await api.post("/chat/completions", cast_to=object, content=b"\xff{not json")
    notices = [event.message for _, event in seen.of(Notice)]
    assert any("not JSON" in message or "not UTF-8" in message for message in notices), notices
    assert any("answered 400" in message for message in notices), notices

    nowhere = Watch(upstream_at("http://127.0.0.1:9", "closed"), seen, folder=tmp_path, workspace=tmp_path)
    closed_url = await nowhere.start()
    refused = openai.AsyncOpenAI(base_url=f"{closed_url}/v1", api_key=KEY, max_retries=0)
    with pytest.raises(openai.InternalServerError, match="cannot reach closed"):
        await refused.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}])
    await refused.close()
    await nowhere.aclose()

    reply = await api.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "still there?"}])
    assert reply.choices[0].message.content
    await api.close()
    await other.close()


async def test_a_client_that_leaves_mid_stream_ends_its_step_cancelled(tmp_path: Path) -> None:
    slow = start_sim(decode_per_token=0.005)
    seen = Seen()
    watch = Watch(upstream_at(slow.url, "sim"), seen, folder=tmp_path, workspace=tmp_path)
    url = await watch.start()
    api = anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)
    try:
        async with api.messages.with_streaming_response.create(
            model=MODEL, max_tokens=400, messages=[{"role": "user", "content": "write a long story"}], stream=True
        ) as response:
            async for _ in response.iter_bytes():
                break
        await wait_until(lambda: seen.of(StepFinished), what="the cut step's end")
        [(_, step)] = seen.of(StepFinished)
        assert step.cut == "cancelled"
        assert any("disconnected mid-stream" in event.message for _, event in seen.of(Notice))
        whole = await api.messages.create(model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "hi"}])
        assert whole.content
    finally:
        await api.close()
        await watch.aclose()
        slow.stop()


@pytest.mark.parametrize(
    ("prompt", "title"),
    [
        (
            "<system-reminder>\nAttribution…\n</system-reminder>\n\nread README.md and list the files",
            "read README.md and list the files",
        ),
        ("<environment_context>\n  <cwd>/x</cwd>\n</environment_context>\nfix the parser", "fix the parser"),
        ("say <b>hi</b> to the watcher", "say <b>hi</b> to the watcher"),
        ("<system-reminder>only context</system-reminder>", ""),
    ],
    ids=["claude-code", "codex", "tags-in-words", "no-words"],
)
def test_a_conversation_is_titled_by_the_users_words_not_the_agents_context(prompt: str, title: str) -> None:
    """Claude Code's watched session was listed as `<system-reminder>`: its context comes before the prompt."""
    assert headline(prompt) == title
