"""`hotloop whatif` on sessions with pre-warms: a pre-warm's prompt ends with an ask no step sends, so the next step
reads only what the two share, which its `SideRequest` logs (`shared`). Driven through the simulator: its Chat
Completions side is vLLM's prefix cache (16-token blocks, LRU), its Messages side Anthropic's breakpoints.
"""

from __future__ import annotations

import json
from pathlib import Path

import msgspec
import pytest

from hotloop import paths
from hotloop.agent.events import SideRequest, decode
from hotloop.agent.loop import Agent
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.cli import main
from hotloop.core.prewarm import prewarm_request, side_request
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sessions.log import SessionLog
from hotloop.sessions.whatif import check
from hotloop.sessions.whatif.cache import replay
from hotloop.sessions.whatif.policies import Recorded
from hotloop.sessions.whatif.report import priced_as
from hotloop.sessions.whatif.trace import Conversation, read_conversation

from support import present, start_sim

PROMPTS = ("read README.md then grep for TODO", "write 50 words about caching", "and then?")


async def prewarmed_session(folder: Path, workspace: Path, first: str, then: str) -> Path:
    """A pre-warm and a turn on `first`, a switch to `then` and its pre-warm, two turns there: as the app sends them
    (`Prewarmer` sends `prewarm_request` through `side_request`), on Anthropic without thinking (a thinking budget
    turns the pre-warm off)."""
    (workspace / "README.md").write_text("# Demo\n\n" + "A line about the demo project and its caching. " * 150)
    sim = start_sim()
    try:

        def provider(protocol: str) -> OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider:
            if protocol == "anthropic":
                options = ProviderOptions(name="sim-anthropic", model="sim-fast", base_url=sim.url, max_retries=0)
                return AnthropicProvider(options, max_tokens=4096)
            if protocol == "openai-responses":
                options = ProviderOptions(name="sim-responses", model="sim-fast", base_url=sim.base_url, max_retries=0)
                return OpenAIResponsesProvider(options)
            return OpenAIChatProvider(
                ProviderOptions(name="sim", model="sim-fast", base_url=sim.base_url, max_retries=0)
            )

        log = SessionLog.create(
            folder, provider="sim", model="sim-fast", workspace=workspace, system="", base_url=sim.base_url
        )
        agent = Agent(
            provider(first), ToolRegistry(builtin_tools()), emit=log.write, workspace=workspace, cache_key=log.id
        )
        opened = [agent.provider]
        assert await side_request(agent.provider, prewarm_request(agent), "pre-warm", "start", log.write, lambda: False)
        assert (await agent.run_turn(PROMPTS[0])).reason == "answer"
        agent.switch(provider(then))
        opened.append(agent.provider)
        assert await side_request(
            agent.provider, prewarm_request(agent), "pre-warm", "switch", log.write, lambda: False
        )
        for prompt in PROMPTS[1:]:
            assert (await agent.run_turn(prompt)).reason == "answer"
        log.close()
        for client in opened:
            await client.aclose()
    finally:
        sim.stop()
    return log.path


def assert_every_request_reproduced(conversation: Conversation) -> None:
    """Each request's replayed read, write and uncached tokens are exactly the logged ones the server reported."""
    for _, server, requests in priced_as(conversation, None):
        for served in replay(server, requests, Recorded()):
            assert served.request is not None
            usage, what = served.request.usage, served.request.what
            if usage.cache_read is not None:
                assert served.read == usage.cache_read, what
            if usage.cache_write is not None:
                assert served.write == usage.cache_write, what
            if usage.cache_read is not None and usage.cache_write is not None:
                assert served.uncached == served.request.prompt - usage.cache_read - usage.cache_write, what
    assert check(conversation) == []


@pytest.mark.parametrize(("first", "then"), [("openai", "anthropic"), ("anthropic", "openai")])
async def test_recorded_reproduces_every_request_after_a_prewarm_and_after_a_switch(
    tmp_path: Path, workspace: Path, first: str, then: str
) -> None:
    """On the vLLM-style server the step after a pre-warm reads the blocks of what the two share, not the
    pre-warm's whole prompt and answer; on Anthropic's the switch's pre-warm writes the conversation up to its ask and
    the next step reads all of it. `recorded` gives every request its logged figures, to the token."""
    conversation = read_conversation(await prewarmed_session(tmp_path / "sessions", workspace, first, then))
    prewarms = [request for request in conversation.requests if request.what == "pre-warm"]
    assert [request.provider for request in prewarms] == [
        "sim" if first == "openai" else "sim-anthropic",
        "sim" if then == "openai" else "sim-anthropic",
    ]
    for prewarm in prewarms:
        assert prewarm.beside and prewarm.shares is not None and 0 < prewarm.shares < prewarm.prompt
    switched = prewarms[1]
    after, shared = conversation.requests[conversation.requests.index(switched) + 1], present(switched.shares)
    if then == "anthropic":  # the step reads what the pre-warm wrote: the history, its last answer included
        answer = conversation.requests[conversation.requests.index(switched) - 1].output
        assert after.usage.cache_read == switched.cacheable == shared > after.prompt - answer
    else:  # the blocks they share, none of the pre-warm's ask
        assert after.usage.cache_read == shared // 16 * 16
    assert_every_request_reproduced(conversation)


