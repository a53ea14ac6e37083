"""Tiers, `auto` routing, the fast tier's side jobs, priority lanes, and what self-hosted servers report."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import openai
import pytest

from hotloop.agent.events import Notice, SessionTitled, StepFinished, ToolFinished
from hotloop.agent.loop import Agent
from hotloop.cli import main
from hotloop.config import Choice, Config, RoutingSettings, SimSettings, resolve
from hotloop.core.routing import Router
from hotloop.core.runtime import Runtime
from hotloop.core.side_jobs import CLASSIFY_ASK, TITLE, TITLE_ASK
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import AssistantMessage, ChatRequest, UserMessage
from hotloop.providers.lanes import Lanes
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.server_metrics import ServerWatch, parse_metrics
from hotloop.providers.vllm import discover
from hotloop.sessions.store import list_sessions, read_session
from hotloop.sim.cache import PrefixCache
from hotloop.sim.engine import SimConfig

from support import Recorder, present, scenario_file, start_sim, wait_until


def config_with(
    tmp_path: Path, scenario: list[dict[str, Any]] | None = None, routing: RoutingSettings | None = None, **sim: Any
) -> Config:
    settings = SimSettings(
        **{
            "ttft_ms": 0,
            "prefill_us_per_token": 0,
            "decode_ms_per_token": 0,
            "scenario": scenario_file(tmp_path, scenario) if scenario else None,
            **sim,
        }
    )
    return Config(path=tmp_path / "config.toml", loaded=False, sim=settings, routing=routing or RoutingSettings())


async def agent_and_router(
    config: Config, workspace: Path, choice: Choice | None = None
) -> tuple[Agent, Router, Recorder]:
    choice = choice or Choice()
    runtime = Runtime(config)
    provider = await runtime.connect(resolve(config, choice))
    recorder = Recorder()
    router = Router(config, runtime, auto=choice.tier == "auto")
    agent = router.new_agent(provider, emit=recorder, workspace=workspace)
    return agent, router, recorder


async def test_auto_sends_a_greeting_to_fast_and_a_multi_part_task_to_strong(tmp_path: Path, workspace: Path) -> None:
    agent, router, recorder = await agent_and_router(config_with(tmp_path), workspace, Choice(tier="auto"))
    try:
        await router.turn(agent, "hi there!")
        await router.turn(agent, "Read README.md and notes.txt, then grep for TODO")
        await router.side_jobs.settle(30)  # a bound, not a wait: it returns when the job is done
        requests = list(present(router.runtime.simulator).server.requests)
    finally:
        await router.runtime.aclose()
    routes = [(e.turn, e.route) for e in recorder.of(StepFinished)]
    assert routes[0] == (1, "auto: simple → fast")
    assert {route for turn, route in routes if turn == 2} == {"auto: complex → strong"}
    # Each turn's classifier request goes to the fast tier, then the turn itself to the tier picked.
    models = [r.model for r in requests]
    assert models[:2] == ["sim-fast", "sim-fast"] and models[2] == "sim-fast"  # classify, answer, classify
    assert set(models[3:]) >= {"sim-strong"}
    # Turn 1's classifier asks afresh (the agent was on sim-balanced). Turn 2's extends the conversation turn 1 had
    # on sim-fast with one message, the prompt as the turn sends it and the ask, and reads that conversation.
    first, second = (json.loads(requests[n].body) for n in (0, 2))
    assert "tools" not in first and "tools" in second
    ask = second["messages"][-1]["content"]
    assert ask.startswith("Read README.md and notes.txt, then grep for TODO\n\n<context>")
    assert ask.endswith(CLASSIFY_ASK)
    assert requests[2].cached_tokens >= requests[1].prompt_tokens - 16


async def test_the_fast_tier_titles_the_session_after_its_first_turn(tmp_path: Path, workspace: Path) -> None:
    agent, router, recorder = await agent_and_router(config_with(tmp_path), workspace)
    try:
        await router.turn(agent, "Please read README.md, then grep for TODO")
        await router.side_jobs.settle(30)
        await router.turn(agent, "and notes.txt too")
        await router.side_jobs.settle(30)
        titler = [r for r in present(router.runtime.simulator).server.requests if b"Write a title" in r.body]
    finally:
        await router.runtime.aclose()
    (titled,) = recorder.of(SessionTitled)  # once, after the first turn only
    assert titled.title == "Read README.md" and titled.model == "sim-fast"
    assert [r.model for r in titler] == ["sim-fast"]
    assert b'"priority":10' in titler[0].body  # the simulator schedules by priority: background goes last
    # The conversation is on sim-balanced: sim-fast shares no cache with it, so the title gets a short fresh prompt.
    sent = json.loads(titler[0].body)
    assert "tools" not in sent and [m["role"] for m in sent["messages"]] == ["system", "user"]
    assert sent["messages"][0]["content"] == TITLE and sent["messages"][1]["content"].startswith("User: Please read")


class OneSlot(PrefixCache):
    """llama.cpp with one slot: it keeps the last request's tokens only, and a request reuses what it shares."""

    def insert(self, hashes: Sequence[int]) -> None:
        self.clear()
        super().insert(hashes)


