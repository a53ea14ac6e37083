"""The keep-alive, live (`core/keepalive.py`): pings in a pause, against the embedded simulator's Anthropic side over
loopback HTTP. The simulator's cache runs on a clock the test holds, and the pinger's wait until a ping's time moves
that clock on by as much: a pause of minutes passes at once, with the policy's own offsets."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import pytest
from aiohttp import web
from test_prewarm import FAST, RULES, logged, records, session_on, sides
from test_watch import KEY

from hotloop import paths
from hotloop.agent.events import AgentEvent, SideRequest, StepFinished, StepStarted, TurnFinished
from hotloop.agent.figures import SessionTotals
from hotloop.cli.arguments import UsageError
from hotloop.cli.watch import _with_keepalive
from hotloop.config import ConfigError, KeepaliveSettings, load_config
from hotloop.core.session import Session
from hotloop.headless.watch_table import WatchTable
from hotloop.sessions.whatif import check
from hotloop.sessions.whatif.trace import read_conversation
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.server import RecordedRequest
from hotloop.tui.fold import TranscriptFold
from hotloop.tui.items import NoticeItem
from hotloop.tui.widgets.status_bar import StatusBar, fitted
from hotloop.watch import Watch, upstream_at

from support import present, scenario_file, start_sim, wait_until

QUIET = FAST + '[cache]\nprewarm = "off"\n'  # the pre-warmer's own requests out of the way
ON = QUIET + '[keepalive]\nmode = "adaptive"\nmax_pings_per_pause = 1\n'
PAST_LIFETIME = 200.0  # seconds the pause goes on after the ping: it outlives the 5-minute lifetime (285 + 200)


def held_clock(session: Session, late: float = 0.0) -> list[float]:
    """The simulator's cache clock, held by the test, and the pinger's; the pinger's waits move it on (`late`
    seconds further: a ping that finds the prefix gone)."""
    now = [1_000.0]
    engine = present(present(session.runtime).simulator).server.engine
    engine.breakpoints.clock = session.keepalive.clock = lambda: now[0]

    async def wait(seconds: float) -> None:
        now[0] += seconds + late

    session.keepalive.wait = wait
    return now


async def test_a_ping_in_the_pause_keeps_the_prefix_for_the_next_step(isolated_home: Path, workspace: Path) -> None:
    """With the keep-alive on, a ping goes out in a pause past the cache's lifetime (a side request, logged and
    counted), reads the prefix, and the next step reads it from the cache too instead of writing it again."""
    session, events = session_on(isolated_home, workspace, ON, "sim-anthropic")
    await session.open()
    try:
        now = held_clock(session)
        await session.turn("hello")
        await wait_until(lambda: sides(events), what="the keep-alive's ping")
        first, ping = records(session)
        (side,) = sides(logged(session))
        assert (side.kind, side.why, side.outcome) == ("keep-alive", "pause", "answered")
        usage = present(side.usage)
        assert usage.output == 1 and b'"max_tokens":1' in ping.body.replace(b" ", b"")
        assert present(usage.cache_read) >= first.prompt_tokens - 64 and ping.cached_tokens == usage.cache_read
        totals = SessionTotals()
        for event in events:
            if isinstance(event, StepStarted | StepFinished | SideRequest):
                totals.add(event)
        assert (totals.steps, totals.side_requests, totals.pings) == (1, 1, 1) and totals.prompt > first.prompt_tokens
        bar = StatusBar()
        bar.totals = totals
        assert "incl. 1 keep-alive ping" in fitted(bar.parts(), 200).plain  # not called a pre-warm
        now[0] += PAST_LIFETIME
        await session.turn("and now?")
        step = records(session)[-1]
        assert step.cached_tokens >= first.prompt_tokens - 64 and step.cache_write_tokens < step.prompt_tokens / 2
        # The policy learned the pause (285 + 200 s): its one ping paid, where no keep-alive would have re-written.
        policy = present(session.keepalive.policy("sim-anthropic"))
        assert policy.paid == pytest.approx(policy.costs.ping, rel=0.2) and policy.unpinged > policy.paid
    finally:
        await session.close()


async def test_without_the_keepalive_the_same_pause_writes_the_prefix_again(
    isolated_home: Path, workspace: Path
) -> None:
    """Off (the default), nothing is sent in the pause, and the step after it writes the expired prefix again."""
    session, events = session_on(isolated_home, workspace, QUIET, "sim-anthropic")
    await session.open()
    try:
        now = held_clock(session)
        await session.turn("hello")
        assert session.keepalive.task is None
        now[0] += 285.0 + PAST_LIFETIME
        await session.turn("and now?")
        first, step = records(session)
        assert sides(events) == [] and step.cached_tokens == 0 and step.cache_write_tokens >= first.prompt_tokens
    finally:
        await session.close()


async def test_a_turn_started_cancels_the_ping_in_flight(isolated_home: Path, workspace: Path) -> None:
    """A prompt sent while a ping is at the server goes out at once: the ping is cancelled (said, usage unknown),
    and the step's request started while the ping had not ended."""
    slow = ON.replace("prefill_us_per_token = 0", "prefill_us_per_token = 1000")  # the ping prefills for seconds
    pinging_at_step: list[bool] = []

    def sink(event: AgentEvent) -> None:
        if isinstance(event, StepStarted) and session.keepalive.task is not None:
            pinging_at_step.append(not session.keepalive.task.done())
        events.append(event)

    events: list[AgentEvent] = []
    session, _ = session_on(isolated_home, workspace, slow, "sim-anthropic", sink=sink)
    await session.open()
    try:
        held_clock(session, late=600.0)  # the ping finds the prefix gone: it prefills it all, for seconds
        await session.turn("hello")
        pinging = present(session.keepalive.task)
        await wait_until(lambda: len(records(session)) == 2, what="the ping at the server, prefilling")
        await session.turn("and now?")
        assert pinging_at_step == [True]
        await wait_until(pinging.done)
        written = logged(session)
        (side,) = sides(written)
        assert (side.kind, side.outcome, side.usage) == ("keep-alive", "cancelled", None)
        second = [n for n, e in enumerate(written) if isinstance(e, StepStarted)][1]
        ended = [n for n, e in enumerate(written) if isinstance(e, TurnFinished)][1]
        assert second < written.index(side) < ended
    finally:
        await session.close()


