"""Nothing lost on any stop: `hotloop watch` (piped, and its app on a terminal) and `hotloop run`, real processes,
stopped by SIGTERM, SIGHUP or SIGINT right after an answer, keep that answer's step in the session log."""

from __future__ import annotations

import os
import queue
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import openai
import pytest

from hotloop.agent.events import ResponseFinished, StepFinished, TurnFinished, decode

from support import (
    ENDED,
    READ_FILE,
    as_in_a_terminal,
    in_a_terminal,
    killed_if_running,
    lines_of,
    read_until,
    stopped_in_a_terminal,
)

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGINT]


@pytest.fixture
def environment(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "config.toml").write_text("[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n")
    (tmp_path / "README.md").write_text("# Demo project\n")
    return {
        **os.environ,
        "HOTLOOP_CONFIG": str(tmp_path / "config.toml"),
        "HOTLOOP_DATA_DIR": str(tmp_path / "data"),
        "PYTHONIOENCODING": "utf-8",
    }


def _piped(
    command: list[str], environment: dict[str, str], cwd: Path
) -> tuple[subprocess.Popen[str], queue.Queue[str], queue.Queue[str]]:
    """`command` started as a terminal starts it, its output piped; its stderr's and its stdout's lines as they come."""
    process = subprocess.Popen(
        command,
        env=environment,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=as_in_a_terminal,
    )
    assert process.stderr is not None and process.stdout is not None
    return process, lines_of(process.stderr), lines_of(process.stdout)


def _rest(lines: queue.Queue[str]) -> list[str]:
    """The lines up to the stream's end, which comes within 10 s of the process's."""
    return list(iter(lambda: lines.get(timeout=10), ENDED))


def _logged(environment: dict[str, str]) -> list[Any]:
    folder = Path(environment["HOTLOOP_DATA_DIR"]) / "sessions"
    [log] = folder.glob("*.jsonl")
    return [decode(line) for line in log.read_bytes().splitlines()[1:]]


@pytest.mark.parametrize("stop", SIGNALS, ids=lambda stop: stop.name)
def test_a_watch_stopped_right_after_an_answer_keeps_its_step(
    stop: signal.Signals, environment: dict[str, str], tmp_path: Path
) -> None:
    """The answer asks for a tool, so its step stays open until the watch closes it: a watch killed where it stood
    would leave the step unwritten. Stopped by the signal at once, it stops accepting, closes the conversation
    (`StepFinished`, the turn interrupted) and exits 0 with one line."""
    process, errors, output = _piped(
        [sys.executable, "-m", "hotloop", "watch", "--upstream", "sim"], environment, tmp_path
    )
    try:
        said = errors.get(timeout=30)
        found = re.search(r"listening on (http://\S+)", said)
        assert found, said
        client = openai.OpenAI(base_url=f"{found[1]}/v1", api_key="sk-signal-test-0123456789", max_retries=0)
        chunks = client.chat.completions.create(
            model="sim-balanced",
            messages=[{"role": "user", "content": "read README.md"}],
            tools=[READ_FILE],
            stream=True,
            stream_options={"include_usage": True},
        )
        calls = [call for chunk in chunks for choice in chunk.choices for call in choice.delta.tool_calls or ()]
        called = [call.function.name for call in calls if call.function is not None]
        assert "read_file" in called
        process.send_signal(stop)
        process.wait(timeout=30)
    finally:
        killed_if_running(process)
    rest, out = _rest(errors), _rest(output)
    assert process.returncode == 0, rest
    assert [line for line in rest if line.startswith("hotloop watch: stopped")] == [
        f"hotloop watch: stopped by {stop.name}; every finished request is saved"
    ]
    assert "Traceback" not in "".join(rest)
    assert "total: 1 conversation" in "\n".join(out)
    events = _logged(environment)
    [response] = [event for event in events if isinstance(event, ResponseFinished)]
    assert response.finish_reason == "tool_calls" and response.usage is not None and response.usage.output
    assert [type(event) for event in events[-2:]] == [StepFinished, TurnFinished]
    assert events[-1].reason == "interrupted"


