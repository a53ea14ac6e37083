"""`hotloop whatif`: recorded traffic replayed through a model of the provider's cache, priced under every policy.

The model is checked against real traffic: hotloop's own sessions on the simulator's three protocols (its caches
behave as the hosted APIs' and vLLM's), a watched Claude Code session and the imported real Claude Code and Codex
transcripts. The `recorded` policy must give every request the cache figures the log holds; where it can't, it
says which request and why. The oracle must cost no more than any policy, on those sessions and on generated
traces of pauses.
"""

from __future__ import annotations

import json
import random
import shutil
from dataclasses import replace
from decimal import Decimal
from pathlib import Path

import msgspec
import pytest

from hotloop import paths
from hotloop.agent.events import ResponseFinished, StepFinished, TurnStarted, encode
from hotloop.agent.pricing import Ttl, price_step
from hotloop.cli import main
from hotloop.core.prewarm import prewarm_request, side_request
from hotloop.headless.whatif_view import plot
from hotloop.providers.events import UsageLedger
from hotloop.providers.transport import ANTHROPIC_URL, OPENAI_URL
from hotloop.sessions.imports.sources import import_files
from hotloop.sessions.log import SessionHeader, SessionLog
from hotloop.sessions.store import read_header, read_session
from hotloop.sessions.whatif import PolicyTotal, check, compare
from hotloop.sessions.whatif.cache import replay, server_for
from hotloop.sessions.whatif.policies import FixedInterval, OneHour, Recorded
from hotloop.sessions.whatif.report import Pricing, priced_as
from hotloop.sessions.whatif.trace import Conversation, Request, read_conversation

from support import logged_agent, provider_on, start_sim

FIXTURES = Path(__file__).parent / "fixtures"
SONNET = "claude-sonnet-4-5"
PROMPTS = ("read README.md then grep for TODO", "write 50 words about caching", "and then?")


async def own_session(protocol: str, folder: Path, workspace: Path, compact: bool = False) -> Path:
    """Three turns of hotloop's own agent on the simulator over `protocol` (with `compact`, a compaction before the
    last); the README it reads makes the prefix long enough to cache."""
    (workspace / "README.md").write_text("# Demo\n\n" + "A line about the demo project and its caching. " * 150)
    sim = start_sim()
    try:
        log = SessionLog.create(folder, provider="sim", model="sim-fast", workspace=workspace, system="")
        agent, _ = logged_agent(sim, protocol, workspace, log)
        for prompt in PROMPTS:
            if compact and prompt == PROMPTS[-1]:
                await agent.compact("manual")
            assert (await agent.run_turn(prompt)).reason == "answer"
        log.close()
        await agent.provider.aclose()
    finally:
        sim.stop()
    return log.path


def imported(name: str) -> Path:
    [(_, written)] = import_files([FIXTURES / "imports" / name], paths.sessions_dir()).written
    return written.path


def rewritten(path: Path, out: Path, change: dict[int, float] | None = None, planted: int = 0) -> Path:
    """`path`'s log with `change[turn]` seconds of pause before each turn named, or the `planted`-th response's
    cache read turned into a write of the same prefix (an eviction the server made)."""
    header, _ = read_header(path)
    shift, responses = 0.0, 0
    lines = [msgspec.json.encode(header)]
    for event in read_session(path).events:
        if isinstance(event, TurnStarted):
            shift += (change or {}).get(event.turn, 0.0)
        event = msgspec.structs.replace(event, ts=event.ts + shift)
        if isinstance(event, ResponseFinished | StepFinished) and event.usage is not None:
            responses += isinstance(event, ResponseFinished)
            if responses == planted:
                usage = event.usage
                written = (usage.cache_read or 0) + (usage.cache_write or 0)
                evicted = msgspec.structs.replace(usage, cache_read=0, cache_write=written)
                event = msgspec.structs.replace(event, usage=evicted)
        lines.append(encode(event))
    out.write_bytes(b"\n".join(lines) + b"\n")
    return out


def by_name(totals: list[PolicyTotal]) -> dict[str, PolicyTotal]:
    return {total.policy: total for total in totals}


