"""`hotloop bench --workers N` (issue 39): the agents on Ray workers, one merged report exact against the server's
`/metrics`; goodput under `--slo`, `--sweep`, and what the client added, in one process or on workers."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.cli import main
from hotloop.headless.fleet import dealt
from hotloop.headless.fleet_mix import by_weight
from hotloop.headless.fleet_probe import ServerCounts, _parsed
from hotloop.headless.fleet_slo import Slo, next_load

from support import sim_served
from tui_support import FAST_SIM, write_config

TRACE = Path(__file__).parent / "fixtures" / "traces" / "sim_three_turns.jsonl"  # 3 turns, 10 requests
# A local Ray cluster takes 9-14 s to start on a quiet 2-core machine, and a test starts one: on a loaded machine
# that can pass the suite's 60 s a test; these still end, bounded.
RAY_BOUND = pytest.mark.timeout(240)
RAY_MISSING = "Ray is not installed: pip install 'hotloop[fleet]' (or '.[test,fleet]') to run the bench on workers"


@pytest.fixture
def served() -> Iterator[str]:
    """`hotloop sim serve` in its own process, answering at once, on a free port; yields its `/v1` URL."""
    with sim_served() as (_, url):
        yield url


def counts(url: str) -> ServerCounts:
    """The server's own counters, read over HTTP as any scraper reads them."""
    with urllib.request.urlopen(url.removesuffix("/v1") + "/metrics", timeout=10) as response:
        scraped = _parsed(response.read().decode())
    assert scraped is not None and scraped.prompt is not None and scraped.output is not None
    return scraped


def bench_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["bench", "--json", *argv]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


@RAY_BOUND
def test_two_ray_workers_merge_one_report_exact_against_the_servers_metrics(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], served: str
) -> None:
    """Two Ray workers against `hotloop sim serve`, on a mix of the built-in task and a recorded session: one report
    whose prompt and output tokens are the server's `/metrics` deltas, a row per worker that ran its share of the
    agents, goodput and what the client added."""
    pytest.importorskip("ray", reason=RAY_MISSING)
    (isolated_home / "config.toml").write_text(
        f'{FAST_SIM}[providers.served]\nkind = "openai"\nbase_url = "{served}"\ndefault_model = "sim-balanced"\n'
    )
    before = counts(served)
    mix = f"builtin=1,trace:{TRACE}=1"
    result = bench_json(
        capsys, "--provider", "served", "--workers", "2", "--agents", "2,4", "--mix", mix, "--time-scale", "0"
    )
    after = counts(served)

    assert (result["workers"], result["ray"]["address"]) == (2, "local")
    assert result["ray"]["startup_s"] > 0
    assert [part["weight"] for part in result["mix"]] == [1, 1]
    assert [level["agents"] for level in result["levels"]] == [2, 4]
    # The server saw the levels' requests and the trace's two calibration probes, sent before the first level.
    steps = sum(level["steps"] for level in result["levels"])
    assert after.ttft_count - before.ttft_count == steps + 2  # type: ignore[operator]
    levels_prompt = sum(level["server"]["prompt_tokens"] for level in result["levels"])
    levels_output = sum(level["server"]["output_tokens"] for level in result["levels"])
    assert 0 < after.prompt - before.prompt - levels_prompt < 200  # type: ignore[operator]  # two short probes
    assert 0 < after.output - before.output - levels_output <= 2 * 10  # type: ignore[operator]  # 10 tokens each
    for level in result["levels"]:
        # Every agent ran its whole job, on one worker or the other: half the built-in task (2 turns, 5 steps), half
        # the session (3 turns, 10 requests, no answer cut short of the recorded); the server counted every token.
        half = level["agents"] // 2
        assert (level["turns"], level["steps"], level["errors"], level["cut_off"]) == (5 * half, 15 * half, 0, 0)
        assert level["server"]["prompt_tokens"] == level["prompt_tokens"]
        rows = level["workers"]
        assert [row["worker"] for row in rows] == [1, 2]
        assert [row["agents"] for row in rows] == [sum(hand) for hand in dealt([half, half], 2)]
        assert sum(row["requests"] for row in rows) == level["steps"]
        assert all(row["cpu_ms_per_request"] > 0 and row["clock_round_trip_ms"] >= 0 for row in rows)
        assert level["good_jobs"] == level["agents"] and level["goodput"] == 1
        assert level["client"]["cpu_ms_per_request"] > 0
        assert level["client"]["ttft_gap_ms"] is not None  # the simulator reports its TTFT histogram


