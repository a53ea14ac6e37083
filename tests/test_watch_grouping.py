"""Grouping that survives the order of arrival (issue 36): under one session key, the conversation that carries the
tools is the main one, and a title request is a side request of it whether it arrived before or after. Each test
sends the agents' request shapes with the official SDKs through a real `Watch` to the embedded simulator; a title
request that began first is corrected in its log by a `SideOf` event, which reading the session applies."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from hotloop import paths
from hotloop.agent.events import SideOf
from hotloop.sessions.fork import under_parents
from hotloop.sessions.store import SessionSummary, list_sessions, read_session
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.watch import Watch
from hotloop.watch.lineage import Lineage, Placement

from support import Seen, wait_until, watching

pytestmark = pytest.mark.timeout(60)
AGENTS = Path(__file__).parent / "fixtures" / "agents"
TASK = "read README.md and list the files here"
# opencode 1.18.33's two requests for one task (interop.md): its title job, asked in the system prompt with the task
# after a line of its own and no tools, and its real request, the task as a JSON string, with its tools.
OPENCODE_TITLE_SYSTEM = "You are a title generator. You output ONLY a thread title. Nothing else."
OPENCODE_SYSTEM = "You are opencode, an interactive CLI tool that helps users with software engineering tasks."
OPENCODE_TOOLS = ("read", "list", "glob", "grep", "bash", "edit")
OPENCODE_HEADERS = {"x-session-id": "ses_1f2e3d4c5b6a", "User-Agent": "opencode/1.18.33 ai-sdk/provider-utils"}


@pytest.fixture
async def watched(sim: EmbeddedSimulator) -> AsyncIterator[tuple[Watch, Seen, str]]:
    async with watching(sim) as started:
        yield started


def _tool(name: str) -> dict[str, Any]:
    parameters = {"type": "object", "properties": {"path": {"type": "string"}}}
    return {"type": "function", "function": {"name": name, "description": f"{name} a path", "parameters": parameters}}


def _opencode_title_stream(api: openai.AsyncOpenAI) -> AbstractAsyncContextManager[Any]:
    return api.chat.completions.with_streaming_response.create(
        model="sim-fast",
        messages=[
            {"role": "system", "content": OPENCODE_TITLE_SYSTEM},
            {"role": "user", "content": f"Generate a title for this conversation:\n{TASK}"},
        ],
        stream=True,
        extra_headers=OPENCODE_HEADERS,
    )


async def _opencode_title(api: openai.AsyncOpenAI) -> None:
    async with _opencode_title_stream(api) as response:
        await response.read()


async def _opencode_real(api: openai.AsyncOpenAI) -> None:
    """opencode's request and, when the model called a tool, the next one with its results (the conversation grows)."""
    asked: list[Any] = [
        {"role": "system", "content": OPENCODE_SYSTEM},
        {"role": "user", "content": json.dumps(TASK)},
    ]
    tools: Any = [_tool(name) for name in OPENCODE_TOOLS]
    first = await api.chat.completions.create(
        model="sim-fast", messages=asked, tools=tools, extra_headers=OPENCODE_HEADERS
    )
    calls = first.choices[0].message.tool_calls or []
    assert calls, "the simulator's planner reads README.md for the task"
    answered = [
        *asked,
        first.choices[0].message.model_dump(exclude_none=True),
        *({"role": "tool", "tool_call_id": call.id, "content": "# Demo"} for call in calls),
    ]
    await api.chat.completions.create(model="sim-fast", messages=answered, tools=tools, extra_headers=OPENCODE_HEADERS)


def _side_of(watch: Watch, conversation: str) -> str:
    """What the conversation's log says it is a side request of, as `sessions show` and replay read it."""
    return read_session(Path(watch.conversations[conversation].path)).header.side_of


@pytest.mark.parametrize("title_first", [True, False], ids=["opencode-order", "reverse-order"])
async def test_opencodes_title_request_is_a_side_request_of_the_real_one_in_either_order(
    watched: tuple[Watch, Seen, str], title_first: bool
) -> None:
    """opencode's title request (no tools) and its real request (tools) under one `x-session-id`: the real one is the
    conversation, with both its steps, and the title is its side request, in the live info and in the title's log,
    whichever was answered first. Only a title that began first needs the correction event."""
    watch, seen, url = watched
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-not-a-key", max_retries=0) as api:
        if title_first:
            await _opencode_title(api)
            await _opencode_real(api)
        else:
            await _opencode_real(api)
            await _opencode_title(api)
    steps = seen.steps()
    title = steps[0] if title_first else steps[-1]
    main = steps[1] if title_first else steps[0]
    assert steps.count(main) == 2 and steps.count(title) == 1 and len(steps) == 3
    assert watch.conversations[main].parent == "" and watch.conversations[title].parent == main
    corrections = [(conversation, event) for conversation, event in seen.events if isinstance(event, SideOf)]
    assert corrections == ([(title, SideOf(parent=main, ts=corrections[0][1].ts))] if title_first else [])
    await watch.aclose()
    assert _side_of(watch, title) == main and _side_of(watch, main) == ""
    _listed_under(main, title)


