"""Compaction that keeps the cache: the summary reads the conversation from the cache, the static prefix survives."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.compaction import INSTRUCTION, compacted_messages, with_fix
from hotloop.agent.events import AgentEvent, Compacted, Notice, SideRequest, StepFinished, TurnStarted, fan_out
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.cli import main
from hotloop.config import ConfigError, load_config
from hotloop.core.session import Session, SessionOptions
from hotloop.providers.conversation import AssistantMessage, UserMessage
from hotloop.providers.events import ToolCallStarted
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.providers.transport import SdkProvider
from hotloop.providers.vllm import discover
from hotloop.sessions.log import SessionLog
from hotloop.sessions.resume import rebuild
from hotloop.sessions.store import read_session
from hotloop.sim.cache import BLOCK_SIZE
from hotloop.sim.template import ASSISTANT_HEADER, END
from hotloop.sim.tokenizer import count
from hotloop.tui.items import CompactionItem

from support import Recorder, logged_agent, provider_on, resumed_beside, sim_with_scenario, start_sim
from tui_support import FAST_SIM, idle, running_app, send, wait_until, write_config

# A tool call, then the answer: with a page that fills the window, a mid-turn compaction comes between them.
PAGE = "https://docs.example/cache"
FETCH_THEN_ANSWER = [{"tool_calls": [{"name": "fetch", "arguments": {"url": PAGE}}]}, {"text": "done"}]
URL_SCHEMA = {"type": "object", "properties": {"url": {"type": "string"}}}
# Each turn adds ~190 tokens; at 8,000 tokens of window the 80% threshold is crossed once, before turn 30.
SMALL_WINDOW = "max_model_len = 8000\n"
THIRTY_TURNS = [f"write 120 words about topic {n}" for n in range(1, 31)]


def logged_events(home: Path) -> list[AgentEvent]:
    (log,) = (home / "data" / "sessions").glob("*.jsonl")
    return read_session(log).events


def steps_after(events: list[AgentEvent], event: AgentEvent) -> list[StepFinished]:
    return [e for e in events[events.index(event) + 1 :] if isinstance(e, StepFinished)]


def test_a_30_turn_session_compacts_once_reading_the_cache_and_keeps_the_static_prefix(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(workspace)
    write_config(isolated_home, sim=SMALL_WINDOW)
    assert main(["run", *THIRTY_TURNS]) == 0
    events = logged_events(isolated_home)
    (compacted,) = [e for e in events if isinstance(e, Compacted)]
    assert (compacted.trigger, compacted.window) == ("auto", 8000) and 20 < compacted.turns < 30
    assert compacted.context_tokens is not None and compacted.context_tokens >= 0.8 * 8000
    err = capsys.readouterr().err
    assert "info: compacting the conversation first: ctx 8" in err
    assert f"compacted {compacted.turns} turns (auto) · context {compacted.context_tokens:,} → ≈ " in err

    # The summary request is the conversation's next request plus the instruction: ≥ 90% of it is a cache read.
    usage = compacted.usage
    assert usage is not None and usage.prompt_total is not None and usage.cache_read is not None
    assert usage.cache_read >= 0.9 * usage.prompt_total

    # The first request after it: the system prompt and tools come from the cache; the summary and prompt are new.
    after = steps_after(events, compacted)[0]
    turn = next(e for e in events if isinstance(e, TurnStarted) and e.turn == compacted.turns + 1)
    summary = compacted_messages(compacted.summary)[0]
    assert isinstance(summary, UserMessage)
    added = (
        count(f"<|im_start|>user\n{summary.content}{END}")
        + count(f"<|im_start|>user\n{turn.prompt}{turn.context}{END}")
        + count(ASSISTANT_HEADER)
    )
    assert after.usage is not None and after.usage.prompt_total is not None and after.usage.cache_read is not None
    static = after.usage.prompt_total - added
    assert after.usage.cache_read >= static - static % BLOCK_SIZE > 500
    assert after.usage.cache_read < static + BLOCK_SIZE  # nothing of the old turns is read: they are gone
    assert "the conversation was compacted into its summary" in after.cache_note

    # The log keeps every turn; the conversation it rebuilds is the summary and what came after.
    assert [e.turn for e in events if isinstance(e, TurnStarted)] == list(range(1, 31))
    messages = rebuild(events).messages
    assert messages[0] == summary and len(messages) == 1 + 2 * (30 - compacted.turns)
    assert isinstance(messages[-1], AssistantMessage)
    # The export keeps every turn and quotes the compaction where it happened, summary included.
    assert main(["sessions", "export", "--format", "md"]) == 0
    markdown = capsys.readouterr().out
    assert "write 120 words about topic 1\n" in markdown
    assert f"> compacted {compacted.turns} turns (auto) · " in markdown
    assert "> - The user asked: write 120 words about topic 1\n" in markdown


@pytest.mark.parametrize("protocol", ["openai", "anthropic"])
async def test_a_compacted_conversation_resumes_sending_the_same_bytes(
    protocol: str, tmp_path: Path, workspace: Path
) -> None:
    """Two turns, a compaction, a turn: the next turn's request is the same from the original and a resumed process."""
    sim = start_sim()
    try:
        log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-fast", workspace=workspace, system="")
        original, recorder = logged_agent(sim, protocol, workspace, log)
        for prompt in ("read README.md then grep for TODO", "write 50 words about caching"):
            assert (await original.run_turn(prompt)).reason == "answer"
        compacted = await original.compact("manual")
        assert original.messages == compacted_messages(compacted.summary)
        provider = original.provider
        assert isinstance(provider, SdkProvider) and provider.kept == 0  # the summarized turns' bytes are gone
        assert (await original.run_turn("and then?")).reason == "answer"
        after = recorder.of(StepFinished)[-1]
        if protocol == "openai":  # on Anthropic's API this short a prompt is below the cache minimum
            assert after.usage is not None and after.usage.cache_read  # the static prefix, read from the cache
            assert "the conversation was compacted into its summary" in after.cache_note
        snapshot = tmp_path / "copy" / log.path.name
        expected, resumed, again = await resumed_beside(sim, protocol, original, log, "one more thing", snapshot)
        sent_before = len(sim.server.requests)
        assert (await again.run_turn("one more thing")).turn == 4
        resumed.log.close()
        await again.provider.aclose()
    finally:
        sim.stop()
    assert sim.server.requests[sent_before].body == expected
    first, *rest = [m for m in json.loads(expected)["messages"] if m["role"] != "system"]
    opening = first["content"] if protocol == "openai" else first["content"][0]["text"]
    assert compacted.summary in opening
    assert "write 50 words about caching" not in json.dumps(rest)  # the compacted turns are not sent
    # The log still holds the turns the summary replaced.
    assert [e.turn for e in read_session(snapshot).events if isinstance(e, TurnStarted)] == [1, 2, 3, 4]


