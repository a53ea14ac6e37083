"""`hotloop watch --run`: a real SDK script run through the pass-through to the embedded simulator, its requests
printed as a table or as JSON lines, and its exit status kept."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from hotloop.cli import main

SCRIPT = """
import os, sys
import anthropic, openai

chat = openai.OpenAI(api_key="sk-script-key-0123456789")  # OPENAI_BASE_URL comes from hotloop watch
chat.chat.completions.create(model="sim-balanced", messages=[{"role": "user", "content": "say hello"}])
messages = anthropic.Anthropic(api_key="sk-script-key-0123456789")  # ANTHROPIC_BASE_URL too
messages.messages.create(model="sim-fast", max_tokens=50, messages=[{"role": "user", "content": "say hi"}])
print("script done")
sys.exit(3)
"""


@pytest.fixture
def script(tmp_path: Path, isolated_home: Path) -> Path:
    (isolated_home / "config.toml").write_text(
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    )
    path = tmp_path / "agent.py"
    path.write_text(SCRIPT)
    return path


def test_run_prints_each_request_and_exits_with_the_commands_status(
    script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    status = main(["watch", "--upstream", "sim", "--run", sys.executable, str(script)])
    out, err = capfd.readouterr()
    assert status == 3
    assert "script done" in out and "listening on http://127.0.0.1:" in err
    rows = [line for line in out.splitlines() if "sim-balanced" in line or "sim-fast" in line]
    assert len(rows) == 2, out
    assert "total: 2 conversations, 2 requests" in out
    assert "sk-script-key" not in out + err


def test_json_streams_the_events_with_their_conversation(script: Path, capfd: pytest.CaptureFixture[str]) -> None:
    status = main(["watch", "--upstream", "sim", "--json", "--run", sys.executable, str(script)])
    out, err = capfd.readouterr()
    assert status == 3
    assert "script done" in err  # the command's stdout goes to stderr: stdout stays JSON
    events = [json.loads(line) for line in out.splitlines()]
    finished = [event for event in events if event["type"] == "response_finished"]
    assert len(finished) == 2 and len({event["conversation"] for event in finished}) == 2
    assert all(event["usage"]["prompt_total"] > 0 for event in finished)
    assert [event["type"] for event in events if event["conversation"] == finished[0]["conversation"]][:2] == [
        "turn_started",
        "step_started",
    ]


def test_a_bad_upstream_or_command_is_one_line(script: Path, capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "--upstream", "nowhere", "--run", "true"]) == 2
    assert main(["watch", "--upstream", "sim", "--run", "/no/such/command"]) == 2
    err = capfd.readouterr().err
    assert "is not a URL" in err and "cannot run /no/such/command" in err


UNREPORTED = """
import openai

chat = openai.OpenAI(api_key="sk-script-key-0123456789")
for words, usage in (("say hello", False), ("say hi", True)):
    options = {"stream_options": {"include_usage": True}} if usage else {}
    stream = chat.chat.completions.create(
        model="sim-balanced", messages=[{"role": "user", "content": words}], stream=True, **options
    )
    for chunk in stream:
        pass
"""


def test_a_stream_without_usage_is_summed_as_not_reported_never_as_a_prompt_of_0(
    script: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """An OpenAI stream asked without `include_usage` carries no usage: its conversation's summary says so, and the
    total is a floor over the requests that reported, where both read `prompt 0 (no prompt tokens), output 0`."""
    script.write_text(UNREPORTED)
    assert main(["watch", "--upstream", "sim", "--run", sys.executable, str(script)]) == 0
    out = capfd.readouterr().out
    (unreported,) = [line for line in out.splitlines() if line.endswith("· say hello")]
    assert ": 1 request, usage not reported, price unknown ·" in unreported
    (total,) = [line for line in out.splitlines() if line.startswith("total: ")]
    assert total.startswith("total: 2 conversations, 2 requests, 1 without usage, prompt ≥") and "output ≥" in total
    assert "prompt 0" not in out and "prompt ≥0" not in total
