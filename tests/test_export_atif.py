"""`hotloop sessions export --format atif`: a session as an ATIF v1.4 trajectory (issue 27, item 3).

Harbor publishes no JSON Schema file for ATIF (its RFC's tables and its Pydantic models are the
reference), so `fixtures/atif/atif-v1.4-fields.json` writes the RFC's fields down, and every
object of an export is checked against it: each required field present, every field known and
of its type, plus the RFC's rules across fields (step ids from 1, agent-only fields, observations
that name a call of their step).
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import StepFinished
from hotloop.cli import main
from hotloop.sessions.export import export
from hotloop.sessions.log import SessionLog
from hotloop.sessions.store import list_sessions, read_session

from support import SLOW_TOOL, cancelled_in_its_tools, logged_agent, sim_with_scenario

FIELDS = json.loads((Path(__file__).parent / "fixtures" / "atif" / "atif-v1.4-fields.json").read_text())
HOSTILE = "<script>alert(1)</script> [bold red]markup[/] \x1b[31mred\x1b[0m \x9b2J *not* `code` \\u0000 \u202eevil"
FAST_SIM = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


def _typed(value: object, kind: str) -> bool:
    if kind.startswith("array:"):
        return isinstance(value, list) and all(_typed(item, kind.removeprefix("array:")) for item in value)
    if "|" in kind:
        return any(_typed(value, one) for one in kind.split("|"))
    simple: dict[str, type | tuple[type, ...]] = {"string": str, "integer": int, "number": (int, float), "object": dict}
    if kind in simple:
        return isinstance(value, simple[kind]) and not isinstance(value, bool)
    return isinstance(value, dict) and not _problems(value, kind, kind)


def _problems(document: dict[str, Any], kind: str, where: str) -> list[str]:
    """Every way `document` breaks the RFC's table for `kind`: a required field missing, an unknown or mistyped one."""
    spec = FIELDS["objects"][kind]
    known = spec["required"] | spec["optional"]
    problems = [f"{where}: {name} is required" for name in spec["required"] if name not in document]
    for name, value in document.items():
        if name not in known:
            problems.append(f"{where}: {name} is not an ATIF field")
        elif known[name] in FIELDS["objects"]:
            problems += _problems(value, known[name], f"{where}.{name}") if isinstance(value, dict) else [name]
        elif known[name].removeprefix("array:") in FIELDS["objects"] and isinstance(value, list):
            item = known[name].removeprefix("array:")
            problems += [p for n, v in enumerate(value) for p in _problems(v, item, f"{where}.{name}[{n}]")]
        elif not _typed(value, known[name]):
            problems.append(f"{where}: {name} is not {known[name]}: {value!r}")
    return problems


def _atif_problems(document: dict[str, Any]) -> list[str]:
    """The fields, then the RFC's rules across them."""
    problems = _problems(document, "trajectory", "trajectory")
    step_rules = FIELDS["objects"]["step"]
    for number, step in enumerate(document["steps"], start=1):
        where = f"steps[{number - 1}]"
        if step["step_id"] != number:
            problems.append(f"{where}: step_id {step['step_id']}, expected {number}")
        if step["source"] not in step_rules["source"]:
            problems.append(f"{where}: source {step['source']!r}")
        if step["source"] != "agent":
            problems += [
                f"{where}: {name} on a {step['source']} step" for name in step_rules["agent_only"] if name in step
            ]
        calls = {call["tool_call_id"] for call in step.get("tool_calls", [])}
        for result in step.get("observation", {}).get("results", []):
            if "source_call_id" in result and result["source_call_id"] not in calls:
                problems.append(f"{where}: an observation of {result['source_call_id']}, no call of this step")
    return problems


def test_the_checker_bites() -> None:
    """Each rule catches the document that breaks it, so a clean export proves something."""
    good: dict[str, Any] = {
        "schema_version": "ATIF-v1.4",
        "session_id": "s",
        "agent": {"name": "a", "version": "1"},
        "steps": [{"step_id": 1, "source": "user", "message": "hi"}],
    }
    assert _atif_problems(good) == []
    broken = [
        {**good, "agent": {"name": "a"}},
        {**good, "steps": [{"step_id": 2, "source": "user", "message": "hi"}]},
        {**good, "steps": [{"step_id": 1, "source": "user", "message": "hi", "metrics": {}}]},
        {**good, "steps": [{"step_id": 1, "source": "agent", "message": "", "metrics": {"prompt_tokens": "9"}}]},
        {**good, "steps": [{"step_id": 1, "source": "agent", "message": "", "tool_calls": [{"tool_call_id": "c"}]}]},
        {
            **good,
            "steps": [
                {"step_id": 1, "source": "agent", "message": "", "observation": {"results": [{"source_call_id": "x"}]}}
            ],
        },
        {**good, "final_metrics": {"total_steps": 1.5}},
        {**good, "trajectory_extra": {}},
    ]
    assert all(_atif_problems(document) for document in broken)