def _listed_under(main: str, side: str) -> None:
    """`sessions list` puts the side request right under its conversation, from the summary file and from a scan of
    the log alone (no summary file)."""
    for scanned in (False, True):
        if scanned:
            for sidecar in paths.sessions_dir().glob("*.summary.json"):
                sidecar.unlink()
        listing = list_sessions(paths.sessions_dir())
        assert [(session.id, depth) for session, depth in under_parents(listing.sessions)] == [(main, 0), (side, 1)]
        assert {session.id: session.side_of for session in listing.sessions} == {main: "", side: main}


async def test_a_title_request_in_flight_when_the_real_one_is_answered_becomes_its_side_request(
    watched: tuple[Watch, Seen, str],
) -> None:
    """Both in flight, as opencode sends them: the real request goes out once the title's answer has begun (its step
    started), before the title's client has read that answer; the title is the real one's side request."""
    watch, seen, url = watched
    async with (
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-not-a-key", max_retries=0) as api,
        _opencode_title_stream(api) as title_stream,
    ):
        await wait_until(lambda: len(seen.started()) == 1, what="the title's step started")
        await _opencode_real(api)
        await title_stream.read()
    [title] = seen.started()[:1]
    main = next(conversation for conversation in seen.started() if conversation != title)
    await wait_until(lambda: seen.steps().count(title) == 1, what="the title's step finished")
    assert seen.steps().count(main) == 2 and watch.conversations[title].parent == main
    await watch.aclose()
    assert _side_of(watch, title) == main


def _recorded(name: str, index: int = 0) -> dict[str, Any]:
    runs: list[dict[str, Any]] = [json.loads(line) for line in (AGENTS / name).read_text().splitlines() if line.strip()]
    return runs[index]


def _claude_kwargs(recorded: dict[str, Any]) -> dict[str, Any]:
    """A recorded Claude Code request as the SDK's arguments: its body, its session header and user-agent."""
    body = dict(recorded["body"])
    extra = {key: body.pop(key) for key in ("context_management", "output_config")}
    headers = {
        name: value for name, value in recorded["headers"].items() if name in ("User-Agent", "X-Claude-Code-Session-Id")
    }
    return {**body, "extra_body": extra, "extra_headers": headers}


@pytest.mark.parametrize("title_first", [True, False], ids=["title-first", "title-after"])
async def test_claude_codes_haiku_title_request_is_a_side_request_of_its_conversation(
    watched: tuple[Watch, Seen, str], title_first: bool
) -> None:
    """Claude Code's recorded run (its request with tools, then the one with the tool results) and a title request in
    the shape of its haiku one (a system prompt of its own, the task, no tools) under the same session header: one
    conversation of two steps, the title its side request, whether it came first or last."""
    watch, seen, url = watched
    first, second = (_claude_kwargs(_recorded("claude_code_2.1.332_requests.jsonl", n)) for n in (0, 1))
    title_request: dict[str, Any] = {
        "model": "sim-fast",
        "max_tokens": 512,
        "system": [{"type": "text", "text": "Write a 3-7 word title for the user's coding task. Reply with it alone."}],
        "messages": [{"role": "user", "content": TASK}],
        "extra_headers": first["extra_headers"],
    }
    async with anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-not-a-key", max_retries=0) as client:
        order = [title_request, first, second] if title_first else [first, second, title_request]
        for kwargs in order:
            async with client.messages.with_streaming_response.create(**kwargs) as response:
                await response.read()
    steps = seen.steps()
    title = steps[0] if title_first else steps[-1]
    main = steps[1] if title_first else steps[0]
    assert steps.count(main) == 2 and steps.count(title) == 1 and len(steps) == 3
    assert watch.conversations[title].parent == main and watch.conversations[main].parent == ""
    assert watch.conversations[main].agent == "claude-cli/2.1.332"
    await watch.aclose()
    assert _side_of(watch, title) == main and _side_of(watch, main) == ""


async def test_codexs_recorded_run_is_one_conversation_without_side_requests(watched: tuple[Watch, Seen, str]) -> None:
    """Codex's two recorded requests (`session-id` header, `prompt_cache_key`): one conversation that grows, no
    side request, no correction."""
    watch, seen, url = watched
    async with openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-not-a-key", max_retries=0) as api:
        for index in (0, 1):
            recorded = _recorded("codex_0.171.0_requests.jsonl", index)
            body = dict(recorded["body"])
            headers = {
                name: value for name, value in recorded["headers"].items() if name in ("User-Agent", "session-id")
            }
            extra = {"client_metadata": body.pop("client_metadata")}
            async with api.responses.with_streaming_response.create(
                **body, extra_body=extra, extra_headers=headers
            ) as response:
                await response.read()
    steps = seen.steps()
    assert len(steps) == 2 and len(set(steps)) == 1
    assert not [event for _, event in seen.events if isinstance(event, SideOf)]
    assert watch.conversations[steps[0]].parent == ""


