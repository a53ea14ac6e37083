"""`hotloop bench`: agents at once against the simulator, level by level, with figures from their own events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from msgspec import structs

from hotloop.cli import main
from hotloop.headless import bench

from tui_support import FAST_SIM, write_config


def test_a_ramp_runs_every_agent_and_saves_what_it_measured(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_home)  # a simulator that answers at once
    assert main(["bench", "--agents", "1,3", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)

    one, three = result["levels"]
    assert (result["provider"], result["model"], one["agents"], three["agents"]) == ("sim", "sim-balanced", 1, 3)
    for level in (one, three):
        # The built-in task: two turns of five steps in all, for every agent.
        assert (level["turns"], level["steps"], level["errors"]) == (2 * level["agents"], 5 * level["agents"], 0)
        for figure in ("ttft_s", "step_s", "turn_s"):
            spread = level[figure]
            assert 0 <= spread["p50"] <= spread["p95"] <= spread["p99"]
        assert 0 < level["uncached_prefill_tokens"] < level["prompt_tokens"]
        assert level["cache_hit"] == pytest.approx(1 - level["uncached_prefill_tokens"] / level["prompt_tokens"])
        # The agents begin one a loop turn: the last begins before the level ends, and a lone agent at once.
        assert 0 <= level["ramp_s"] < level["wall_s"]
    # Three agents send three times the prompts; they share the system prompt and tools, so less is prefilled.
    assert three["prompt_tokens"] == 3 * one["prompt_tokens"]
    assert three["uncached_prefill_tokens"] < 3 * one["uncached_prefill_tokens"]

    (saved,) = (isolated_home / "data" / "bench").glob("*.json")
    assert json.loads(saved.read_text()) == result
    assert main(["bench", "compare", saved.stem, str(saved)]) == 0
    table = capsys.readouterr().out
    assert "ttft p95 s" in table and "cache hit" in table
    assert "±0%" in table and "±0 pts" in table and "-0%" not in table  # a run against itself: no change


def test_the_table_and_chart_say_each_level(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(isolated_home)
    assert main(["bench", "--agents", "1,2"]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    rule = next(n for n, line in enumerate(lines) if line.startswith("───"))
    header = "agents p50 p95 p99 p95 p50 p95 each all hit prefill"
    assert " ".join(lines[rule - 1].split()) == header
    assert [line.split()[0] for line in lines[rule + 1 : rule + 3]] == ["1", "2"]
    assert lines[rule + 3].rstrip().endswith("· no errors")  # the caption, in place of a column of zeros
    assert max(len(line) for line in lines) <= 80  # a piped table is as wide as a terminal's, and nothing is cut
    assert "agents at once" in out  # the chart's axis
    assert "saved " in err and "hotloop bench compare" in err


@pytest.mark.parametrize(
    ("ramp", "message"), [("0", "every level must be at least 1 agent"), ("a,b", "must be numbers of agents")]
)
def test_a_bad_ramp_says_why(isolated_home: Path, capsys: pytest.CaptureFixture[str], ramp: str, message: str) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--agents", ramp])
    assert message in capsys.readouterr().err


def test_comparing_a_result_that_isnt_there_says_so(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "compare", "nope", "nada"]) == 2
    assert "no saved bench result 'nope'" in capsys.readouterr().err


def test_runs_begun_in_one_second_are_each_saved_and_runs_of_other_levels_compare_in_one_line(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two runs begun in the same second both stay saved (the second was overwriting the first), each found by the
    name it printed; runs with no level in common say so in one line, exit 2, instead of an empty table."""
    write_config(isolated_home)
    assert main(["bench", "--agents", "1", "--json"]) == 0
    first = json.loads(capsys.readouterr().out)
    folder = isolated_home / "data" / "bench"
    (saved,) = folder.glob("*.json")
    # A second run stamped with the first's second: what the clock gives two quick runs.
    second = dict(first, levels=[dict(first["levels"][0], agents=2)])
    again = bench.save(second, folder)
    assert again != saved and json.loads(saved.read_text()) == first and json.loads(again.read_text()) == second

    assert main(["bench", "compare", saved.stem, again.stem]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "A and B ran no level of agents in common (A: 1; B: 2)" in err
    assert main(["bench", "compare", saved.stem, saved.stem]) == 0  # the whole name, though `…_2` begins with it
    assert "ttft p95 s" in capsys.readouterr().out


def test_a_scenario_file_sets_the_task(isolated_home: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_config(isolated_home)
    task = {
        "system": "You check links.",
        "prompts": ['Call probe on "https://docs.example/a", then say whether the link answers.'],
        "tools": {"probe": 0.01},
    }
    scenario = tmp_path / "links.json"
    scenario.write_text(json.dumps(task))
    assert main(["bench", "--agents", "2", "--scenario", str(scenario), "--json"]) == 0
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    # One turn of two steps (the probe, then the answer) for each of the two agents.
    assert (level["turns"], level["steps"], level["errors"]) == (2, 4, 0)

    scenario.write_text(json.dumps({**task, "tools": {"probe": "fast"}}))
    assert main(["bench", "--scenario", str(scenario)]) == 2
    err = capsys.readouterr().err
    assert f"bench scenario {scenario}: tools.probe must be a number (got 'fast')" in err


def test_a_server_that_fails_is_counted_and_said_per_level(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Nothing listens on the port: every turn fails, the run exits 1, and below the table each level says why."""
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    write_config(isolated_home)
    with (isolated_home / "config.toml").open("a") as config:
        config.write('[providers.gone]\nkind = "openai"\nmax_retries = 0\n')
    argv = ["bench", "--provider", "gone", "--base-url", f"http://127.0.0.1:{port}/v1", "--model", "m"]
    assert main([*argv, "--agents", "1,2"]) == 1
    out = capsys.readouterr().out
    assert "· 6 errors, below" in out  # two turns an agent, none answered
    assert f"at 2 agents, 4 errors:\n  cannot reach gone (http://127.0.0.1:{port}/v1)" in out
    assert max(len(line) for line in out.splitlines() if not line.startswith("  ")) <= 80

    assert main([*argv, "--agents", "1", "--json"]) == 1
    (level,) = json.loads(capsys.readouterr().out)["levels"]
    ((message, times),) = level["error_messages"].items()
    assert (level["errors"], times) == (2, 2) and message.startswith("cannot reach gone")


def test_a_slow_server_s_figures_keep_the_table_in_80_columns() -> None:
    """Seconds keep about four characters at any load (`0.13`, `12.5`, `261`), so the table never cuts a column."""
    from rich.console import Console

    from hotloop.headless.bench_view import table

    spread = {"p50": 12.48, "p95": 261.21, "p99": 1_261.5}
    level = {
        "agents": 64,
        "ttft_s": spread,
        "step_s": spread,
        "turn_s": spread,
        "output_tok_s_per_agent": 8.4,
        "output_tok_s_total": 12_345.6,
        "cache_hit": 0.39,
        "uncached_prefill_tokens": 1_234_567,
        "errors": 0,
        "steps": 160,
        "steps_per_turn": 2.5,
        "tool_calls": {"fetch": 128, "search": 256},
        "cut_off": 0,
    }
    task = {"turns": 2, "steps": 5, "tool_calls": 6}
    model = "/models/Qwen3-8B-Q4_K_M.gguf"
    result = {"provider": "local", "model": model, "scenario": "built-in", "task": task, "levels": [level]}
    console = Console(width=80, record=True)
    console.print(table(result))
    lines = console.export_text().splitlines()
    # A path names its file; the task says what each agent is asked for.
    assert lines[0] == "hotloop bench · local · Qwen3-8B-Q4_K_M.gguf · built-in (5 steps, 6 calls)"
    row = next(line for line in lines if line.lstrip().startswith("64"))
    assert row.split() == ["64", "12.5", "261", "1,262", "261", "12.5", "261", "8.4", "12,346", "39%", "1,234,567"]
    assert max(len(line.rstrip()) for line in lines) <= 80


@pytest.mark.parametrize(
    ("before", "after", "in_points", "said"),
    [
        (3.51, 3.49, False, "-1%"),
        (0.17, 0.1701, False, "±0%"),  # never `-0%`
        (1.39, 261.21, False, "×188"),  # not `+18651%`
        (0.76, 0.79, True, "+3 pts"),  # a rate's change in points, not `+4%`
        (0, 4, False, "+4"),  # from no errors: the difference
        (0, 0, False, "±0"),
        (None, 6.12, False, "–"),  # not reported on one side
    ],
)
def test_a_comparison_says_each_change_in_the_form_that_reads(
    before: float | None, after: float, in_points: bool, said: str
) -> None:
    from hotloop.headless.bench_view import _change

    assert _change(before, after, in_points) == said


async def test_the_bench_builds_its_agents_as_the_app_does(isolated_home: Path, tmp_path: Path) -> None:
    """One factory: the config's tool_timeout and memo reach the bench's agents and the session's alike (the bench
    used to build its own, with the memo off and the timeout ignored)."""
    from hotloop.agent.events import AgentEvent, ToolFinished
    from hotloop.config import Choice, load_config, resolve
    from hotloop.core.runtime import Runtime
    from hotloop.core.session import Session, SessionOptions
    from hotloop.headless.bench import Scenario, run_level

    (isolated_home / "config.toml").write_text(f"tool_timeout = 0.3\n[latency]\nmemo_ttl = 7\n{FAST_SIM}")
    config = load_config()
    probe = {"name": "probe", "arguments": {"url": "https://docs.example/a"}}
    scenario = Scenario(system="You check links.", prompts=["Check the docs."], tools={"probe": 0.01, "slow": 30.0})
    script = tmp_path / "steps.json"
    steps = [{"tool_calls": [probe]}, {"tool_calls": [probe]}, {"tool_calls": [{"name": "slow"}]}, {"text": "ok"}]
    script.write_text(json.dumps(steps))
    runtime = Runtime(structs.replace(config, sim=structs.replace(config.sim, scenario=script)))
    events: list[AgentEvent] = []
    try:
        provider = await runtime.connect(resolve(runtime.config, Choice()))
        await run_level(runtime, provider, scenario, 1, events.append)
    finally:
        await runtime.aclose()
    finished = [e for e in events if isinstance(e, ToolFinished)]
    assert [e.reused for e in finished[:2]] == ["", "memo"]
    assert finished[2].result == "error: slow timed out after 0.3 s"

    session = Session(config, SessionOptions(workspace=tmp_path), lambda event: None)
    try:
        await session.open()
        assert session.agent is not None
        assert session.agent.options == config.agent_options()
        assert (session.agent.options.tool_timeout, session.agent.options.memo_ttl) == (0.3, 7)
    finally:
        await session.close()


async def test_a_levels_agents_arrive_spread_over_the_ramp_in_order() -> None:
    """Agents arrive evenly over the ramp, in order, none before its time, and the ramp returned spans them."""
    import asyncio

    from hotloop.headless.bench import staggered

    loop = asyncio.get_running_loop()
    seen: list[tuple[int, float]] = []

    async def start(n: int) -> None:
        seen.append((n, loop.time()))

    first = loop.time()
    ramp = await staggered(start, 5, over=0.2)
    assert [n for n, _ in seen] == list(range(5))
    assert all(at - first >= n * 0.04 - 0.001 for n, at in seen)
    # The first agent may begin late on a loaded machine (its task waits for a turn of the loop), the last never early.
    assert ramp >= seen[-1][1] - seen[0][1] and ramp >= 0.159


async def test_agents_already_due_begin_together_rather_than_a_turn_each() -> None:
    """A loop behind the schedule (here: no ramp) begins every agent due in one turn: a slow client's ramp isn't
    stretched a loop turn an agent (1,000 agents took 84 s to begin that way)."""
    import asyncio

    from hotloop.headless.bench import staggered

    turns, seen = 0, []
    done = asyncio.Event()

    async def ticker() -> None:
        nonlocal turns
        while not done.is_set():
            turns += 1
            await asyncio.sleep(0)

    async def start(n: int) -> None:
        seen.append(turns)

    ticking = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    await staggered(start, 50, over=0.0)
    done.set()
    await ticking
    assert len(seen) == 50 and len(set(seen)) == 1


async def test_a_level_cancelled_while_its_agents_start_leaves_none_running() -> None:
    """Cancelled between two starts, the level begins no more agents, and returns once those begun have ended."""
    import asyncio

    from hotloop.headless.bench import staggered

    begun: list[int] = []
    ended: list[int] = []
    two = asyncio.Event()

    async def start(n: int) -> None:
        begun.append(n)
        if len(begun) == 2:
            two.set()
        try:
            await asyncio.Event().wait()
        finally:
            ended.append(n)

    level = asyncio.create_task(staggered(start, 100, over=100.0))
    await asyncio.wait_for(two.wait(), 10)
    level.cancel()
    with pytest.raises(asyncio.CancelledError):
        await level
    assert len(begun) < 100 and sorted(ended) == sorted(begun)