def assert_oracle_cheapest(totals: list[PolicyTotal]) -> None:
    named = by_name(totals)
    oracle = named.pop("oracle").usd
    assert oracle is not None
    for total in named.values():
        assert total.usd is not None and oracle <= total.usd, total.policy


def assert_reproduced(conversation: Conversation, model: str, base_url: str) -> None:
    """The recorded replay's tokens are the log's, and its dollars the log's usage priced, to the cent."""
    pricing = Pricing(model, base_url)
    [(_, server, requests)] = priced_as(conversation, None)
    served = [s for s in replay(server, requests, Recorded()) if s.request is not None]
    logged = [request.usage for request in conversation.requests]
    assert sum(s.read for s in served) == sum(usage.cache_read or 0 for usage in logged)
    assert sum(s.write for s in served) == sum(usage.cache_write or 0 for usage in logged)
    assert sum(s.prompt for s in served) == sum(usage.prompt_total or 0 for usage in logged)
    modelled = sum((pricing.usd(s) or Decimal(0) for s in served), Decimal(0))
    costs = [price_step(usage, model, base_url, at=r.start) for usage, r in zip(logged, requests, strict=True)]
    real = sum((cost.total for cost in costs if cost is not None), Decimal(0))
    assert modelled > 0 and round(modelled, 2) == round(real, 2)


@pytest.mark.parametrize("protocol", ["openai", "openai-responses", "anthropic"])
async def test_recorded_reproduces_hotloops_own_sessions_on_each_protocol(
    protocol: str, tmp_path: Path, workspace: Path
) -> None:
    """Every request's cache read, write and uncached tokens as logged, on the simulator's Anthropic breakpoints and
    its vLLM-style prefix cache (Chat Completions and Responses), the dollars to the cent; no policy beats the
    oracle."""
    conversation = read_conversation(await own_session(protocol, tmp_path / "sessions", workspace))
    assert conversation.kind == ("anthropic" if protocol == "anthropic" else "lru")
    assert len(conversation.requests) >= 5 and sum(r.usage.cache_read or 0 for r in conversation.requests) > 0
    assert check(conversation) == []
    assert_reproduced(conversation, SONNET, ANTHROPIC_URL)
    assert_oracle_cheapest(compare([conversation], SONNET))


@pytest.mark.parametrize("protocol", ["anthropic", "openai"])
async def test_a_compaction_is_replayed_and_what_follows_it_reads_only_what_is_known(
    protocol: str, tmp_path: Path, workspace: Path
) -> None:
    """The compaction's request reads the conversation it summarizes; the step after it starts a new history. On
    Anthropic's breakpoints that step caches nothing under the minimum: reproduced. On a prefix cache it reads the
    system prompt and tools, a length no request of the log measured (no pre-warm): that request is named, with why."""
    conversation = read_conversation(await own_session(protocol, tmp_path / "sessions", workspace, compact=True))
    compaction, after = conversation.requests[-2:]
    assert compaction.what == "compaction" and compaction.continues and after.broke == "a compaction"
    lines = [mismatch.line for mismatch in check(conversation)]
    if protocol == "anthropic":
        assert lines == []
    else:
        read = after.usage.cache_read
        assert lines == [
            f"{conversation.session} request {after.number} ({after.what}): the server read {read:,}, the model read"
            " 0: after a compaction it read the system prompt and tools, whose length no pre-warm measured"
        ]
    assert_oracle_cheapest(compare([conversation], SONNET))


def test_recorded_reproduces_the_imported_claude_code_and_watched_sessions(isolated_home: Path) -> None:
    """The real Claude Code transcript (its tool set changes between runs: a prefix the model must not read) and the
    watched Claude Code session are reproduced request by request, and priced to the cent."""
    for path in (
        imported("claude_code_2.1.332_two_runs.jsonl"),
        FIXTURES / "watched/claude_code_2.1.332_watched.jsonl",
    ):
        conversation = read_conversation(path)
        assert conversation.kind == "anthropic" and check(conversation) == []
        assert_reproduced(conversation, SONNET, ANTHROPIC_URL)
        assert_oracle_cheapest(compare([conversation], SONNET))
    tools_changed = read_conversation(imported("claude_code_2.1.332_two_runs.jsonl")).requests[2]
    assert not tools_changed.continues and tools_changed.usage.cache_read == 0


