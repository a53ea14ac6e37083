"""Pre-warming (`core/prewarm.py`): the static prefix sent ahead, against the embedded simulator over loopback HTTP."""

from __future__ import annotations

from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from hotloop.agent.events import AgentEvent, SideRequest, StepFinished, StepStarted, TurnFinished, decode
from hotloop.agent.figures import SessionTotals
from hotloop.config import ANTHROPIC_URL, CacheSettings, Choice, load_config
from hotloop.core.prewarm import verdict
from hotloop.core.session import Session, SessionOptions
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sim.server import RecordedRequest
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import NoticeItem

from support import present, scenario_file, wait_until

FAST = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
# Project instructions long enough that the prefix passes Anthropic's 1,024-token cache minimum.
RULES = "\n".join(f"- Rule {n}: cite the file and line of every claim you make." for n in range(120))
ASK_TOKENS = 32  # the pre-warm's own user turn and its markup, plus a partial 16-token block: not in the prefix


def session_on(
    home: Path, workspace: Path, config: str, provider: str = "sim", sink: Callable[[AgentEvent], None] | None = None
) -> tuple[Session, list[AgentEvent]]:
    (home / "config.toml").write_text(config)
    (workspace / "AGENTS.md").write_text(RULES)
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider=provider, workspace=workspace), sink or events.append)
    session.prewarmer.delay = 0.0  # as if the user took a while to type (`test_a_prompt_typed_at_once_…`: no)
    return session, events


def records(session: Session) -> list[RecordedRequest]:
    runtime = present(session.runtime)
    return list(present(runtime.simulator).server.requests)


def logged(session: Session) -> list[AgentEvent]:
    """The session log's events, as written so far."""
    log = present(session.log)
    log.flush()
    return [decode(line) for line in log.path.read_bytes().splitlines()[1:]]  # the first line is the header


def sides(events: list[AgentEvent]) -> list[SideRequest]:
    return [e for e in events if isinstance(e, SideRequest)]


async def prewarmed(events: list[AgentEvent], count: int) -> None:
    await wait_until(lambda: len(sides(events)) >= count, what=f"{count} pre-warm(s) answered")


@pytest.mark.parametrize("provider", ["sim", "sim-anthropic"])
async def test_the_first_step_reads_the_prewarmed_prefix(isolated_home: Path, workspace: Path, provider: str) -> None:
    session, events = session_on(isolated_home, workspace, FAST, provider)
    await session.open()
    try:
        await prewarmed(events, 1)
        await session.turn("hello")
        warm, step = records(session)
        # The pre-warm is the first step's request but for its last user turn, with a one-token answer.
        assert b'"max_tokens":1' in warm.body.replace(b" ", b"") and warm.prompt_tokens > 1024
        assert step.cached_tokens >= warm.prompt_tokens - ASK_TOKENS
        (finished,) = [e for e in events if isinstance(e, StepFinished)]
        assert present(present(finished.usage).cache_read) >= warm.prompt_tokens - ASK_TOKENS
        # A side request with its usage: shown, logged, and counted in the totals but not as a step.
        (side,) = sides(events)
        assert sides(logged(session)) == [side]
        assert (side.kind, side.why, side.provider, side.outcome) == ("pre-warm", "start", provider, "answered")
        usage = present(side.usage)
        assert (usage.prompt_total, usage.output) == (warm.prompt_tokens, 1)
        totals = SessionTotals()
        for event in events:
            if isinstance(event, StepStarted | StepFinished | SideRequest):
                totals.add(event)
        step_usage = present(finished.usage)
        assert (totals.steps, totals.side_requests) == (1, 1)
        assert totals.prompt == warm.prompt_tokens + present(step_usage.prompt_total)
        # The hit rate is the step's own: the pre-warm's write is not a miss of the session's.
        assert totals.cache_hit == present(step_usage.cache_read) / present(step_usage.prompt_total)
        # Sent before the log existed, under the id the log then took: one routing key for the whole session.
        assert present(session.log).id == present(session.agent).cache_key
    finally:
        await session.close()