async def test_a_prefix_another_endpoint_of_the_same_server_left_is_named_as_such(
    tmp_path: Path, workspace: Path
) -> None:
    """From the simulator's Chat Completions to its Responses API: one server, one prefix cache. The switch's pre-warm
    reads the system prompt's blocks the chat requests left, which no model of one endpoint predicts: it is named,
    with that reason, and the step after it is reproduced."""
    path = await prewarmed_session(tmp_path / "sessions", workspace, "openai", "openai-responses")
    conversation = read_conversation(path)
    prewarm = next(request for request in conversation.requests if request.provider == "sim-responses")
    assert prewarm.what == "pre-warm" and present(prewarm.usage.cache_read) > 0
    assert [mismatch.line for mismatch in check(conversation)] == [
        f"{conversation.session} request {prewarm.number} (pre-warm): the server read {prewarm.usage.cache_read:,}"
        " and wrote 0, the model read 0 and wrote 0: the first over sim-responses, yet it read a prefix: one the"
        " requests over sim left there"
    ]


async def test_a_log_from_before_shared_was_recorded_decodes_and_the_request_it_cant_replay_is_named(
    tmp_path: Path, workspace: Path
) -> None:
    """A `SideRequest` line without `shared` (an older hotloop's) still decodes; the step after that pre-warm, whose
    read the model can't bound, is named with why."""
    logged = await prewarmed_session(tmp_path / "sessions", workspace, "openai", "anthropic")
    header, *lines = logged.read_bytes().splitlines()
    older = []
    for line in lines:
        event = json.loads(line)
        if event["type"] == "side_request":
            del event["shared"]
            side = decode(line)
            assert isinstance(side, SideRequest) and side.shared is not None
            assert decode(json.dumps(event)) == msgspec.structs.replace(side, shared=None)
        older.append(json.dumps(event).encode())
    path = tmp_path / "older.jsonl"
    path.write_bytes(b"\n".join([header, *older]) + b"\n")
    conversation = read_conversation(path)
    prewarm, step = conversation.requests[:2]
    assert prewarm.beside and prewarm.shares is None
    modelled = (prewarm.prompt + prewarm.output) // 16 * 16  # all it held: a block more than the step shared
    assert modelled > (step.usage.cache_read or 0)
    assert [mismatch.line for mismatch in check(conversation)] == [
        f"{conversation.session} request 2 (step 1.1): the server read {step.usage.cache_read:,}, the model read"
        f" {modelled:,}: how much of its prefix the pre-warm before it shared is not in the log (an older hotloop's)"
    ]


async def test_a_hostile_shared_figure_is_held_within_the_prompt(
    isolated_home: Path, workspace: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pre-warm whose `shared` is negative or past its prompt is read as none or as all of it; one whose `shared`
    is no integer is a skipped line, said in one warning; `whatif` prices every request under every policy."""
    path = await prewarmed_session(paths.sessions_dir(), workspace, "openai", "anthropic")
    header, *lines = path.read_bytes().splitlines()
    hostile = iter((-5, 10**18))
    edited = []
    for line in lines:
        event = json.loads(line)
        if event["type"] == "side_request":
            event["shared"] = next(hostile)
            edited.append(json.dumps({**event, "shared": "many"}).encode())
        edited.append(json.dumps(event).encode())
    path.write_bytes(b"\n".join([header, *edited]) + b"\n")
    conversation = read_conversation(path)
    first, second = [request for request in conversation.requests if request.beside]
    assert (first.shares, second.shares) == (0, second.prompt)
    assert main(["whatif", "--json", "--since", "3650d"]) == 0
    captured = capsys.readouterr()
    assert captured.err.endswith(": 2 unreadable lines or requests without figures skipped\n")
    policies = json.loads(captured.out)["policies"]
    assert {policy["requests"] for policy in policies} == {len(conversation.requests)}
