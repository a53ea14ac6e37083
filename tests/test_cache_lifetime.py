"""The cache's lifetime chosen from the user's own pauses (`agent/cache_lifetime.py`), priced both ways.

The arithmetic is Anthropic's documented multipliers (a 5-minute write 1.25× the input price, a 1-hour one 2×, a
read 0.1×); the end-to-end part runs a real session on the simulator's Anthropic side over loopback HTTP.
"""

from __future__ import annotations

import time
from decimal import Decimal
from pathlib import Path

from hotloop.agent.cache_lifetime import CacheRhythm, compare_lifetimes, input_price
from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ResponseFinished,
    SideRequest,
    StepFinished,
    StepStarted,
    TurnStarted,
)
from hotloop.agent.pricing import StepPricer
from hotloop.config import ANTHROPIC_URL, load_config
from hotloop.core.session import Session, SessionOptions
from hotloop.providers.events import UsageLedger
from hotloop.sessions.waterfall import lifetime_line

from support import present, wait_until

T0 = 1_700_000_000.0
MODEL = "claude-sonnet-4-5"


def step(turn: int, number: int, start: float, end: float, read: int, written: int) -> list[AgentEvent]:
    usage = UsageLedger(
        read + written + 20, cache_read=read, cache_write=written, uncached=20, output=50, cache_write_1h=0
    )
    return [
        StepStarted(turn=turn, step=number, provider="anthropic", model=MODEL, ts=start),
        ResponseFinished(
            turn=turn, step=number, usage=usage, ttft=0.5, decode_tps=50.0, model_time=end - start,
            finish_reason="end_turn", ts=end,
        ),
    ]  # fmt: skip


def session_with_a_pause(pause: float, t0: float = T0) -> list[AgentEvent]:
    """Two turns: a 100,000-token prefix written, read by the next step, then `pause` seconds of the user's."""
    second = t0 + 10 + pause
    # With 5-minute writes a pause past 5 minutes finds the prefix gone: it is written again.
    read, written = (0, 107_000) if pause > 300 else (105_000, 2_000)
    return [
        TurnStarted(turn=1, prompt="one", ts=t0),
        *step(1, 1, t0, t0 + 4, read=0, written=100_000),
        *step(1, 2, t0 + 6, t0 + 10, read=100_000, written=5_000),
        TurnStarted(turn=2, prompt="two", ts=second),
        *step(2, 1, second, second + 4, read=read, written=written),
    ]


def rhythm_of(events: list[AgentEvent]) -> CacheRhythm:
    rhythm = CacheRhythm()
    for event in events:
        rhythm.observe(event)
    return rhythm


def test_short_pauses_keep_five_minute_writes_and_say_what_an_hour_would_cost() -> None:
    rhythm = rhythm_of(session_with_a_pause(130))
    choice = present(rhythm.choice())
    # 5m: 100,000 × 1.25, then 100,000 × 0.1 + 5,000 × 1.25, then 105,000 × 0.1 + 2,000 × 1.25.
    # 1h: the same reads, every write at 2×.
    assert choice.cost == {"5m": Decimal(154_250), "1h": Decimal(234_500)}
    assert (choice.ttl, choice.why) == ("5m", "no pause outlived 5 minutes, the longest 2 min 10 s")
    price = input_price(MODEL, ANTHROPIC_URL)  # $3 a million input tokens: 80,250 × 3 / 1e6 = $0.24
    assert compare_lifetimes(rhythm, price) == (
        "1-hour writes would have cost $0.2408 more this session (no pause outlived 5 minutes, the longest 2 min 10 s)"
    )
    assert compare_lifetimes(rhythm, lambda equivalents: None) == (  # no price: the difference in tokens
        "1-hour writes would have cost ≈ 80,250 input tokens' worth more this session "
        "(no pause outlived 5 minutes, the longest 2 min 10 s)"
    )


def test_a_pause_past_five_minutes_makes_one_hour_writes_the_choice_and_prices_the_saving() -> None:
    events = session_with_a_pause(400)
    choice = present(rhythm_of(events).choice())
    # 5m writes the whole 107,000 again at 1.25×; 1h reads the 105,000 it kept and writes 2,000 at 2×.
    assert choice.cost == {"5m": Decimal(275_000), "1h": Decimal(234_500)}
    assert (choice.ttl, choice.why) == ("1h", "1 of your 1 pause outlived 5 minutes")
    # The waterfall's line, at the price table's input price: 40,500 × $3 / 1e6.
    pricer = StepPricer(servers={"anthropic": ANTHROPIC_URL})
    assert lifetime_line(events, pricer) == (
        "cache lifetime: written 5-minute · 1-hour writes would have saved $0.1215 this session "
        "(1 of your 1 pause outlived 5 minutes)"
    )


def test_without_cache_writes_reported_there_is_no_lifetime_to_choose() -> None:
    usage = UsageLedger(5_000, cache_read=4_000, cache_write=None, uncached=1_000, output=10)  # OpenAI's figures
    events: list[AgentEvent] = [
        StepStarted(turn=1, step=1, provider="openai", model="gpt-5", ts=T0),
        ResponseFinished(
            turn=1, step=1, usage=usage, ttft=0.2, decode_tps=80.0, model_time=1.0, finish_reason="stop", ts=T0 + 1
        ),
    ]
    assert rhythm_of(events).choice() is None and lifetime_line(events) is None