@pytest.mark.parametrize(
    ("provider", "path", "cap"),
    [
        ("sim", "/v1/chat/completions", b'"max_tokens":1'),
        ("sim-anthropic", "/v1/messages", b'"max_tokens":1'),
        # The Responses API refuses fewer than 16 ("Expected a value >= 16"), and so does the simulator.
        ("sim-responses", "/v1/responses", b'"max_output_tokens":16'),
    ],
)
async def test_every_protocol_accepts_the_prewarm(
    isolated_home: Path, workspace: Path, provider: str, path: str, cap: bytes
) -> None:
    """The pre-warm goes out through the protocol's own SDK client with the least cap its API takes, is answered,
    counted once in the status bar's totals, and the first step reads what it wrote."""
    session, events = session_on(isolated_home, workspace, FAST, provider)
    await session.open()
    try:
        await prewarmed(events, 1)
        (side,) = sides(events)
        assert (side.outcome, side.error) == ("answered", "")
        await session.turn("hello")
        warm, step = records(session)
        assert (warm.path, warm.status) == (path, 200) and cap in warm.body.replace(b" ", b"")
        assert step.cached_tokens >= warm.prompt_tokens - ASK_TOKENS
        totals = SessionTotals()
        for event in events:
            if isinstance(event, StepStarted | StepFinished | SideRequest):
                totals.add(event)
        assert totals.side_requests == 1
    finally:
        await session.close()


async def test_a_refused_prewarm_is_said_and_never_counted(
    isolated_home: Path, workspace: Path, tmp_path: Path
) -> None:
    """A pre-warm the server refuses (a real 400 over loopback) is one line in the transcript, and the status bar's
    totals count no pre-warm for it (`incl. 1 pre-warm` was shown for a refused one)."""
    refused_once = scenario_file(tmp_path, [{"status": 400, "times": 1, "text": "Hello."}])
    session, events = session_on(isolated_home, workspace, FAST + f"scenario = {str(refused_once)!r}\n")
    await session.open()
    try:
        await prewarmed(events, 1)
        (side,) = sides(events)
        assert side.outcome == "failed" and "400" in side.error
        (item, _), *_ = TranscriptFold().apply(side)
        assert isinstance(item, NoticeItem) and "failed: " in item.message
        finished = await session.turn("hello")
        assert finished.reason == "answer"
        totals = SessionTotals()
        for event in events:
            if isinstance(event, StepStarted | StepFinished | SideRequest):
                totals.add(event)
        assert (totals.steps, totals.side_requests) == (1, 0)  # what the status bar's `incl. N pre-warm` reads
    finally:
        await session.close()


async def test_off_sends_nothing_extra(isolated_home: Path, workspace: Path) -> None:
    session, events = session_on(isolated_home, workspace, FAST + '[cache]\nprewarm = "off"\n')
    await session.open()
    try:
        assert session.prewarmer.task is None
        await session.turn("hello")
        (step,) = records(session)
        assert step.cached_tokens == 0 and sides(logged(session)) == sides(events) == []
    finally:
        await session.close()
    assert 'prewarm = "off"' in load_config().to_toml()


def test_a_hosted_api_is_not_prewarmed_under_auto() -> None:
    def anthropic(base_url: str) -> AnthropicProvider:
        provider = AnthropicProvider(ProviderOptions(name="anthropic", base_url=base_url, api_key="not-used"))
        provider.model = "claude-sonnet-4-5"
        return provider

    hosted = verdict(CacheSettings(), anthropic(ANTHROPIC_URL), 12_000)
    assert not hosted.send and hosted.lifetime == 300.0
    # The estimate shown: the first step's read of 12,000 tokens at a tenth of $3/M, and one output token.
    assert "writes it at 1.25× input" in hosted.why and "~$0.0036 more per start" in hosted.why
    assert verdict(CacheSettings(), anthropic(ANTHROPIC_URL), 12_000, "1h").lifetime == 3600.0
    # The same protocol on a server someone runs is pre-warmed; "off" is off everywhere.
    assert verdict(CacheSettings(), anthropic("http://127.0.0.1:9"), 12_000).send
    assert not verdict(CacheSettings(prewarm="off"), anthropic("http://127.0.0.1:9"), 12_000).send


async def test_a_prompt_sent_at_once_does_not_wait_for_the_prewarm(isolated_home: Path, workspace: Path) -> None:
    # Prefill slow enough (3 s for the prefix) that the pre-warm is still running when the prompt goes out.
    slow = FAST.replace("prefill_us_per_token = 0", "prefill_us_per_token = 1000")
    events: list[AgentEvent] = []
    warm_at_step: list[bool] = []  # at each StepStarted: whether the pre-warm had ended

    def sink(event: AgentEvent) -> None:
        if isinstance(event, StepStarted) and session.prewarmer.task is not None:
            warm_at_step.append(session.prewarmer.task.done())
        events.append(event)

    session, _ = session_on(isolated_home, workspace, slow, sink=sink)
    await session.open()
    try:
        warming = present(session.prewarmer.task)
        await wait_until(lambda: len(records(session)) == 1, what="the pre-warm at the server, prefilling")
        finished = await session.turn("hello")
        # The step's request went out while the pre-warm was still running: not queued behind it. The pre-warm was
        # cancelled (measured: never slower than none; left to finish, one racing the step's request slowed it).
        assert warm_at_step == [False] and finished.reason == "answer"
        await wait_until(warming.done)
        written = logged(session)
        (side,) = sides(written)
        assert warming.cancelled() and (side.outcome, side.usage) == ("cancelled", None)
        ended = next(e for e in written if isinstance(e, TurnFinished))
        assert written.index(side) < written.index(ended)  # ended before the turn did, its prefill undone
    finally:
        await session.close()