@RAY_BOUND
def test_two_hundred_agents_on_two_workers_report_goodput_and_the_clients_cost(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The README's `hotloop bench --workers 2 --agents 200 --json` on the embedded simulator: the workers reach it
    by its URL (so one server counts every request), and the report has 2 workers, goodput, the client's overhead,
    and prompt tokens equal to the server's."""
    pytest.importorskip("ray", reason=RAY_MISSING)
    write_config(isolated_home)
    scenario = isolated_home / "quick.json"
    scenario.write_text(
        json.dumps(
            {
                "system": "You check links.",
                "prompts": ['Use the probe tool on "https://docs.example/a", then say whether the link answers.'],
                "tools": {"probe": 0.01},
                "expect": {"steps": 2, "tool_calls": 1},
            }
        )
    )
    result = bench_json(capsys, "--workers", "2", "--agents", "200", "--scenario", str(scenario))
    (level,) = result["levels"]
    assert result["workers"] == 2 and len(level["workers"]) == 2
    assert (level["agents"], level["steps"], level["errors"]) == (200, 400, 0)
    assert level["server"]["prompt_tokens"] == level["prompt_tokens"] > 0
    assert 0 <= level["goodput"] <= 1 and level["good_jobs_per_s"] is not None
    assert level["tokens_per_job"] > 0
    assert level["client"]["cpu_ms_per_request"] > 0 and level["client"]["loop_lag_p99_ms"] is not None
    # Each worker's 100 agents arrive over a second, the last 0.99 s after its first: merged, on the driver's clock.
    assert 0.98 <= level["ramp_s"] < level["wall_s"]


@RAY_BOUND
def test_a_ray_address_where_nothing_answers_says_so_in_a_line(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Ray retries an address for minutes, logging each try: the bench asks the port first, and says why in one
    line (exit 2), before Ray starts."""
    pytest.importorskip("ray", reason=RAY_MISSING)
    import socket

    with socket.socket() as probe:  # a port that was free a moment ago
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    write_config(isolated_home)
    assert main(["bench", "--workers", "2", "--ray-address", f"127.0.0.1:{port}", "--agents", "1"]) == 2
    err = capsys.readouterr().err
    assert f"cannot reach the Ray cluster at 127.0.0.1:{port}: " in err and "Traceback" not in err


def test_without_ray_the_bench_runs_in_this_process_and_says_why(isolated_home: Path) -> None:
    """`--workers 2` where Ray can't be imported: one line says so, and the bench runs its agents in-process."""
    write_config(isolated_home)
    blocked = "import sys; sys.modules['ray'] = None; from hotloop.cli import main; "
    run = [sys.executable, "-c", blocked + "sys.exit(main(['bench', '--workers', '2', '--agents', '2', '--json']))"]
    done = subprocess.run(run, capture_output=True, text=True, timeout=50, env=os.environ.copy())
    assert done.returncode == 0, done.stderr
    assert (
        "Ray is not installed (pip install 'hotloop[fleet]'): the bench runs its agents in this process" in done.stderr
    )
    assert "Traceback" not in done.stderr
    result = json.loads(done.stdout)
    (level,) = result["levels"]
    assert (result["workers"], level["agents"], level["steps"]) == (1, 2, 10)
    assert "workers" not in level


def test_one_process_judges_jobs_by_the_slos_and_says_what_the_client_added(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """In one process: a job limit no job can meet (the built-in task's tools alone take a second) leaves goodput at
    0, a generous one at 1; tokens and dollars a job come from the usage and the provider's `cost_per_hour`."""
    write_config(isolated_home)
    with (isolated_home / "config.toml").open("a") as config:
        config.write('[providers.sim]\nkind = "sim"\ncost_per_hour = 3.6\n')
    strict = bench_json(capsys, "--agents", "2", "--slo", "ttft=2s,step=10s,job=100ms")
    loose = bench_json(capsys, "--agents", "2", "--slo", "job=10m")
    (tight,), (easy,) = strict["levels"], loose["levels"]
    assert (tight["good_jobs"], tight["goodput"], easy["good_jobs"], easy["goodput"]) == (0, 0, 2, 1)
    assert tight["slo"] == {"ttft_s": 2, "step_s": 10, "job_s": 0.1} and easy["slo"]["job_s"] == 600
    tokens = tight["prompt_tokens"] + tight["server"]["output_tokens"]
    assert tight["tokens_per_job"] == tokens / 2
    # $3.60 an hour is a dollar a thousand seconds: a job's share of the level's wall time.
    assert tight["dollars_per_job"] == pytest.approx(tight["wall_s"] / 1000 / 2)
    assert tight["client"]["cpu_ms_per_request"] > 0 and tight["server"]["prompt_tokens"] == tight["prompt_tokens"]

    assert main(["bench", "--agents", "1", "--slo", "job=100ms"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "goodput: jobs whose every request met TTFT ≤ 2 s, answer ≤ 30 s, and took ≤ 0.1 s" in said
    assert "at 1 agent: goodput 0/1 (0%)" in said and "client:" in said and "CPU a request" in said


def test_a_sweep_climbs_to_the_highest_load_meeting_the_slos(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--sweep --agents 1,4`: every load meets a loose SLO, so the sweep doubles up to its cap and says 4."""
    write_config(isolated_home)
    result = bench_json(capsys, "--sweep", "--agents", "1,4", "--slo", "job=10m")
    assert [level["agents"] for level in result["levels"]] == [1, 2, 4]
    assert result["sweep"] == {"highest_meeting_slo": 4}


def test_a_mix_splits_each_level_by_weight_and_judges_every_job(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--mix builtin=3,trace:FILE=1` in one process: 3 of 4 agents run the built-in task, 1 replays the session;
    each job is judged by its own turns, and a trace's answers, capped by design, are not called cut off."""
    write_config(isolated_home)
    result = bench_json(capsys, "--agents", "4", "--mix", f"builtin=3,trace:{TRACE}=1", "--time-scale", "0")
    (level,) = result["levels"]
    assert result["scenario"] == "mix built-in ×3, trace 1733fb93 ×1"
    assert result["task"] == {"turns": 3, "steps": None, "tool_calls": None}
    assert (level["turns"], level["steps"], level["cut_off"], level["errors"]) == (3 * 2 + 3, 3 * 5 + 10, 0, 0)
    assert (level["good_jobs"], level["goodput"]) == (4, 1)
    assert level["server"]["prompt_tokens"] == level["prompt_tokens"]  # the trace's calibration came before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("builtin=0", "'builtin=0': a weight is 1 or more"),
        ("scenario=2", "'scenario=2' is not a workload: write builtin=3,scenario:FILE=1,trace:SESSION=2"),
        ("trace:nope=1", "no session"),
    ],
)
def test_a_bad_mix_says_why(isolated_home: Path, capsys: pytest.CaptureFixture[str], text: str, message: str) -> None:
    write_config(isolated_home)
    assert main(["bench", "--mix", text]) == 2
    assert message in capsys.readouterr().err


def test_a_trace_on_workers_points_to_the_mix(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`--trace` runs in one process; on workers a session is replayed as a part of a mix, and the line says how."""
    write_config(isolated_home)
    assert main(["bench", "--trace", str(TRACE), "--workers", "2"]) == 2
    assert "for --workers or --sweep, replay it in a mix (--mix trace:ID=1)" in capsys.readouterr().err


def test_agents_are_dealt_round_so_workers_hold_even_shares_of_every_part() -> None:
    assert dealt([3, 1], 2) == [[2, 0], [1, 1]]
    assert dealt([5], 3) == [[2], [2], [1]]
    assert dealt([1, 0], 2) == [[1, 0], [0, 0]]
    assert by_weight([3, 1], 4) == [3, 1] and by_weight([1, 1, 1], 4) == [2, 1, 1] and by_weight([2, 1], 1) == [1, 0]


def test_the_sweep_bisects_between_the_load_that_held_and_the_one_that_failed() -> None:
    """Doubling while the SLOs hold, then halving the gap, to a tenth of the load that held."""
    assert next_load({1: True}, 100) == 2
    assert next_load({1: True, 2: True, 4: True}, 100) == 8
    assert next_load({1: True, 64: True}, 100) == 100 and next_load({100: True}, 100) is None
    assert next_load({32: True, 64: False}, 1000) == 48
    assert next_load({40: True, 43: False}, 1000) is None  # within a tenth of 40
    assert next_load({8: False}, 1000) == 4 and next_load({1: False}, 1000) is None


@pytest.mark.parametrize(
    ("text", "limits"),
    [
        ("ttft=2s,step=10s,job=60s", Slo(2, 10, 60)),
        ("ttft=250ms", Slo(0.25, 30, None)),
        ("job=2m, step=5", Slo(2, 5, 120)),
    ],
)
def test_slo_limits_read_like_prose(text: str, limits: Slo) -> None:
    assert Slo.parse(text) == limits


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--slo", "latency=2s"], "'latency=2s' is not a limit: write ttft=2s,step=10s,job=60s"),
        (["--workers", "0"], "must be a number of workers, 1 or more"),
    ],
)
def test_bad_fleet_flags_say_why(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    with pytest.raises(SystemExit):
        main(["bench", *flags])
    assert message in capsys.readouterr().err