async def test_a_refused_ping_is_one_line_and_the_last(isolated_home: Path, workspace: Path, tmp_path: Path) -> None:
    """A ping the server refuses (a real 400 over loopback) is one line, a failed side request, and no ping follows
    it in that pause (the prefix's renewal is unknown); the next turn is answered."""
    # A step answers the requests with as many assistant messages as came before it: the pause's pings carry one.
    refused = scenario_file(tmp_path, [{"text": "Hi."}, {"status": 400, "times": 1, "text": "Fine."}])
    every = QUIET.replace("[cache]", f"scenario = {str(refused)!r}\n[cache]")
    config = every + '[keepalive]\nmode = "every-4.5m"\nmax_pings_per_pause = 3\n'
    session, events = session_on(isolated_home, workspace, config, "sim-anthropic")
    await session.open()
    try:
        held_clock(session)
        await session.turn("hello")
        await wait_until(present(session.keepalive.task).done, what="the pause's pings")
        (side,) = sides(events)
        assert (side.kind, side.outcome) == ("keep-alive", "failed") and "400" in side.error and "\n" not in side.error
        (item, _), *_ = TranscriptFold().apply(side)
        assert isinstance(item, NoticeItem) and "failed: " in item.message
        assert [r.status for r in records(session)] == [200, 400]
        assert (await session.turn("and now?")).reason == "answer"
    finally:
        await session.close()


def test_a_fixed_interval_never_pings_after_the_prefix_is_gone() -> None:
    """`every-Nm` pings at N minutes, but never later than the lifetime less the margin after the last one."""
    assert KeepaliveSettings("every-4.5m", max_pings_per_pause=3).fixed_plan(300.0) == [270.0, 540.0, 810.0]
    assert KeepaliveSettings("every-10m", max_pings_per_pause=2).fixed_plan(300.0) == [285.0, 570.0]
    assert KeepaliveSettings("adaptive").fixed_plan(300.0) == []


@pytest.mark.parametrize("mode", ["sometimes", "every-m", "every--1m"])
def test_a_bad_mode_is_one_line(isolated_home: Path, mode: str) -> None:
    (isolated_home / "config.toml").write_text(f'[keepalive]\nmode = "{mode}"\n')
    with pytest.raises(ConfigError, match=r"keepalive\.mode"):
        load_config()


