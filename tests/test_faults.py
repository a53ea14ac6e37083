"""Every fault a server can throw at hotloop is survived and said, over real loopback HTTP.

The simulator misbehaves on purpose (its fault mode: tests/test_sim_faults.py) and the agent,
on the real providers, must come out with one clear line, its conversation valid and its log
resumable.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import Notice, ResponseFinished, StepFinished, ToolFinished, fan_out
from hotloop.agent.figures import SessionTotals, step_summary
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.core.resumption import Resumption
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.conversation import AssistantMessage, ToolResultMessage
from hotloop.providers.errors import RequestRejected
from hotloop.providers.failures import MAX_RETRY_WAIT, retry_line
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.transport import RequestTimeout
from hotloop.sessions.log import SessionLog
from hotloop.sim.embedded import EmbeddedSimulator

from support import Recorder, sim_with_scenario, wait_until

PROTOCOLS = ("openai", "anthropic")
# Limits only a test that stalls on purpose reaches (it sets its own): a busy machine's pauses stay far below them.
UNREACHED = RequestTimeout(first_byte=15, idle=15)


@pytest.fixture
def sims() -> Iterator[list[EmbeddedSimulator]]:
    started: list[EmbeddedSimulator] = []
    yield started
    for sim in started:
        sim.stop()


def agent_on(
    sim: EmbeddedSimulator,
    protocol: str,
    workspace: Path,
    timeout: RequestTimeout = UNREACHED,
    retries: int = 2,
    log: SessionLog | None = None,
) -> tuple[Agent, Recorder]:
    provider: OpenAIChatProvider | AnthropicProvider
    if protocol == "openai":
        provider = OpenAIChatProvider(
            ProviderOptions(
                name="sim", model="sim-balanced", base_url=sim.base_url, max_retries=retries, timeout=timeout
            )
        )
    else:
        provider = AnthropicProvider(
            ProviderOptions(name="sim", model="sim-balanced", base_url=sim.url, max_retries=retries, timeout=timeout)
        )
    recorder = Recorder()
    emit = fan_out(recorder, log.write) if log is not None else recorder
    agent = Agent(provider, ToolRegistry(builtin_tools()), emit=emit, workspace=workspace)
    return agent, recorder


def start(sims: list[EmbeddedSimulator], tmp_path: Path, steps: list[dict[str, Any]]) -> EmbeddedSimulator:
    sim = sim_with_scenario(tmp_path, steps)
    sims.append(sim)
    return sim


def warnings(recorder: Recorder) -> list[str]:
    return [n.message for n in recorder.of(Notice) if n.level == "warning"]


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_rate_limit_is_retried_after_the_wait_it_asks_and_said(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    sim = start(sims, tmp_path, [{"text": "Done.", "status": 429, "retry_after": 0.01, "times": 1}])
    agent, recorder = agent_on(sim, protocol, workspace)
    finished = await agent.run_turn("go")
    await agent.provider.aclose()
    assert finished.reason == "answer"
    assert warnings(recorder) == ["429 from sim: retrying in 0.0 s (2 of 3)"]
    assert [r.status for r in sim.server.requests] == [429, 200]


def test_a_long_retry_after_is_capped_and_the_line_says_so() -> None:
    error = RequestRejected("sim answered 429: slow down", status=429, retry_after=100.0, retryable=True)
    assert retry_line(error, "openai", MAX_RETRY_WAIT, 2, 3) == (
        "429 from openai: retrying in 60 s, not the 100 s it asked for (2 of 3)"
    )


async def test_cancelling_stops_the_wait_before_a_retry(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path
) -> None:
    """Esc during a 30-second `retry-after`: the turn ends at once, cancelled."""
    sim = start(sims, tmp_path, [{"text": "Done.", "status": 503, "retry_after": 30, "times": 1}])
    agent, recorder = agent_on(sim, "openai", workspace)
    turn = asyncio.create_task(agent.run_turn("go"))
    await wait_until(lambda: warnings(recorder), what="the retry to be announced")
    turn.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(turn, 15)  # a third of the retry-after: ended by the cancel, not by the wait
    await agent.provider.aclose()
    assert warnings(recorder) == ["503 from sim: retrying in 30 s (2 of 3)"]


async def test_a_server_that_never_answers_costs_the_first_byte_timeout_per_try(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path
) -> None:
    sim = start(sims, tmp_path, [{"text": "Done.", "stall": {"before_headers": 30}}])
    agent, recorder = agent_on(sim, "openai", workspace, RequestTimeout(first_byte=0.2, idle=5), retries=1)
    finished = await asyncio.wait_for(agent.run_turn("go"), 20)  # a single try's stall is 30 s
    await agent.provider.aclose()
    assert finished.reason == "error"
    assert warnings(recorder)[0].startswith("no answer from sim: retrying in")
    [error] = [n.message for n in recorder.of(Notice) if n.level == "error"]
    assert error.startswith("sim (http://127.0.0.1:") and error.endswith(
        "sent nothing for 0.2 s (request_timeout.first_byte; raise it in the config, or with --timeout)"
    )


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_stream_that_stalls_midway_ends_in_one_line_and_keeps_the_partial_answer(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    sim = start(sims, tmp_path, [{"text": "word " * 40, "stall": {"after_chunks": 5, "seconds": 30}}])
    agent, recorder = agent_on(sim, protocol, workspace, RequestTimeout(first_byte=5, idle=0.2))
    finished = await asyncio.wait_for(agent.run_turn("go"), 20)  # the stall is 30 s
    await agent.provider.aclose()
    assert finished.reason == "error"
    [error] = [n.message for n in recorder.of(Notice) if n.level == "error"]
    assert "stalled: nothing for 0.2 s after" in error and "request_timeout.idle" in error
    [partial] = [m for m in agent.messages if isinstance(m, AssistantMessage)]
    assert partial.interrupted and partial.text.startswith("word")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_bytes_that_are_not_utf8_become_replacement_characters_with_one_warning(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    sim = start(sims, tmp_path, [{"text": "café au lait", "invalid_utf8": True}])
    agent, recorder = agent_on(sim, protocol, workspace)
    finished = await agent.run_turn("go")
    await agent.provider.aclose()
    assert finished.reason == "answer"
    [answer] = [m for m in agent.messages if isinstance(m, AssistantMessage)]
    assert "\ufffd" in answer.text and answer.text.endswith("au lait")
    [warning] = warnings(recorder)
    assert warning.endswith("sent bytes that are not UTF-8; they show as �")


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_repeated_call_ids_are_made_unique_and_every_result_kept(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    reads = [{"name": "read_file", "arguments": {"path": name}} for name in ("README.md", "notes.txt")]
    sim = start(sims, tmp_path, [{"tool_calls": reads, "duplicate_ids": True}, {"text": "Both read."}])
    agent, recorder = agent_on(sim, protocol, workspace)
    finished = await agent.run_turn("go")
    await agent.provider.aclose()
    assert finished.reason == "answer"  # the server accepted the next request: every call had its result
    results = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert len(results) == 2 and len({r.call_id for r in results}) == 2
    assert all(not r.is_error for r in results)
    [warning] = warnings(recorder)
    assert "sent two tool calls with the id" in warning


@pytest.mark.parametrize(
    ("protocol", "usage", "said"),
    [
        ("openai", {"prompt_tokens": -50}, "prompt -50"),
        ("openai", {"cached_tokens": 5000}, "of a"),
        ("anthropic", {"input_tokens": -50}, "prompt -"),
        ("anthropic", {"output_tokens": 999_999}, "output 999,999 for"),
    ],
)
async def test_usage_that_cannot_be_true_is_shown_as_such_and_counted_nowhere(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str, usage: dict[str, int], said: str
) -> None:
    sim = start(sims, tmp_path, [{"text": "Hello there.", "usage": usage}])
    agent, recorder = agent_on(sim, protocol, workspace)
    await agent.run_turn("go")
    await agent.provider.aclose()
    [step] = recorder.of(StepFinished)
    assert step.usage is not None and step.usage.distrust is not None and said in step.usage.distrust
    totals = SessionTotals()
    totals.add(step)
    assert (totals.prompt, totals.output, totals.unreported, totals.cache_hit) == (0, 0, 1, None)


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_call_cut_off_by_the_output_limit_is_never_run_and_the_session_goes_on(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    """The cut call goes back as `{}` (the simulator, strict as llama.cpp, rejects arguments that aren't JSON),
    its result says it was cut off, the step says `length`, and the log resumes to the same bytes."""
    cut = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}], "cut_arguments": 5}
    sim = start(sims, tmp_path, [cut, {"text": "Understood."}, {"text": "Again."}])
    log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-balanced", workspace=workspace)
    agent, recorder = agent_on(sim, protocol, workspace, log=log)
    finished = await agent.run_turn("go")
    assert finished.reason == "answer"
    [response, _] = recorder.of(ResponseFinished)
    assert response.finish_reason == "length"
    [result] = recorder.of(ToolFinished)
    assert result.status == "error" and "cut off by the output limit" in result.result
    assert 'the arguments as written: {"pat' in result.result
    second = json.loads(sim.server.requests[1].body)
    sent = second["messages"][-2]
    arguments = sent["tool_calls"][0]["function"]["arguments"] if protocol == "openai" else sent["content"][0]["input"]
    assert arguments in ("{}", {})
    expected_next = len(sim.server.requests)
    await agent.run_turn("and again")
    expected = sim.server.requests[expected_next].body
    log.close()
    await agent.provider.aclose()

    resumed = Resumption.load(log.path, [])
    assert resumed.conversation.messages[: len(agent.messages) - 3] == agent.messages[: len(agent.messages) - 3]
    resumed.log.close()
    assert b"{}" in expected or b'"input":{}' in expected


async def test_a_huge_tool_argument_is_refused_and_the_log_stays_small(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path
) -> None:
    big = {"tool_calls": [{"name": "read_file", "arguments": {"path": "README.md"}}], "huge_argument": 1_000_000}
    sim = start(sims, tmp_path, [big, {"text": "Fine."}])
    log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-balanced", workspace=workspace)
    agent, recorder = agent_on(sim, "openai", workspace, log=log)  # 33 MB of stream takes the simulator a while
    agent.options = AgentOptions(max_tokens=1_000_000)  # a cap the argument fits: the server writes it whole
    finished = await agent.run_turn("go")
    log.close()
    await agent.provider.aclose()
    assert finished.reason == "answer"
    [result] = recorder.of(ToolFinished)
    assert result.status == "error" and "1,000,000 characters, more than the 100,000 hotloop takes" in result.result
    assert log.path.stat().st_size < 500_000  # the argument three times over would be 3 MB
    resumed = Resumption.load(log.path, [])
    resumed.log.close()
    assert resumed.conversation.messages == agent.messages


@pytest.mark.parametrize("protocol", PROTOCOLS)
async def test_a_dropped_connection_keeps_the_partial_answer_and_the_log_resumes(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path, protocol: str
) -> None:
    sim = start(sims, tmp_path, [{"text": "word " * 40, "drop_after": 6}, {"text": "Picked up."}])
    log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-balanced", workspace=workspace)
    agent, recorder = agent_on(sim, protocol, workspace, log=log)
    finished = await agent.run_turn("go")
    log.close()
    await agent.provider.aclose()
    assert finished.reason == "error"
    [error] = [n.message for n in recorder.of(Notice) if n.level == "error"]
    assert "\n" not in error and ("broke off" in error or "ended before" in error)
    resumed = Resumption.load(log.path, [])
    resumed.log.close()
    assert resumed.conversation.messages == agent.messages


async def test_a_call_that_finished_before_the_drop_keeps_its_result_across_resume(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path
) -> None:
    """Early dispatch ran the first read while the model wrote the second; then the connection dropped.
    The first keeps its real result, live and after resume: not a `cancelled` one. The second, still
    being written, never became a call."""
    reads = [{"name": "read_file", "arguments": {"path": name}} for name in ("README.md", "notes.txt")]
    # Chunk 10 ends the first call and 11 starts the second; a second's pause there lets the first read finish
    # before the drop at 14, however busy the machine (it had 20 ms).
    writing = {"tool_calls": reads, "decode_ms": 5, "stall": {"after_chunks": 11, "seconds": 1}, "drop_after": 14}
    sim = start(sims, tmp_path, [writing, {"text": "Fine."}])
    log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-balanced", workspace=workspace)
    agent, _ = agent_on(sim, "openai", workspace, log=log)
    finished = await agent.run_turn("go")
    log.close()
    await agent.provider.aclose()
    assert finished.reason == "error"
    [partial] = [m for m in agent.messages if isinstance(m, AssistantMessage)]
    [result] = [m for m in agent.messages if isinstance(m, ToolResultMessage)]
    assert partial.interrupted and [call.id for call in partial.tool_calls] == [result.call_id]
    assert not result.is_error and result.content.startswith("# Demo")
    resumed = Resumption.load(log.path, [])
    resumed.log.close()
    assert resumed.conversation.messages == agent.messages


async def test_an_answer_cut_off_by_the_output_limit_does_not_look_finished(
    sims: list[EmbeddedSimulator], tmp_path: Path, workspace: Path
) -> None:
    sim = start(sims, tmp_path, [{"text": "word " * 50}])
    agent, recorder = agent_on(sim, "openai", workspace)
    agent.options = AgentOptions(max_tokens=8)
    finished = await agent.run_turn("go")
    await agent.provider.aclose()
    assert finished.reason == "cut_off"
    [step] = recorder.of(StepFinished)
    assert step.finish_reason == "length" and "cut off by the output limit" in step_summary(step)
    assert "the answer is incomplete: cut off by the output limit" in warnings(recorder)
