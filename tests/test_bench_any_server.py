"""`hotloop bench` runs the same task on any server (issue 25, item 6).

Against `hotloop sim serve` (a fleet included) the bench used to run one step a turn and no tools, where the embedded
simulator ran the five steps its scenario scripted through a side channel, and nothing said so. The prompts now ask
for the calls, and the simulator makes them from the prompts alone, on any transport.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

from hotloop.agent.events import StepFinished, TurnFinished
from hotloop.cli import main

from support import sim_served
from tui_support import FAST_SIM


@pytest.fixture
def fleet() -> Iterator[str]:
    """`hotloop sim serve --replicas 2` in its own process, on a free port; yields its `/v1` URL."""
    with sim_served("--replicas", "2") as (banner, url):
        assert "2 replicas behind the round-robin router" in banner, banner
        yield url


def bench_json(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    assert main(["bench", "--agents", "2", "--json", *flags]) == 0
    result: dict[str, Any] = json.loads(capsys.readouterr().out)
    return result


def test_the_embedded_simulator_and_a_served_fleet_do_the_same_work(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], fleet: str
) -> None:
    (isolated_home / "config.toml").write_text(
        f'{FAST_SIM}[providers.fleet]\nkind = "openai"\nbase_url = "{fleet}"\ndefault_model = "sim-balanced"\n'
    )
    embedded = bench_json(capsys)
    served = bench_json(capsys, "--provider", "fleet")

    assert embedded["server"] != served["server"] == fleet
    for result in (served, embedded):
        (level,) = result["levels"]
        assert (level["turns"], level["steps"], level["errors"]) == (4, 10, 0)  # the fleet ran 4 steps: no tools
        assert (level["steps_per_turn"], level["cut_off"]) == (2.5, 0)
        assert level["tool_calls"] == {"fetch": 4, "search": 8}
    assert embedded["task"] == served["task"] == {"turns": 2, "steps": 5, "tool_calls": 6}


def test_a_model_that_answers_without_the_tools_is_named_below_the_table(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A server that can't drive tool calls (here the simulator scripted to answer in words) does less than the task:
    the caption and a line below the table say so, where they said "no errors"."""
    script = tmp_path / "words.json"
    script.write_text(json.dumps([{"text": "Prefix caches evict the tail first."}, {"text": "| a | b |"}]))
    (isolated_home / "config.toml").write_text(f'{FAST_SIM}scenario = "{script}"\n')
    assert main(["bench", "--agents", "1"]) == 0
    said = " ".join(capsys.readouterr().out.split())
    assert "no errors" not in said
    assert "· fewer steps than the task, below" in said
    assert (
        "at 1 agent, 1.0 steps a turn where the task takes 2.5, 0 of 6 tool calls: the model answered without the "
        "calls its prompts ask for" in said
    )


def test_steps_cut_off_by_length_are_said_not_called_no_errors() -> None:
    """Every step ended by `length` (a model that never stops, an output cap too small): the bench said "no errors"."""
    from hotloop.headless.bench import Level
    from hotloop.headless.bench_view import findings, table

    def cut(step: int) -> StepFinished:
        return StepFinished(
            turn=1,
            step=step,
            usage=None,
            ttft=0.1,
            decode_tps=None,
            model_time=1.0,
            wall=1.0,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="length",
        )

    level = Level(2, events=[[cut(1), TurnFinished(turn=1, reason="cut_off", steps=1, wall=1.0)] for _ in range(2)])
    figures = level.figures()
    assert (figures["cut_off"], figures["errors"]) == (2, 0)
    task = {"turns": 1, "steps": None}
    result = {"provider": "local", "model": "m", "scenario": "mine", "task": task, "levels": [figures]}
    console = Console(width=80, record=True)
    console.print(table(result))
    console.print(findings(result))
    said = " ".join(console.export_text().split())
    assert "no errors" not in said and "· 2 steps cut off, below" in said
    assert "at 2 agents, 2 of 2 steps ended by `length` (the output cap or the context window)" in said