@pytest.fixture
async def watched_sim() -> AsyncIterator[tuple[EmbeddedSimulator, list[float]]]:
    """The simulator behind a watch, its cache on a clock the test holds, prefilling slowly enough (1 ms a token)
    that a ping is still at the server when the agent's next request comes."""
    simulator = start_sim(prefill_per_token=0.001)
    now = [1_000.0]
    simulator.server.engine.breakpoints.clock = lambda: now[0]
    yield simulator, now
    simulator.stop()


async def watching(
    simulator: EmbeddedSimulator, now: list[float], mode: str, late: float = 0.0
) -> tuple[Watch, list[tuple[str, AgentEvent]], anthropic.AsyncAnthropic]:
    seen: list[tuple[str, AgentEvent]] = []
    settings = KeepaliveSettings(mode, max_pings_per_pause=1)
    watch = Watch(
        upstream_at(simulator.url, "sim"),
        lambda conversation, event: seen.append((conversation, event)),
        folder=paths.sessions_dir(),
        workspace=Path.cwd(),
        keepalive=settings,
    )
    keepalive = present(watch.keepalive)

    async def wait(seconds: float) -> None:
        now[0] += seconds + late

    keepalive.wait = wait
    url = await watch.start()
    return watch, seen, anthropic.AsyncAnthropic(base_url=url, api_key=KEY, max_retries=0)


def auth(request: RecordedRequest) -> str:
    """The credentials a request carried, whichever header the SDK put them in."""
    return " ".join(v for k, v in request.headers.items() if k.lower() in ("authorization", "x-api-key"))


async def ask(client: anthropic.AsyncAnthropic, *turns: str) -> str:
    """The agent's request: the cached system prompt, then the turns (the user's and the model's, alternating)."""
    messages: list[Any] = [{"role": ("user", "assistant")[n % 2], "content": text} for n, text in enumerate(turns)]
    system: Any = [{"type": "text", "text": RULES, "cache_control": {"type": "ephemeral"}}]
    answer = await client.messages.create(model="sim-balanced", max_tokens=64, system=system, messages=messages)
    return "".join(block.text for block in answer.content if block.type == "text")


async def test_the_watch_pings_in_a_watched_conversations_pause(
    isolated_home: Path, watched_sim: tuple[EmbeddedSimulator, list[float]]
) -> None:
    """Watched with the keep-alive on, an agent's pause past the lifetime has a ping in it (the last request again,
    with the agent's key, a one-token answer: a side request in that conversation's log, never the key), and the
    agent's next request reads its prefix from the cache."""
    simulator, now = watched_sim
    watch, seen, client = await watching(simulator, now, "adaptive")
    try:
        said = await ask(client, "hello")
        await wait_until(lambda: [e for _, e in seen if isinstance(e, SideRequest)], what="the watch's ping")
        first, ping = simulator.server.requests
        assert auth(ping) == auth(first) and KEY in auth(ping) and b'"max_tokens":1' in ping.body.replace(b" ", b"")
        assert ping.cached_tokens >= first.prompt_tokens - 64
        now[0] += PAST_LIFETIME
        await ask(client, "hello", said, "and now?")
        step = simulator.server.requests[-1]
        assert step.cached_tokens >= first.prompt_tokens - 64
    finally:
        await client.close()
        await watch.aclose()
    (conversation,) = watch.conversations.values()
    (side,) = [event for _, event in seen if isinstance(event, SideRequest)]
    assert (side.kind, side.outcome, present(side.usage).output) == ("keep-alive", "answered", 1)
    logged = Path(conversation.path).read_bytes()
    assert b'"keep-alive"' in logged and KEY.encode() not in logged
    assert side.shared is not None and step.cached_tokens >= side.shared > 0
    assert check(read_conversation(Path(conversation.path))) == []  # `whatif` replays the step after the ping
    lines: list[str] = []  # `hotloop watch` without the app: the ping is a line of its own
    table = WatchTable(watch.conversations, lines.append)
    for conversation_id, event in seen:
        table(conversation_id, event)
    assert [line for line in lines if "keep-alive (pause, side request)" in line]