def without(body: bytes, options: bytes) -> bytes:
    """A request body without its options (they come before the prompt, so they would hide a byte prefix)."""
    assert options in body
    return body.replace(options, b"", 1)


async def test_a_title_on_the_conversations_model_extends_its_request_and_evicts_nothing(
    tmp_path: Path, workspace: Path
) -> None:
    agent, router, recorder = await agent_and_router(config_with(tmp_path), workspace, Choice(tier="fast"))
    server = present(router.runtime.simulator).server
    server.engine.cache = OneSlot()  # any prompt that isn't the conversation's would evict it
    try:
        await router.turn(agent, "Please read README.md, then grep for TODO")
        conversation = list(agent.messages)
        await router.side_jobs.settle(30)
        assert agent.messages == conversation  # the title job leaves the conversation as it was
        requests = list(server.requests)
        await router.turn(agent, "and notes.txt too")
        next_step = server.requests[len(requests)]
    finally:
        await router.runtime.aclose()
    *_, answered, title = requests
    assert [titled.title for titled in recorder.of(SessionTitled)] == ["Read README.md"]
    # The conversation's request, byte for byte, then its answer and one user message with the ask.
    prompt = without(title.body, b',"max_tokens":24,"priority":10')
    conversation_body = without(answered.body, b',"max_tokens":8192')  # the default cap, every step's
    assert prompt.startswith(conversation_body[:-2] + b",")
    sent, before = json.loads(prompt)["messages"], json.loads(answered.body)["messages"]
    answer = conversation[-1]
    assert isinstance(answer, AssistantMessage)
    assert len(sent) == len(before) + 2 and sent[-2]["content"] == answer.text  # the answer
    assert sent[-1] == {"role": "user", "content": TITLE_ASK}
    # It reads the conversation (the last request and its answer); it computes the ask (33 tokens with its markup)
    # and the answer's last partial block. The turn after reads the conversation too: the title evicted nothing.
    assert title.cached_tokens >= answered.prompt_tokens and title.prompt_tokens - title.cached_tokens <= 33 + 15
    assert next_step.body.startswith(answered.body[:-2] + b",")
    assert next_step.cached_tokens >= title.cached_tokens


async def test_a_summary_on_the_conversations_model_extends_the_request_that_asked_for_the_call(
    tmp_path: Path, workspace: Path
) -> None:
    (workspace / "big.log").write_text("".join(f"line {n}: all systems nominal\n" for n in range(400)))
    config = config_with(tmp_path, routing=RoutingSettings(summarize_over_tokens=200, titles=False))
    agent, router, recorder = await agent_and_router(config, workspace, Choice(tier="fast"))
    try:
        await router.turn(agent, "Read big.log and README.md")
        asked, summary, *_ = present(router.runtime.simulator).server.requests
    finally:
        await router.runtime.aclose()
    assert b"Summarize this tool result" in summary.body
    asked_body = without(asked.body, b',"max_tokens":8192')  # the default cap, every step's
    assert without(summary.body, b',"max_tokens":200,"priority":10').startswith(asked_body[:-2] + b",")
    ask = json.loads(summary.body)["messages"][-1]["content"]
    assert ask.startswith('read_file({"path": "big.log"}) returned:\nline 0:') and ask.endswith("summary only.")
    assert summary.cached_tokens >= asked.prompt_tokens - 16
    big = next(e.result for e in recorder.of(ToolFinished) if "line 0" in e.result)
    assert big.startswith("[summary of a ") and "(400 lines" in big