def test_the_codex_transcripts_one_unpredictable_read_is_named(isolated_home: Path) -> None:
    """Codex's transcript holds no request, so no fingerprint: its second turn's prompt is shorter than what the
    first left cached, and where it changed is unknowable. That request is named with why; the others match."""
    conversation = read_conversation(imported("codex_0.171.0_two_runs.jsonl"))
    assert [mismatch.line for mismatch in check(conversation)] == [
        f"{conversation.session} request 3 (step 2.1): the server read 7,776 and wrote 0, the model read 9,056 and"
        " wrote 0: its prompt shrank (9,795 → 9,068 tokens) and no fingerprint says where it changed"
    ]
    assert_oracle_cheapest(compare([conversation], SONNET))


def test_a_planted_eviction_is_named_with_its_request_and_why(tmp_path: Path) -> None:
    """A server that dropped a prefix 1 second after writing it (no lifetime explains it): the one line says so."""
    source = FIXTURES / "watched/claude_code_2.1.332_watched.jsonl"
    conversation = read_conversation(rewritten(source, tmp_path / "evicted.jsonl", planted=2))
    first, second = conversation.requests
    idle = round(second.start - first.end)
    assert [mismatch.line for mismatch in check(conversation)] == [
        f"b78f11d3 request 2 (step 1.2): the server read 0 and wrote 12,179, the model read 11,895 and wrote 284:"
        f" the prefix was idle {idle} second{'s' * (idle != 1)},"
        " within its 5-minute lifetime: an eviction no model predicts"
    ]


async def test_long_pauses_rewrite_under_recorded_and_keepalive_bridges_them(tmp_path: Path, workspace: Path) -> None:
    """Ten minutes before turn 2, two before turn 3: under 5-minute writes turn 2 writes its whole prefix again; 1-hour
    writes and a ping every 4.5 minutes (two in that pause, none in the short one) read it; the oracle costs least."""
    logged = await own_session("anthropic", tmp_path / "sessions", workspace)
    conversation = read_conversation(rewritten(logged, tmp_path / "paused.jsonl", change={2: 600.0, 3: 120.0}))
    [(_, server, requests)] = priced_as(conversation, SONNET)
    after_pause = next(n for n, r in enumerate(requests) if r.what == "step 2.1")
    held = requests[after_pause - 1].cacheable
    again = [s for s in replay(server, requests, Recorded()) if s.request is not None][after_pause]
    assert (again.read, again.write) == (0, requests[after_pause].cacheable)
    for plan in (OneHour(), FixedInterval(4.5)):
        kept = [s for s in replay(server, requests, plan) if s.request is not None][after_pause]
        assert kept.read == held
    totals = by_name(compare([conversation], SONNET))
    assert (totals["recorded"].pings, totals["keepalive-4.5m"].pings) == (0, 2)
    recorded, fixed, oracle = (present_usd(totals[name]) for name in ("recorded", "keepalive-4.5m", "oracle"))
    assert oracle <= fixed < recorded
    assert_oracle_cheapest(list(totals.values()))
    drawn = plot(list(totals.values()), 80, 24)  # what a terminal shows under the table
    assert "hours since the first request" in drawn and all(name in drawn for name in totals)