async def test_the_agents_next_request_cancels_the_watchs_ping_in_flight(
    isolated_home: Path, watched_sim: tuple[EmbeddedSimulator, list[float]]
) -> None:
    """A request from the agent while its conversation's ping is at the server: the ping is cancelled (said in the
    conversation's log before the request's step starts), and the request is answered."""
    simulator, now = watched_sim
    # The ping finds the prefix gone (the server's clock ran ahead): it prefills it all, for seconds.
    watch, seen, client = await watching(simulator, now, "every-4.5m", late=600.0)
    try:
        said = await ask(client, "hello")
        await wait_until(lambda: len(simulator.server.requests) == 2, what="the ping at the server, prefilling")
        await ask(client, "hello", said, "and now?")
        await wait_until(lambda: [e for _, e in seen if isinstance(e, SideRequest)], what="the ping's end")
    finally:
        await client.close()
        await watch.aclose()
    events = [event for _, event in seen]
    (side,) = [e for e in events if isinstance(e, SideRequest)]
    assert (side.kind, side.outcome, side.usage) == ("keep-alive", "cancelled", None)
    second = [n for n, e in enumerate(events) if isinstance(e, StepStarted)][1]
    assert events.index(side) < second and isinstance(events[-1], TurnFinished)


@pytest.fixture
async def overloaded_after_one() -> AsyncIterator[tuple[str, list[bytes]]]:
    """A real Messages server on loopback that answers its first request and is overloaded (529) from then on."""
    served: list[bytes] = []

    async def messages(request: web.Request) -> web.Response:
        served.append(await request.read())
        if len(served) > 1:
            error = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
            return web.json_response(error, status=529)
        usage = {
            "input_tokens": 10,
            "output_tokens": 2,
            "cache_read_input_tokens": 0,
            "cache_creation_input_tokens": 1800,
        }
        answer = {"id": "msg_1", "type": "message", "role": "assistant", "model": "sim-balanced", "stop_sequence": None}
        content = [{"type": "text", "text": "Hi."}]
        return web.json_response({**answer, "content": content, "stop_reason": "end_turn", "usage": usage})

    app = web.Application()
    app.router.add_post("/v1/messages", messages)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    yield f"http://{host}:{port}", served
    await runner.cleanup()


async def test_a_ping_the_upstream_refuses_is_one_line_and_the_last(
    isolated_home: Path, overloaded_after_one: tuple[str, list[bytes]]
) -> None:
    """The watch's ping refused (529): one failed side request in the conversation's log, its reason on one line,
    and no further ping in that pause."""
    seen: list[tuple[str, AgentEvent]] = []
    url, served = overloaded_after_one
    watch = Watch(
        upstream_at(url, "flaky"),
        lambda conversation, event: seen.append((conversation, event)),
        folder=paths.sessions_dir(),
        workspace=Path.cwd(),
        keepalive=KeepaliveSettings("every-4.5m", max_pings_per_pause=3),
    )
    keepalive = present(watch.keepalive)

    async def at_once(_seconds: float) -> None:
        return None

    keepalive.wait = at_once
    client = anthropic.AsyncAnthropic(base_url=await watch.start(), api_key=KEY, max_retries=0)
    try:
        assert await ask(client, "hello") == "Hi."
        (conversation,) = watch.conversations
        await wait_until(present(keepalive.pinging(conversation)).done, what="the pause's pings")
    finally:
        await client.close()
        await watch.aclose()
    (side,) = [event for _, event in seen if isinstance(event, SideRequest)]
    assert (side.kind, side.outcome) == ("keep-alive", "failed") and "529" in side.error and "\n" not in side.error
    assert len(served) == 2  # the agent's request and the one ping


def test_the_watchs_flag_sets_the_mode_and_refuses_a_bad_one_in_one_line(isolated_home: Path) -> None:
    """`hotloop watch --keepalive` turns the config's keep-alive on (adaptive unless named); a mode that isn't one is
    a usage error naming the flag."""
    config = load_config()
    assert _with_keepalive(config, None).keepalive.mode == "off"
    assert _with_keepalive(config, "every-2m").keepalive.mode == "every-2m"
    with pytest.raises(UsageError, match="--keepalive sometimes is not a mode"):
        _with_keepalive(config, "sometimes")