def test_the_conversation_with_tools_adopts_the_tool_less_one_and_its_side_requests() -> None:
    """A key's tool-less first conversation, a side request of it, then a request with tools that extends neither:
    the new one is the main conversation and both earlier ones are its side requests; a later tool-less request with
    another system prompt is a side request of the new main, and nothing is adopted twice."""
    lineage = Lineage()
    lineage.record("title", "key", "titles", [b"task"])
    side = lineage.place("key", "summaries", [b"summarize"], ["user"])
    assert side == Placement(side_of="title")
    lineage.record("summary", "key", "summaries", [b"summarize"], placed=side)
    real = lineage.place("key", "agent", [b'"task"'], ["user"], tools=True)
    assert real == Placement(adopts=("title", "summary"))
    lineage.record("real", "key", "agent", [b'"task"'], tools=True, placed=real)
    assert lineage.place("key", "agent", [b'"task"', b"answer", b"result"], ["user", "assistant", "tool"], True) == (
        Placement(continues="real")
    )
    assert lineage.place("key", "titles", [b"again"], ["user"]) == Placement(side_of="real")
    assert lineage.place("key", "agent", [b"other"], ["user"], tools=True) == Placement(continues="real")


def test_a_request_with_tools_that_branches_off_a_tool_less_main_takes_its_place() -> None:
    """The request with tools begins with the title request's message but adds no answer (the prefix rule alone would
    make it a branch of the title): it is the main conversation and the title its side request. Without a session
    key there is no main to take over, and the branch stays a branch."""
    lineage = Lineage()
    lineage.record("title", "key", "titles", [b"task"])
    assert lineage.place("key", "agent", [b"task", b"more"], ["user", "user"], tools=True) == Placement(
        adopts=("title",)
    )
    unkeyed = Lineage()
    unkeyed.record("title", "", "titles", [b"task"])
    assert unkeyed.place("", "agent", [b"task", b"more"], ["user", "user"], tools=True) == Placement(side_of="title")


def test_side_requests_chained_deeper_than_the_stack_are_listed_under_each_other() -> None:
    """A client can branch each request off the last (a user message added, no answer): 1,200 side requests deep,
    past Python's 1,000 frames. Lineage chains them, and `sessions list` puts each under the one before, with no
    recursion to overflow."""
    lineage = Lineage()
    messages: list[bytes] = []
    summaries = []
    for n in range(1_200):
        messages.append(b"more %d" % n)
        placed = lineage.place("", "system", messages, ["user"] * len(messages))
        assert placed == (Placement(side_of=f"c{n - 1}") if n else Placement())
        lineage.record(f"c{n}", "", "system", messages, placed=placed)
        summaries.append(
            SessionSummary(f"c{n}", Path(f"c{n}.jsonl"), float(n), "sim", "m", "", 1, None, (), side_of=placed.side_of)
        )
    listed = under_parents(list(reversed(summaries)))
    assert [(session.id, depth) for session, depth in listed] == [(f"c{n}", n) for n in range(1_200)]


async def test_two_clients_asking_the_same_first_question_are_two_conversations_and_a_retry_is_not(
    watched: tuple[Watch, Seen, str],
) -> None:
    """No session key anywhere: "hello" from the OpenAI SDK, the same from the Anthropic SDK, and from another agent
    on the OpenAI SDK (its own user agent) are three conversations, each of one step; the first client asking it
    again, with a renewed key (a retry), continues its own."""
    watch, seen, url = watched
    hello: Any = [{"role": "user", "content": "hello"}]
    async with (
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-first", max_retries=0) as first,
        openai.AsyncOpenAI(
            base_url=f"{url}/v1", api_key="sk-first", max_retries=0, default_headers={"User-Agent": "another/1.0"}
        ) as other,
        openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="sk-renewed", max_retries=0) as renewed,
        anthropic.AsyncAnthropic(base_url=url, api_key="sk-ant-first", max_retries=0) as messages,
    ):
        await first.chat.completions.create(model="sim-fast", messages=hello)
        await messages.messages.create(model="sim-fast", max_tokens=64, messages=hello)
        await other.chat.completions.create(model="sim-fast", messages=hello)
        await renewed.chat.completions.create(model="sim-fast", messages=hello)
    steps = seen.steps()
    assert len(steps) == 4
    assert len(set(steps[:3])) == 3 and steps[3] == steps[0]
    assert all(watch.conversations[conversation].parent == "" for conversation in steps)