async def test_a_prompt_typed_at_once_sends_no_prewarm(isolated_home: Path, workspace: Path) -> None:
    # Sooner than the pre-warm's delay: it would only be cancelled (and it can't help a step sent now).
    session, events = session_on(isolated_home, workspace, FAST)
    session.prewarmer.delay = 60.0
    await session.open()
    try:
        warming = present(session.prewarmer.task)
        await session.turn("hello")
        await wait_until(warming.done)
        assert warming.cancelled() and len(records(session)) == 1
        assert sides(logged(session)) == sides(events) == []
    finally:
        await session.close()


async def test_a_switch_prewarms_the_new_provider(isolated_home: Path, workspace: Path) -> None:
    session, events = session_on(isolated_home, workspace, FAST)
    await session.open()
    try:
        await prewarmed(events, 1)
        await session.switch(Choice(provider="sim-anthropic"))
        await prewarmed(events, 2)
        assert [r.path for r in records(session)] == ["/v1/chat/completions", "/v1/messages"]
        await session.turn("hello")
        last = sides(logged(session))[-1]
        assert (last.why, last.provider, last.outcome) == ("switch", "sim-anthropic", "answered")
        step = records(session)[-1]
        assert step.path == "/v1/messages" and step.cached_tokens >= records(session)[1].prompt_tokens - ASK_TOKENS
    finally:
        await session.close()


async def test_after_an_idle_gap_past_the_cache_lifetime_the_prefix_is_warmed_again(
    isolated_home: Path, workspace: Path
) -> None:
    session, events = session_on(isolated_home, workspace, FAST, "sim-anthropic")
    await session.open()
    try:
        await prewarmed(events, 1)
        await session.turn("hello")
        agent = present(session.agent)
        session.prewarmer.after_turn(agent, lifetime=0.0)  # as if the 5 minutes had passed
        await prewarmed(events, 2)
        assert sides(logged(session))[-1].why == "idle"
        # The conversation's history is part of the prefix now: the idle pre-warm carries it.
        assert records(session)[-1].prompt_tokens > records(session)[0].prompt_tokens
    finally:
        await session.close()


def test_a_self_hosted_openai_compatible_server_has_no_idle_timer() -> None:
    # Its cache keeps a prefix until it needs the room, which no timer predicts: only start and switch warm it.
    provider = OpenAIChatProvider(ProviderOptions(name="local", base_url="http://127.0.0.1:9/v1", api_key="k"))
    judged = verdict(CacheSettings(), provider, 2_000)
    assert judged.send and judged.lifetime is None


def test_a_side_request_reads_as_one_line_and_counts_in_the_summary() -> None:
    from hotloop.agent.events import encode
    from hotloop.providers.events import UsageLedger
    from hotloop.sessions.summary import Summary

    usage = UsageLedger(12_030, cache_read=0, cache_write=12_030, uncached=0, output=1)
    side = SideRequest(
        kind="pre-warm", why="start", provider="anthropic", model="claude-sonnet-4-5", usage=usage, model_time=0.46
    )
    (item, _), *_ = TranscriptFold().apply(side)
    assert isinstance(item, NoticeItem) and item.message == (
        "pre-warm (start, side request) · anthropic claude-sonnet-4-5 · "
        "prompt 12,030 (cache read 0 · write 12,030 · uncached 0) · out 1 · 0.46 s"
    )
    cancelled = msgspec.structs.replace(side, usage=None, outcome="cancelled")
    (item, _), *_ = TranscriptFold().apply(cancelled)
    assert isinstance(item, NoticeItem) and item.message.endswith(
        "cancelled: a prompt went out first; usage not reported"
    )
    # The session list's summary prices it (the hosted API's write at 1.25× $3/M, one output token at $15/M).
    summary = Summary(costed=True)
    summary.learn("anthropic", ANTHROPIC_URL)
    summary.scan(encode(side) + b"\n")
    assert summary.tokens == 12_031 and summary.priced == 1
    assert summary.cost == str(Decimal("12030") * Decimal("3.75") / 1_000_000 + Decimal("15") / 1_000_000)