async def test_auto_switches_the_simulators_anthropic_side_to_one_hour_writes(
    isolated_home: Path, workspace: Path
) -> None:
    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n"
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\ncache_min_tokens = 64\n"
    )
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider="sim-anthropic", workspace=workspace), events.append)
    session.prewarmer.delay = 60.0  # no start pre-warm: the first request is the first step's
    await session.open()
    try:
        # What the session has seen so far: a pause of 400 s between two turns (a test can't wait it out).
        for event in session_with_a_pause(400, t0=time.time() - 415):
            session.prewarmer.rhythm.observe(event)
        await session.turn("hello")
        said = [e.message for e in events if isinstance(e, Notice) and e.message.startswith("cache lifetime")]
        assert said == ["cache lifetime: 1-hour writes from the next request on: 1 of your 2 pauses outlived 5 minutes"]
        assert "1-hour, chosen from your pauses" in present(session.cache_lifetime())
        await session.turn("again")
        requests = present(present(session.runtime).simulator).server.requests
        assert b'"ttl":"1h"' not in requests[0].body and b'"ttl":"1h"' in requests[-1].body
        last = [e for e in events if isinstance(e, StepFinished)][-1]
        usage = present(last.usage)
        assert usage.cache_write and usage.cache_write_1h == usage.cache_write  # billed as the server split them
        # The idle pre-warm writes for the lifetime the steps chose: a 5-minute one would expire under them.
        session.prewarmer.after_turn(present(session.agent), lifetime=0.0)
        await wait_until(lambda: any(isinstance(e, SideRequest) for e in events), what="the idle pre-warm")
        assert b'"ttl":"1h"' in requests[-1].body and b'"max_tokens":1,' in requests[-1].body
    finally:
        await session.close()


def test_the_explainer_judges_expiry_by_the_lifetime_the_last_write_asked() -> None:
    from hotloop.agent.cache_explainer import CacheExplainer
    from hotloop.providers.conversation import ChatRequest, Message, UserMessage

    def verdict(hour: bool) -> str:
        explainer = CacheExplainer()
        messages: list[Message] = [UserMessage("hello")]
        written = UsageLedger(
            5_000, cache_read=0, cache_write=5_000, uncached=0, output=5, cache_write_1h=5_000 if hour else 0
        )
        explainer.fingerprint(ChatRequest(system="rules", tools=(), messages=tuple(messages)), "claude", MODEL, T0)
        assert explainer.explain(written, messages, anthropic=True) == ""
        messages.append(UserMessage("again"))
        missed = UsageLedger(5_040, cache_read=0, cache_write=5_040, uncached=0, output=5)
        explainer.fingerprint(
            ChatRequest(system="rules", tools=(), messages=tuple(messages)), "claude", MODEL, T0 + 600
        )
        return explainer.explain(missed, messages, anthropic=True)

    # Ten minutes later: past a 5-minute write's life, within a 1-hour one's (where only an eviction explains it).
    assert verdict(hour=False).startswith(
        "cache miss: the cached prefix expired (600 s since the last request; the TTL is 5 min)"
    )
    assert verdict(hour=True).startswith(
        "cache miss: evicted: nothing changed, yet the server no longer had the prefix"
    )


def test_the_status_bars_cost_detail_says_the_lifetime_as_text_not_markup() -> None:
    from rich.text import Text

    from hotloop.agent.figures import SessionTotals
    from hotloop.tui.widgets.status_bar import StatusBar

    bar = StatusBar()
    totals = SessionTotals()
    totals.add(SideRequest(kind="pre-warm", why="start", provider="sim", model="m", usage=None, model_time=0.1))
    bar.totals = totals
    bar.show_detail("cache writes: 5-minute, as configured ([providers] cache_ttl)")
    assert isinstance(bar.tooltip, Text)
    assert bar.tooltip.plain.splitlines() == [
        "0 steps and 1 pre-warm (side requests): price unknown",
        "cache writes: 5-minute, as configured ([providers] cache_ttl)",
    ]


async def test_a_resumed_session_writes_for_the_lifetime_its_pauses_chose(isolated_home: Path, workspace: Path) -> None:
    (isolated_home / "config.toml").write_text(
        '[routing]\ntitles = false\n[cache]\nprewarm = "off"\n'
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\ncache_min_tokens = 64\n"
    )
    first = Session(load_config(), SessionOptions(provider="sim-anthropic", workspace=workspace), lambda e: None)
    await first.open()
    try:
        await first.turn("hello")
        log = present(first.log)
        for event in session_with_a_pause(400, t0=time.time() - 415):  # as if the log held a 400 s pause
            log.write(event)
    finally:
        await first.close()
    events: list[AgentEvent] = []
    options = SessionOptions(provider="sim-anthropic", workspace=workspace, resume=log.path)
    resumed = Session(load_config(), options, events.append)
    await resumed.open()
    try:
        said = [e.message for e in events if isinstance(e, Notice) and e.message.startswith("cache lifetime")]
        assert said and said[0].startswith("cache lifetime: 1-hour writes from the next request on: ")
        await resumed.turn("again")
        requests = present(present(resumed.runtime).simulator).server.requests
        assert b'"ttl":"1h"' in requests[-1].body
    finally:
        await resumed.close()