async def switched_session(folder: Path, workspace: Path) -> Path:
    """A pre-warm and a turn on the simulator's vLLM-style Chat Completions server (it reports reads, never writes, and
    for the pre-warm no cache figure at all), then a switch to its Anthropic side and two turns there."""
    (workspace / "README.md").write_text("# Demo\n\n" + "A line about the demo project and its caching. " * 150)
    sim = start_sim()
    try:
        log = SessionLog.create(folder, provider="sim", model="sim-fast", workspace=workspace, system="")
        agent, _ = logged_agent(sim, "openai", workspace, log)
        chat = agent.provider
        assert await side_request(chat, prewarm_request(agent), "pre-warm", "start", log.write, lambda: False)
        assert (await agent.run_turn(PROMPTS[0])).reason == "answer"
        agent.switch(provider_on(sim, "anthropic"))
        for prompt in PROMPTS[1:]:
            assert (await agent.run_turn(prompt)).reason == "answer"
        log.close()
        await chat.aclose()
        await agent.provider.aclose()
    finally:
        sim.stop()
    return log.path


async def test_figures_the_server_did_not_report_are_never_compared_nor_shown_as_0(
    tmp_path: Path, workspace: Path
) -> None:
    """The pre-warm, whose usage has no cache figure, is no mismatch; the steps' unreported writes are never compared
    nor printed (no "wrote" in any line); no line says `inf` of an idle time a first request doesn't have."""
    conversation = read_conversation(await switched_session(tmp_path / "sessions", workspace))
    prewarm, *steps = conversation.requests
    assert prewarm.what == "pre-warm" and (prewarm.usage.cache_read, prewarm.usage.cache_write) == (None, None)
    chat = [request for request in steps if request.provider == "sim"]
    assert chat and all(r.usage.cache_write is None and r.usage.cache_read is not None for r in chat)
    lines = [mismatch.line for mismatch in check(conversation)]
    assert all("inf" not in line and "wrote" not in line and " 0 and" not in line for line in lines)
    assert prewarm.number not in {mismatch.request.number for mismatch in check(conversation)}
    # Without the pre-warm, the first step's read has no request before it: said so, with no idle time.
    [first] = check(replace(conversation, requests=steps[:1]))
    assert "inf" not in first.line and first.line.endswith("yet it read a prefix: one another session left")
    assert first.line.split(": ")[1] == f"the server read {steps[0].usage.cache_read:,}, the model read 0"


async def test_after_a_switch_each_request_is_modelled_by_the_cache_of_the_server_that_served_it(
    tmp_path: Path, workspace: Path
) -> None:
    """From `sim` (vLLM's LRU prefix cache, 16-token blocks, no writes) to `sim-anthropic` (breakpoints, billed
    writes): each provider's requests are replayed on its own cache; the first Anthropic step starts cold (it writes
    its whole prefix, reads none) and the next reads it, as the log says; the Anthropic side has no mismatch."""
    conversation = read_conversation(await switched_session(tmp_path / "sessions", workspace))
    served = priced_as(conversation, None)
    assert [(server.kind, requests[0].provider) for _, server, requests in served] == [
        ("lru", "sim"),
        ("anthropic", "sim-anthropic"),
    ]
    assert served[0][1] == server_for("lru")
    _, anthropic, after = served[1]
    replayed = [s for s in replay(anthropic, after, Recorded()) if s.request is not None]
    first, second = replayed
    assert [s.request for s in replayed] == after
    assert (
        (first.read, first.write) == (0, after[0].cacheable) == (after[0].usage.cache_read, after[0].usage.cache_write)
    )
    assert (second.read, second.write) == (after[1].usage.cache_read, after[1].usage.cache_write)
    assert second.read == after[0].cacheable > 0
    assert not [m for m in check(conversation) if m.request.provider == "sim-anthropic"]
    # Priced, too, each on its own cache: the only writes are the Anthropic side's, as logged.
    recorded = by_name(compare([conversation]))["recorded"]
    assert recorded.requests == len(conversation.requests)
    assert recorded.cache_write == sum(request.usage.cache_write or 0 for request in after) > 0


def present_usd(total: PolicyTotal) -> Decimal:
    assert total.usd is not None
    return total.usd