@pytest.mark.parametrize("protocol", ["openai", "openai-responses"])
async def test_a_turn_that_outgrows_the_window_compacts_between_its_steps_and_goes_on(
    protocol: str, tmp_path: Path, workspace: Path
) -> None:
    """A tool result fills the window mid-turn: before the next step the turn compacts, reading the conversation from
    the cache, then goes on from the summary; the log rebuilds the conversation the agent holds."""
    pages: list[str] = []

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        pages.append(args["url"])
        return "A long page about how prefix caches evict blocks. " * 280 if len(pages) == 1 else "A short page."

    sim = sim_with_scenario(tmp_path, FETCH_THEN_ANSWER, max_model_len=5000)
    try:
        log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-fast", workspace=workspace, system="")
        recorder = Recorder()
        provider = provider_on(sim, protocol)
        agent = Agent(
            provider,
            ToolRegistry([*builtin_tools(), Tool("fetch", "Fetch a page.", URL_SCHEMA, fetch, read_only=True)]),
            emit=fan_out(recorder, log.write),
            workspace=workspace,
            cache_key=log.id,
            options=AgentOptions(compact_at=0.8, memo_ttl=0),  # no memo: the test counts the fetches that ran
        )
        assert isinstance(provider, OpenAIChatProvider | OpenAIResponsesProvider)
        provider.server = await discover(provider)  # the window: the server's max_model_len
        finished = await agent.run_turn("fetch the cache docs and sum them up")
        log.close()
        await provider.aclose()
    finally:
        sim.stop()

    # Step 1's long page, a compaction, then the scenario again from the summary: a short page and the answer.
    assert (finished.reason, finished.steps, pages) == (
        "answer",
        3,
        [PAGE, PAGE],
    )
    events = recorder.events
    (compacted,) = recorder.of(Compacted)
    at = events.index(compacted)
    (notice,) = [e for e in events[:at] if isinstance(e, Notice) and e.message.startswith("compacting before step 2")]
    assert "of the 5,000-token window, past [context] compact_at = 0.8" in notice.message
    first, second, _ = recorder.of(StepFinished)
    assert events.index(first) < events.index(notice) < at < events.index(second)
    assert (compacted.trigger, compacted.window, compacted.turns) == ("auto", 5000, 1)
    assert compacted.context_tokens is not None and compacted.context_tokens >= 0.8 * 5000

    # The summary request reads from the cache all that step 1 sent: it prefills only what the next step would
    # have (the page) and the instruction. The step after it reads the static prefix.
    usage, sent = compacted.usage, first.usage
    assert usage is not None and usage.prompt_total is not None and usage.cache_read is not None
    assert sent is not None and sent.prompt_total is not None
    assert usage.cache_read >= sent.prompt_total - sent.prompt_total % BLOCK_SIZE
    assert second.usage is not None and second.usage.cache_read
    assert "the conversation was compacted into its summary" in second.cache_note
    assert isinstance(agent.messages[0], UserMessage) and compacted.summary in agent.messages[0].content
    assert "A long page" not in repr(agent.messages[1:])  # the page went into the summary, not again

    # A resume goes on from exactly this conversation.
    assert rebuild(read_session(log.path).events).messages == agent.messages


