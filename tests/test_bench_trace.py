"""`hotloop bench --trace`: recorded sessions replayed against the simulator, over loopback HTTP, by their shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hotloop.cli import main
from hotloop.headless.bench_trace import Trace

from tui_support import write_config

FIXTURES = Path(__file__).parent / "fixtures"
# `hotloop run` against the simulator: three turns, ten requests, tools between them (see PROVENANCE.md).
SESSION = FIXTURES / "traces" / "sim_three_turns.jsonl"
WATCHED = FIXTURES / "watched" / "claude_code_2.1.332_watched.jsonl"


def test_a_session_log_gives_its_requests_in_order() -> None:
    trace = Trace.load(SESSION)
    assert (trace.name, trace.turns, len(trace.steps), trace.skipped) == ("1733fb93", 3, 10, 0)
    assert [step.prompt for step in trace.steps[:3]] == [1119, 1270, 1357]
    assert [step.output for step in trace.steps[:3]] == [76, 37, 127]
    assert [step.new_turn for step in trace.steps] == [
        True,
        False,
        False,
        True,
        False,
        False,
        False,
        True,
        False,
        False,
    ]
    # The test run took 1.5 s, between the answer that asked for it and the next request.
    assert max(trace.steps, key=lambda step: step.gap) == trace.steps[6]
    assert trace.steps[6].gap > 1.4
    assert trace.recorded()["cache_hit"] == pytest.approx(sum(s.cache_read for s in trace.steps) / 17_087)


def test_a_replay_reproduces_the_requests_and_reports_goodput(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_home)  # a simulator that answers at once
    scale = 0.001
    assert main(["bench", "--trace", str(SESSION), "--agents", "1,2", "--time-scale", str(scale), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    (recorded,) = result["traces"]
    one, two = result["levels"]
    for level, copies in ((one, 1), (two, 2)):
        assert (level["agents"], level["errors"]) == (copies, 0)
        # Every request, with the recorded prompt length (within 1%) and the recorded answer length.
        assert level["steps"] == level["recorded_steps"] == 10 * copies
        assert level["turns"] == 3 * copies
        assert level["prompt_error"] <= 0.01
        assert level["prompt_tokens"] == pytest.approx(recorded["prompt_tokens"] * copies, rel=0.01)
        assert level["cut_off"] == 0
        # The prefix reuse of the session itself: the cache hit is the recorded one, within 2 points.
        assert level["cache_hit"] == pytest.approx(recorded["cache_hit"], abs=0.02)
        assert level["original_cache_hit"] == recorded["cache_hit"]
        assert (level["goodput"], level["good_sessions"]) == (1.0, copies)
        # The tools' time is the recorded gaps within turns, scaled; no turn waited on its user here.
        gaps = sum(step.gap for step in Trace.load(SESSION).steps if not step.new_turn)
        assert level["waiting_s"]["tools"] == pytest.approx(gaps * scale * copies)
        assert level["waiting_s"]["model"] > 0
    # Each copy has a prefix of its own: two copies prefill twice what one does, nothing shared between them.
    assert two["uncached_prefill_tokens"] == 2 * one["uncached_prefill_tokens"]

    (saved,) = (isolated_home / "data" / "bench").glob("*.json")
    assert json.loads(saved.read_text()) == result
    assert main(["bench", "compare", saved.stem, str(saved)]) == 0
    table = capsys.readouterr().out
    assert "goodput" in table and "±0 pts" in table


def test_a_tight_slo_counts_no_session_good_and_the_table_says_so(
    isolated_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_config(isolated_home)
    assert main(["bench", "--trace", str(SESSION), str(WATCHED), "--agents", "1", "--time-scale", "0"]) == 0
    assert main(["bench", "--trace", str(SESSION), "--agents", "1", "--time-scale", "0", "--slo-ttft", "0"]) == 0
    out = capsys.readouterr().out
    assert "trace 1733fb93, b78f11d3" in out  # a watched session replays as hotloop's own do
    assert "at 2 agents: goodput 2/2 (100%: TTFT ≤ 2 s, answer ≤ 30 s, every step)" in out
    assert "at 1 agent: goodput 0/1 (0%: TTFT ≤ 0 s, answer ≤ 30 s, every step)" in out
    assert "requests 12 of 12" in out and "requests 10 of 10" in out
    assert max(len(line) for line in out.splitlines()) <= 80


def test_a_trace_that_isnt_there_says_so(isolated_home: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["bench", "--trace", "nope"]) == 2
    assert "no sessions yet" in capsys.readouterr().err
    assert main(["bench", "--trace", str(SESSION), "--scenario", str(SESSION)]) == 2
    assert "give one" in capsys.readouterr().err


@pytest.mark.parametrize("scale", ["-1", "inf", "nan", "x"])
def test_a_time_scale_must_be_a_finite_number(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], scale: str
) -> None:
    with pytest.raises(SystemExit):
        main(["bench", "--trace", str(SESSION), "--time-scale", scale])
    assert "must be a number, 0 or more" in capsys.readouterr().err