def synthetic(seed: int, kind: str) -> Conversation:
    """A generated conversation: turns of 1-5 steps a few seconds apart, the user's pauses between turns drawn from a
    mixture (most under 5 minutes, some up to 2 hours), the prefix growing, now and then broken (a compaction)."""
    rng = random.Random(seed)
    anthropic = kind == "anthropic"
    model, url = (SONNET, ANTHROPIC_URL) if anthropic else ("gpt-5", OPENAI_URL)
    header = SessionHeader(f"gen{seed}", 1, 1.8e9, "test", kind, model, "/", base_url=url)
    requests: list[Request] = []
    now, prompt = 1.8e9, rng.randint(2_000, 20_000)
    for turn in range(rng.randint(3, 15)):
        now += rng.choice([rng.uniform(5, 240), rng.uniform(240, 1200), rng.uniform(1200, 7200)])
        broken = rng.random() < 0.1
        prompt = rng.randint(2_000, 10_000) if broken or prompt > 150_000 else prompt
        for step in range(rng.randint(1, 5)):
            prompt += rng.randint(50, 4_000)
            output, end = rng.randint(20, 800), now + rng.uniform(1, 30)
            usage = UsageLedger(prompt, cache_read=0, cache_write=prompt - 4, uncached=4, output=output)
            if anthropic:
                usage = msgspec.structs.replace(usage, cache_write_1h=0)
            number = len(requests) + 1
            cacheable = prompt - 4 if anthropic else prompt
            broke = "a compaction" if broken and step == 0 else ""
            ttl: Ttl | None = "5m" if anthropic else None
            what = f"step {turn}.{step}"
            requests.append(
                Request(number, now, end, prompt, cacheable, output, usage, ttl, what, broke, opens_turn=step == 0)
            )
            now = end + rng.uniform(0.5, 20)
    return Conversation(header.id, header, requests)


@pytest.mark.parametrize("kind", ["anthropic", "openai"])
def test_the_oracle_is_never_beaten_on_generated_pauses(kind: str) -> None:
    """On 40 generated traces, no policy (fixed pings from every minute to every half hour, 1-hour writes, the
    adaptive keep-alive) costs less than the oracle; it is strictly cheaper than the traffic as it was on most."""
    cheaper = 0
    for seed in range(40):
        totals = compare([synthetic(seed, kind)], intervals=(1, 2, 4.5, 10, 30))
        assert_oracle_cheapest(totals)
        named = by_name(totals)
        cheaper += present_usd(named["oracle"]) < present_usd(named["recorded"])
    assert cheaper >= 20