@pytest.mark.parametrize("stop", SIGNALS, ids=lambda stop: stop.name)
def test_a_run_stopped_mid_answer_keeps_every_step_as_ctrl_c_does(
    stop: signal.Signals, environment: dict[str, str], tmp_path: Path
) -> None:
    """`hotloop run` stopped while its second turn streams: the first turn is whole in the log, and the second's
    partial answer ends its turn there, as Ctrl-C leaves it; killed where it stood, the second turn would have no
    end and its last deltas would be lost with the log's buffer. One line, and 128 + the signal's number."""
    scenario = tmp_path / "scenario.json"
    scenario.write_text('[{"text": "First answer."}, {"text": "' + "word " * 2000 + '", "decode_ms": 5}]')
    with Path(environment["HOTLOOP_CONFIG"]).open("a") as config:
        config.write(f'scenario = "{scenario}"\n')
    command = [sys.executable, "-m", "hotloop", "run", "--json", "first", "second"]
    process, errors, output = _piped(command, environment, tmp_path)
    try:
        second = False  # the second turn has started: its first text delta is the moment
        for line in iter(lambda: output.get(timeout=30), ENDED):
            if second and '"text_delta"' in line:
                break
            second = second or ('"turn_started"' in line and '"turn":2' in line)
        else:
            raise AssertionError(_rest(errors))
        process.send_signal(stop)
        process.wait(timeout=30)
    finally:
        killed_if_running(process)
    rest = _rest(errors)
    assert process.returncode == 128 + stop, rest
    assert f"hotloop: stopped by {stop.name}" in rest and "Traceback" not in "\n".join(rest)
    events = _logged(environment)
    ends = [(event.turn, event.reason) for event in events if isinstance(event, TurnFinished)]
    assert ends[0] == (1, "answer") and ends[1][0] == 2 and ends[1][1] != "answer", ends
    assert [event.turn for event in events if isinstance(event, StepFinished)] == [1, 2]


@pytest.mark.parametrize("stop", SIGNALS, ids=lambda stop: stop.name)
def test_the_watch_app_stopped_right_after_an_answer_keeps_its_step(
    stop: signal.Signals, environment: dict[str, str], tmp_path: Path
) -> None:
    """`hotloop watch` on a terminal is the app: stopped by the signal right after an answer whose step waits for its
    tools, it quits as its quit key does, closing the conversation (`StepFinished`, the turn interrupted), exit 0."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "hotloop", "watch", "--upstream", "sim", "--port", str(port)]
    drawn = bytearray()
    with in_a_terminal(command, environment, tmp_path) as (process, master):
        # the app draws its address once it listens
        read_until(master, drawn, lambda: f"127.0.0.1:{port}".encode() in drawn, "address drawn")
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="sk-signal-test-0123456789")
        answer = client.chat.completions.create(
            model="sim-balanced", messages=[{"role": "user", "content": "read README.md"}], tools=[READ_FILE]
        )
        assert answer.choices[0].message.tool_calls
        stopped_in_a_terminal(process, master, stop)
    assert process.returncode == 0
    events = _logged(environment)
    assert [type(event) for event in events if isinstance(event, (ResponseFinished, StepFinished))] == [
        ResponseFinished,
        StepFinished,
    ]
    assert isinstance(events[-1], TurnFinished) and events[-1].reason == "interrupted"


def test_a_watch_stopped_while_its_command_runs_stops_the_command_too(
    environment: dict[str, str], tmp_path: Path
) -> None:
    """`hotloop watch --run CMD` stopped by SIGTERM: the command, which would go on talking to a pass-through that is
    gone, gets SIGTERM too, and hotloop exits 128 + 15 with its line."""
    command = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *_: (print('command stopped', flush=True), sys.exit(0)))\n"
        "print('command ready', flush=True)\n"
        "time.sleep(60)\n"
    )
    watching = [sys.executable, "-m", "hotloop", "watch", "--upstream", "sim", "--run", sys.executable, "-c", command]
    process, errors, output = _piped(watching, environment, tmp_path)
    try:
        assert output.get(timeout=30) == "command ready"
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)
    finally:
        killed_if_running(process)
    assert "command stopped" in _rest(output)
    assert process.returncode == 128 + signal.SIGTERM
    assert "hotloop watch: stopped by SIGTERM; every finished request is saved" in _rest(errors)