async def test_a_step_right_after_a_compaction_does_not_compact_again(tmp_path: Path, workspace: Path) -> None:
    """A tool whose every result fills the window: compacting after each would loop, so the turn compacts once and
    lets the next step go out as it is."""

    async def fetch(args: dict[str, Any], ctx: ToolContext) -> str:
        return "A long page about how prefix caches evict blocks. " * 300

    sim = sim_with_scenario(tmp_path, FETCH_THEN_ANSWER, max_model_len=5000)
    try:
        recorder = Recorder()
        provider = provider_on(sim, "openai")
        registry = ToolRegistry([Tool("fetch", "Fetch a page.", URL_SCHEMA, fetch, read_only=True)])
        agent = Agent(provider, registry, emit=recorder, workspace=workspace, options=AgentOptions(compact_at=0.8))
        assert isinstance(provider, OpenAIChatProvider)
        provider.server = await discover(provider)
        finished = await agent.run_turn("fetch the cache docs and sum them up")
        await provider.aclose()
    finally:
        sim.stop()
    # Before step 2 it compacts; step 2 (the scenario again, from the summary) fetches the page again, and step 3
    # goes out with it rather than compact once more.
    assert (finished.reason, finished.steps, len(recorder.of(Compacted))) == ("answer", 3, 1)
    (said,) = [e.message for e in recorder.of(Notice) if e.message.startswith("compacting")]
    assert said.startswith("compacting before step 2")


@pytest.mark.parametrize("provider", ["sim", "sim-anthropic"])
def test_the_simulator_goes_on_from_a_mid_turn_summary_without_redoing_its_calls(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, provider: str
) -> None:
    """The planner reads the summary's last request and the calls it records: after the compaction it answers, where
    planning the request afresh would read the file again, and fill the window again. On Anthropic's API too, whose
    model list says no window: the runtime knows the simulator it started."""
    monkeypatch.chdir(workspace)
    (workspace / "big.txt").write_text("".join(f"line {n}: how prefix caches evict blocks\n" for n in range(300)))
    write_config(isolated_home, sim="max_model_len = 5000\n")
    assert main(["run", "--provider", provider, "read big.txt and summarize it"]) == 0
    events = logged_events(isolated_home)
    kinds = [type(e).__name__ for e in events if isinstance(e, StepFinished | Compacted)]
    assert kinds == ["StepFinished", "Compacted", "StepFinished"]
    assert [e.name for e in events if isinstance(e, ToolCallStarted)] == ["read_file"]