def test_hotloop_run_lists_the_session_under_its_title(
    workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (isolated_home / "config.toml").write_text(
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    )
    assert main(["run", "Please read README.md, then grep for TODO"]) == 0
    assert "session titled: Read README.md" in capsys.readouterr().err
    (session,) = list_sessions(isolated_home / "data" / "sessions").sessions
    assert session.title == "Read README.md"
    assert list_sessions(isolated_home / "data" / "sessions", search="read readme").sessions


async def test_a_long_tool_result_is_summarized_by_the_fast_tier_when_asked(tmp_path: Path, workspace: Path) -> None:
    (workspace / "big.log").write_text("".join(f"line {n}: all systems nominal\n" for n in range(400)))
    routing = RoutingSettings(summarize_over_tokens=200)
    agent, router, recorder = await agent_and_router(config_with(tmp_path, routing=routing), workspace)
    try:
        await router.turn(agent, "Read big.log and README.md")
    finally:
        await router.runtime.aclose()
    results = {e.name + json.dumps(e.result[:9]): e.result for e in recorder.of(ToolFinished)}
    big = next(r for r in results.values() if "line 0" in r)
    small = next(r for r in results.values() if "Demo" in r)
    assert big.startswith("[summary of a ") and "(400 lines" in big and len(big) < 1000
    assert not small.startswith("[summary")  # short results enter whole
    (note,) = [n.message for n in recorder.of(Notice) if "summarized" in n.message]
    assert note.startswith("read_file's result (") and "by the fast tier" in note


async def settle() -> None:
    """Let every task that can run do so: nothing here waits on I/O or timers, so a few turns of the loop do."""
    for _ in range(20):
        await asyncio.sleep(0)


async def test_lanes_hold_background_work_until_no_interactive_request_is_in_flight() -> None:
    lanes = Lanes()
    order: list[str] = []
    finish = asyncio.Event()  # a background job's request is in flight until the test sets this

    async def job(name: str) -> str:
        order.append(f"{name} starts")
        await finish.wait()
        order.append(f"{name} ends")
        return name

    async with lanes.interactive():
        title = asyncio.create_task(lanes.background(lambda: job("title")))
        await settle()
        assert order == []  # held back while the interactive request runs
    finish.set()
    assert await asyncio.wait_for(title, 10) == "title" and order == ["title starts", "title ends"]

    order.clear()
    finish.clear()
    first = asyncio.create_task(lanes.background(lambda: job("one")))
    second = asyncio.create_task(lanes.background(lambda: job("two")))
    await wait_until(lambda: order == ["one starts"])
    async with lanes.interactive():  # preempts "one", which starts again afterwards
        order.append("interactive")
    await wait_until(lambda: order.count("one starts") == 2)
    finish.set()
    await asyncio.wait_for(asyncio.gather(first, second), 10)
    assert order[:2] == ["one starts", "interactive"] and order.count("one starts") == 2
    assert order.index("two starts") > order.index("one ends")  # at most one background request at a time
    assert lanes.preemptions == 1


@pytest.mark.parametrize(
    ("policy", "lanes", "title_first"),
    [
        ("priority", "on", False),  # the client holds the title back until the turn's request is done
        ("priority", "server only", False),  # sent at once, with priority 10: the server admits the turn first
        ("fcfs", "off", True),  # neither: the title, queued first, is served first
    ],
)
async def test_a_title_queued_behind_a_busy_server_is_served_after_the_interactive_turn(
    tmp_path: Path, workspace: Path, policy: str, lanes: str, title_first: bool
) -> None:
    routing = RoutingSettings(lanes=lanes == "on")
    config = config_with(tmp_path, routing=routing, max_running=1, scheduling_policy=policy, decode_ms_per_token=1)
    agent, router, _ = await agent_and_router(config, workspace)
    server = present(router.runtime.simulator).server
    blocker = openai.AsyncOpenAI(base_url=present(router.runtime.simulator).base_url, api_key="-", max_retries=0)
    # A request that would hold the server's one slot for seconds; it is cancelled once the others have queued.
    hold = asyncio.create_task(
        blocker.chat.completions.create(model="sim-fast", messages=[{"role": "user", "content": "write 5000 words"}])
    )
    try:
        await router.runtime.server_of(agent.provider)
        assert isinstance(agent.provider, OpenAIChatProvider)
        agent.provider.send_priority = lanes != "off"
        assert agent.provider.model != "sim-fast"  # the title's model: the server's queue tells them apart
        await wait_until(lambda: server.admission.running >= 1)
        title = asyncio.create_task(router.side_jobs.title([UserMessage("Read README.md")]))
        if lanes != "on":  # the title waits at the server before the turn's request arrives
            await wait_until(lambda: server.admission.waiting_for("sim-fast") == 1)
        turn = asyncio.create_task(agent.run_turn("hello"))
        await wait_until(lambda: server.admission.waiting_for(agent.provider.model) == 1)
        hold.cancel()  # the client gives up: the server frees the slot and admits whichever its policy puts first
        await asyncio.wait_for(asyncio.gather(turn, title), 30)
    finally:
        hold.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await hold
        await blocker.close()
        await router.runtime.aclose()
    admitted = [b"Write a title" in r.body for r in server.requests][1:]  # after the blocker
    assert (admitted.index(True) < admitted.index(False)) is title_first


async def test_a_server_without_priority_scheduling_stops_getting_the_field(tmp_path: Path) -> None:
    sim = start_sim(SimConfig(scheduling="fcfs"))
    provider = OpenAIChatProvider(ProviderOptions(name="vllm", model="sim-fast", base_url=sim.base_url, max_retries=0))
    try:
        provider.server = await discover(provider)
        provider.send_priority = provider.server.takes_priority
        request = ChatRequest(
            system="Write a title of at most six words.",
            tools=(),
            messages=(UserMessage("User: hello there"),),
            background=True,
        )
        events = [event async for event in provider.stream(request)]
    finally:
        await provider.aclose()
        sim.stop()
    assert any(type(e).__name__ == "Finished" for e in events)
    assert provider.send_priority is False
    bodies = [r.body for r in sim.server.requests]
    assert len(bodies) == 1 and b'"priority"' not in bodies[0]  # the rejected try never reached the engine


def test_sglang_and_llama_cpp_report_what_they_have() -> None:
    sglang = parse_metrics(
        '# TYPE sglang:num_running_reqs gauge\nsglang:num_running_reqs{model_name="q"} 3\n'
        '# TYPE sglang:num_queue_reqs gauge\nsglang:num_queue_reqs{model_name="q"} 2\n'
        '# TYPE sglang:token_usage gauge\nsglang:token_usage{model_name="q"} 0.25\n'
        '# TYPE sglang:cache_hit_rate gauge\nsglang:cache_hit_rate{model_name="q"} 0.8\n'
        '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="q"} 2.5\n',
        at=0,
    )
    stats = ServerWatch().observe(sglang)
    assert (stats.running, stats.waiting, stats.kv_usage, stats.hit_rate_since_start, stats.spec_length) == (
        3,
        2,
        0.25,
        0.8,
        2.5,
    )
    assert stats.ttft_p50 is None and stats.spec_acceptance is None
    llama = ServerWatch().observe(
        parse_metrics(
            "# TYPE llamacpp:requests_processing gauge\nllamacpp:requests_processing 1\n"
            "# TYPE llamacpp:kv_cache_usage_ratio gauge\nllamacpp:kv_cache_usage_ratio 0.5\n",
            at=0,
        )
    )
    assert (llama.running, llama.kv_usage, llama.hit_rate_since_start, llama.waiting) == (1, 0.5, None, None)


def test_ttft_percentiles_and_speculative_decoding_follow_prometheus_arithmetic() -> None:
    def scrape_text(counts: tuple[int, int, int], drafts: int, accepted: int) -> str:
        buckets = "".join(
            f'vllm:time_to_first_token_seconds_bucket{{le="{le}",model_name="m"}} {n}\n'
            for le, n in zip(("0.1", "0.5", "+Inf"), counts, strict=True)
        )
        return (
            "# TYPE vllm:time_to_first_token_seconds histogram\n"
            + buckets
            + f'vllm:time_to_first_token_seconds_count{{model_name="m"}} {counts[-1]}\n'
            + "# TYPE vllm:spec_decode_num_drafts counter\n"
            + f'vllm:spec_decode_num_drafts_total{{model_name="m"}} {drafts}\n'
            + "# TYPE vllm:spec_decode_num_draft_tokens counter\n"
            + f'vllm:spec_decode_num_draft_tokens_total{{model_name="m"}} {drafts * 4}\n'
            + "# TYPE vllm:spec_decode_num_accepted_tokens counter\n"
            + f'vllm:spec_decode_num_accepted_tokens_total{{model_name="m"}} {accepted}\n'
        )

    watch = ServerWatch()
    watch.observe(parse_metrics(scrape_text((50, 50, 50), 10, 20), at=0))  # before the session: not counted
    stats = watch.observe(parse_metrics(scrape_text((60, 90, 100), 20, 50), at=1))
    # Since the first scrape: 10 under 0.1 s, 30 more under 0.5 s, 10 beyond. p50 = 25th of 50.
    assert stats.ttft_p50 == pytest.approx(0.1 + 0.4 * (25 - 10) / 30)
    assert stats.ttft_p95 == 0.5  # in the +Inf bucket: only its lower bound is known
    assert stats.spec_acceptance == pytest.approx(50 / 80) and stats.spec_length == pytest.approx(1 + 50 / 20)


def test_a_server_that_hides_cached_tokens_gets_one_hint(
    tmp_path: Path, workspace: Path, isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    steps = [
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"tool_calls": [{"name": "list_dir", "arguments": {}}]},
        {"text": "done"},
    ]
    (isolated_home / "steps.json").write_text(json.dumps(steps))
    (isolated_home / "config.toml").write_text(
        f"[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\nprompt_tokens_details = false\n"
        f'scenario = "{isolated_home / "steps.json"}"\n[routing]\ntitles = false\n'
    )
    assert main(["run", "look around"]) == 0
    err = capsys.readouterr().err
    hints = [line for line in err.splitlines() if "--enable-prompt-tokens-details" in line]
    assert len(hints) == 1 and hints[0].startswith("info: vLLM reports no cached-token counts")
    steps_shown = [line for line in err.splitlines() if line.startswith("turn 1 · step ")]
    assert len(steps_shown) == 4 and all("cache not reported" in line for line in steps_shown)
    (path,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    assert sum(isinstance(e, Notice) and "prompt-tokens-details" in e.message for e in read_session(path).events) == 1


def test_the_vllm_recipe_fits_the_model_family_and_explains_every_flag(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["vllm", "recipe", "meta-llama/Llama-3.1-8B-Instruct", "--gpus", "2", "--spec", "ngram"]) == 0
    command, _, why = capsys.readouterr().out.partition("\n\nWhy each flag:\n")
    assert command.startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct \\\n")
    for flag in (
        "--enable-prefix-caching",
        "--enable-prompt-tokens-details",
        "--enable-auto-tool-choice",
        "--tool-call-parser llama3_json",
        "--scheduling-policy priority",
        "--tensor-parallel-size 2",
        '--speculative-config \'{"method":"ngram"',
    ):
        assert flag in command
    flags = [line.split()[-1] if line.endswith("\\") else line for line in command.splitlines()[1:]]
    assert len([line for line in why.splitlines() if line.startswith("  --")]) == len(flags)
    assert main(["vllm", "recipe", "acme/unknown-7b"]) == 0
    out = capsys.readouterr().out
    assert "--tool-call-parser hermes" in out and "family not recognised" in out and "--speculative" not in out