def test_whatif_prints_a_table_and_json_of_every_policy(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The command over saved sessions: a table with the model's unreproduced requests under it; `--json` exactly
    the documented shape; a bad span and an empty store are one line each."""
    assert main(["whatif"]) == 2
    assert capsys.readouterr().err == "hotloop: no saved session with a request to price\n"
    imported("codex_0.171.0_two_runs.jsonl")
    shutil.copy(
        FIXTURES / "watched/claude_code_2.1.332_watched.jsonl", paths.sessions_dir() / "20261127T000000_b78f11d3.jsonl"
    )
    assert main(["whatif", "--as-model", SONNET]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["policy", "usd", "cache_read", "cache_write", "uncached", "output", "requests", "pings"]
    assert [line.split()[0] for line in out[1:6]] == ["recorded", "1h", "keepalive-4.5m", "keepalive", "oracle"]
    assert out[7] == "where the model doesn't reproduce the log:" and "request 3 (step 2.1)" in out[8]
    assert main(["whatif", "--json", "--since", "3650d", "b78f11d3"]) == 0
    policies = json.loads(capsys.readouterr().out)["policies"]
    assert [p["policy"] for p in policies] == ["recorded", "1h", "keepalive-4.5m", "keepalive", "oracle"]
    assert all(set(p) == {"policy", "usd", "tokens", "requests", "pings"} for p in policies)
    assert policies[0]["tokens"] == {"cache_read": 11_895, "cache_write": 12_179, "uncached": 8, "output": 222}
    assert policies[0]["usd"] is None and policies[0]["requests"] == 2  # the simulator's model has no price
    with pytest.raises(SystemExit) as exit_code:
        main(["whatif", "--since", "3x"])
    assert exit_code.value.code == 2 and "not a span like 30m, 12h, 7d or 2w" in capsys.readouterr().err


def test_a_self_hosted_server_is_priced_by_its_model_time_and_pauses_cost_nothing() -> None:
    """A server at `cost_per_hour` ($3.60: a tenth of a cent a second) bills each request's seconds; its LRU cache
    doesn't expire with time, so no policy pings and every policy costs the same."""
    header = SessionHeader(
        "gpu1", 1, 1.8e9, "test", "vllm", "llama", "/", base_url="http://10.0.0.5:8000", cost_per_hour=3.6
    )
    requests = [
        Request(
            n,
            1.8e9 + 900 * n,
            1.8e9 + 900 * n + 2.5,
            4_000 + n,
            4_000 + n,
            10,
            UsageLedger(4_000 + n, output=10),
            None,
            "step",
        )
        for n in range(1, 4)
    ]
    totals = compare([Conversation("gpu1", header, requests)])
    assert {total.usd for total in totals} == {Decimal("0.0075")}  # 3 requests × 2.5 s × $0.001
    assert {total.pings for total in totals} == {0}
    assert by_name(totals)["recorded"].cache_read == 4_001 // 16 * 16 + 4_002 // 16 * 16  # each reads the last's blocks


def test_hostile_logs_cost_a_line_each_and_never_a_hang(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A FIFO where a log should be, lines nested 100,000 deep or not UTF-8, usage no request has, a clock that jumps
    ten years between two requests and one a million years on: one warning for the FIFO, the bad lines and the time
    no date holds skipped, the ten years priced as a re-write with no ping past a day, the rest priced."""
    import os

    folder = paths.sessions_dir()
    folder.mkdir(parents=True)
    os.mkfifo(folder / "20260101T000000_ffff0000.jsonl")
    source = FIXTURES / "watched/claude_code_2.1.332_watched.jsonl"
    header, *events = source.read_bytes().splitlines()
    response = next(line for line in events if line.startswith(b'{"type":"response_finished"'))
    step = next(line for line in events if line.startswith(b'{"type":"step_started"'))
    started, later, far_started, far = (json.loads(line) for line in (step, response, step, response))
    for event in (started, later):
        event["ts"] += 3.2e8  # ten years on
    for event in (far_started, far):
        event["ts"] += 3.2e13  # a million years on: a time no date holds, skipped
    hostile = [b"[" * 100_000, b'{"type":"notice","level":"info","message":"\xff\xfe"}', b"not json at all"]
    impossible = json.loads(response)
    impossible["usage"]["prompt_total"] = 10**30
    lines = [
        header,
        *events,
        *hostile,
        step,
        *(json.dumps(e).encode() for e in (impossible, started, later, far_started, far)),
    ]
    (folder / "20261127T000000_b78f11d3.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    assert main(["whatif", "--json", "--since", "7d"]) == 0  # the FIFO's mtime is now: it is looked at, and refused
    captured = capsys.readouterr()
    fifo, skipped = captured.err.splitlines()
    assert "ffff0000.jsonl is a FIFO" in fifo
    assert skipped == "hotloop: warning: b78f11d3: 4 unreadable lines or requests without figures skipped"
    policies = {policy["policy"]: policy for policy in json.loads(captured.out)["policies"]}
    assert {p["requests"] for p in policies.values()} == {3}
    assert policies["keepalive-4.5m"]["pings"] == 86_400 // 270  # a day of pings, then the prefix expires
    assert policies["oracle"]["pings"] == 0


def test_one_skipped_line_is_said_in_the_singular(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A log with one line that isn't an event gets `1 unreadable line or request`, where it read `1 … lines`."""
    folder = paths.sessions_dir()
    folder.mkdir(parents=True)
    source = (FIXTURES / "watched/claude_code_2.1.332_watched.jsonl").read_bytes()
    (folder / "20261127T000000_b78f11d3.jsonl").write_bytes(source.rstrip(b"\n") + b"\nnot json at all\n")
    assert main(["whatif", "--json", "b78f11d3"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["hotloop: warning: b78f11d3: 1 unreadable line or request without figures skipped"]