def test_compaction_is_off_when_the_config_says_so(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(workspace)
    write_config(isolated_home, sim="max_model_len = 2000\n")
    with (isolated_home / "config.toml").open("a") as config:
        config.write("[context]\nauto_compact = false\n")
    assert main(["run", *THIRTY_TURNS[:6]]) == 1
    events = logged_events(isolated_home)
    assert not any(isinstance(e, Compacted) for e in events)
    last = [e for e in events if isinstance(e, StepFinished)][-1]
    assert last.usage is not None and last.usage.prompt_total is not None and last.usage.prompt_total > 0.8 * 2000
    # The sixth turn no longer fits: the server's refusal, and what to do, in one line.
    (refused,) = [e for e in events if isinstance(e, Notice) and e.level == "error"]
    assert refused.message.startswith("sim (the embedded simulator) answered 400: This model's maximum context length")
    assert refused.message.endswith(
        " · the conversation no longer fits the context: /compact summarizes it, /new starts afresh"
    )


def test_compact_at_must_be_a_share_of_the_window(isolated_home: Path) -> None:
    (isolated_home / "config.toml").write_text("[context]\ncompact_at = 80\n")
    with pytest.raises(ConfigError, match=r"context\.compact_at must be a share of the window above 0, at most 1"):
        load_config()


async def test_a_summary_cut_off_leaves_the_conversation_as_it_was(isolated_home: Path, workspace: Path) -> None:
    (isolated_home / "config.toml").write_text(
        FAST_SIM + '[providers.tiny]\nkind = "sim-anthropic"\nmax_tokens = 8\ndefault_model = "sim-balanced"\n'
    )
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider="tiny", workspace=workspace), events.append)
    await session.open()
    try:
        await session.turn("hello")
        assert session.agent is not None
        kept = list(session.agent.messages)
        assert await session.compact() is None
        assert session.agent.messages == kept
        (failed,) = [e for e in events if isinstance(e, SideRequest)]
        assert (failed.kind, failed.outcome, failed.error) == (
            "compaction",
            "failed",
            "the summary was cut off by the output limit; the conversation is unchanged",
        )
        assert failed.usage is not None and failed.usage.output  # billed: counted in the session's totals
        assert not [e for e in events if isinstance(e, Notice) and e.level == "error"]  # said once, by that line
        assert not any(isinstance(e, Compacted) for e in events)
    finally:
        await session.close()


async def test_compact_before_any_turn_says_there_is_nothing_to_compact(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "/compact")
        await wait_until(
            lambda: any("nothing to compact yet" in str(n.message) for n in app._notifications),
            what="the refusal",
        )


async def test_slash_compact_in_the_app_marks_the_transcript_and_resets_the_meter(isolated_home: Path) -> None:
    """The transcript shows a compaction rule whose entry opens on the summary; the meter shows the smaller context."""
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        for prompt in ("read README.md", "write 200 words about caching"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        before = app.main.status.context
        assert before is not None
        await send(app, pilot, "/compact")
        history = app.main.transcript.history
        await wait_until(lambda: any(isinstance(item, CompactionItem) for item in history.items), what="the mark")
        item = next(item for item in history.items if isinstance(item, CompactionItem))
        assert item.copy_text() == item.compacted.summary
        assert "- The user asked: read README.md" in item.compacted.summary
        after = app.main.status.context
        assert after is not None and after[0] < before[0]
        assert app.agent is not None and app.agent.messages == compacted_messages(item.compacted.summary)
        await send(app, pilot, "and now?")
        await idle(app, pilot)
        assert INSTRUCTION not in str(app.agent.messages)


@pytest.mark.parametrize(
    "refusal",
    [
        "vllm answered 400: This model's maximum context length is 8192 tokens. However, you requested 9000 tokens.",
        "api.anthropic.com answered 400: prompt is too long: 208950 tokens > 200000 maximum",
        "llama.cpp answered 400: the request exceeds the available context size, try increasing it",
        "sglang answered 400: The input (9000 tokens) is longer than the model's context length (8192 tokens).",
    ],
)
def test_a_refusal_for_length_says_what_to_do(refusal: str) -> None:
    assert with_fix(refusal) == (
        f"{refusal} · the conversation no longer fits the context: /compact summarizes it, /new starts afresh"
    )


def test_other_refusals_are_left_as_they_are() -> None:
    assert with_fix("vllm answered 400: unknown field 'foo'") == "vllm answered 400: unknown field 'foo'"


async def test_a_new_conversation_leaves_the_provider_none_of_the_old_ones_bytes(isolated_home: Path) -> None:
    write_config(isolated_home)
    session = Session(load_config(), SessionOptions(workspace=isolated_home), lambda event: None)
    try:
        await session.open()
        await session.turn("read README.md then grep for TODO")
        assert session.agent is not None
        provider = session.agent.provider
        assert isinstance(provider, SdkProvider) and provider.kept == len(session.agent.messages) - 1  # all sent
        session.new_conversation()
        assert provider.kept == 0
    finally:
        await session.close()