async def test_a_session_with_a_tool_error_a_cancelled_step_and_hostile_text_exports_as_valid_atif(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "hostile.txt").write_bytes(b"bytes \xff\xfe not UTF-8 " + HOSTILE.encode())
    sim = sim_with_scenario(
        tmp_path,
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "missing.txt"}}]},
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "hostile.txt"}}]},
            {"text": HOSTILE, "reasoning": "thinking <b>hard</b>"},
            {"tool_calls": [{"name": "slow", "arguments": {}}]},
            {"text": "never"},
        ],
    )
    try:
        log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-fast", workspace=workspace)
        agent, recorder = logged_agent(sim, "openai", workspace, log)
        agent.tools.add(SLOW_TOOL)
        await agent.run_turn(HOSTILE)
        await cancelled_in_its_tools(agent, recorder, "wait for it")
        log.close()
        await agent.provider.aclose()
    finally:
        sim.stop()
    session = read_session(log.path)
    text = export(session, "atif")
    assert not [c for c in text if (ord(c) < 0x20 and c != "\n") or 0x7F <= ord(c) <= 0x9F]  # every control escaped
    document = json.loads(text)
    assert _atif_problems(document) == []
    assert document["schema_version"] == "ATIF-v1.4" and document["session_id"] == session.header.id
    assert document["agent"]["name"] == "hotloop" and document["agent"]["model_name"] == "sim-fast"
    assert "workspace" not in text and str(workspace) not in text  # no configuration, as in the other exports

    steps = document["steps"]
    assert [s["source"] for s in steps] == ["user", "agent", "agent", "agent", "user", "agent"]
    prompt, missing, hostile, answer, second, cancelled = steps
    assert prompt["message"] == HOSTILE and answer["message"] == HOSTILE  # the exact text, back through JSON
    assert answer["reasoning_content"] == "thinking <b>hard</b>"
    [error_call] = missing["tool_calls"]
    assert error_call["function_name"] == "read_file" and error_call["arguments"] == {"path": "missing.txt"}
    assert missing["observation"]["results"][0]["source_call_id"] == error_call["tool_call_id"]
    assert missing["extra"]["tool_runs"][0]["status"] == "error"
    read = hostile["observation"]["results"][0]["content"]
    assert "\ufffd" in read and "\x1b[31mred" in read and "<script>" in read  # invalid UTF-8 replaced, the rest kept

    assert second["extra"]["end"] == "cancelled"
    assert cancelled["extra"]["interrupted"] is True and cancelled["extra"]["tool_runs"][0]["status"] == "cancelled"
    assert cancelled["metrics"]["prompt_tokens"] > 0  # a cancelled step was still billed

    finished = [e for e in session.events if isinstance(e, StepFinished)]
    for step, event in zip([s for s in steps if s["source"] == "agent"], finished, strict=True):
        usage, metrics = event.usage, step["metrics"]
        assert usage is not None and metrics["prompt_tokens"] == usage.prompt_total
        assert metrics["completion_tokens"] == usage.output and metrics["extra"]["ttft"] == event.ttft
        # The simulator's OpenAI usage says what it cached; where it says nothing, the field is absent, not 0.
        assert metrics.get("cached_tokens") == usage.cache_read
    final = document["final_metrics"]
    assert final["total_steps"] == len(steps)
    assert final["total_prompt_tokens"] == sum(e.usage.prompt_total or 0 for e in finished if e.usage)


def test_figures_not_reported_are_left_out_never_zero(tmp_path: Path) -> None:
    """A step whose provider reported no usage has no metrics, and the totals it would make a guess of are absent."""
    sim = sim_with_scenario(tmp_path, [{"text": "hello"}])
    try:
        log = SessionLog.create(tmp_path / "sessions", provider="sim", model="sim-fast", workspace=tmp_path)
        agent, _ = logged_agent(sim, "openai", tmp_path, log)
        asyncio.run(agent.run_turn("hi"))
        log.close()
        asyncio.run(agent.provider.aclose())
    finally:
        sim.stop()
    # The same log, its usage figures taken away as a provider that reports none would leave them.
    lines = log.path.read_text().splitlines()
    stripped = [json.dumps({**json.loads(line), "usage": None}) if '"usage"' in line else line for line in lines]
    log.path.write_text("\n".join(stripped) + "\n")
    document = json.loads(export(read_session(log.path), "atif"))
    assert _atif_problems(document) == []
    agent_step = document["steps"][1]
    assert not {"prompt_tokens", "completion_tokens", "cached_tokens", "cost_usd"} & set(agent_step.get("metrics", {}))
    assert not {"total_prompt_tokens", "total_completion_tokens", "total_cost_usd"} & set(document["final_metrics"])


def test_the_cli_writes_atif(
    isolated_home: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    (isolated_home / "ws").mkdir()
    monkeypatch.chdir(isolated_home / "ws")  # the tests after it keep their own folder
    (isolated_home / "ws" / "README.md").write_text("# Demo\n")
    assert main(["run", "read README.md"]) == 0
    capsys.readouterr()
    [listed] = list_sessions(isolated_home / "data" / "sessions").sessions
    target = isolated_home / "trajectory.json"
    assert main(["sessions", "export", listed.id, "--format", "atif", "-o", str(target)]) == 0
    document = json.loads(target.read_text())
    assert _atif_problems(document) == [] and document["session_id"] == listed.id
    [call] = document["steps"][1]["tool_calls"]
    assert call["function_name"] == "read_file" and call["arguments"] == {"path": "README.md"}
    assert oct(target.stat().st_mode & 0o777) == "0o600"
