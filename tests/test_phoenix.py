"""Phoenix (arize-phoenix) receives a session's spans over OTLP/HTTP and shows them, read back through its REST API.

Runs only where Phoenix is installed: a `phoenix` executable in HOTLOOP_PHOENIX_VENV (default /work/phoenix-venv/bin),
else on PATH. Phoenix is kept out of hotloop's own environment, whose versions CI pins. The test starts `phoenix serve`
on free loopback ports with a throwaway working folder (its sqlite), runs a real `hotloop run --otel` against the
embedded simulator, and compares what Phoenix stored with the session log's own figures.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.events import StepFinished, StepStarted, ToolFinished, TurnFinished
from hotloop.sessions.store import read_session, session_id_of

pytestmark = pytest.mark.timeout(150)

INSTALL = "needs arize-phoenix: python3 -m venv /work/phoenix-venv && /work/phoenix-venv/bin/pip install arize-phoenix"
PROJECT = "hotloop-test"
STARTUP_SECONDS = 90  # a cold start (migrations on a fresh sqlite) takes ~15 s on a 2-core machine
STEPS = [
    {
        "tool_calls": [
            {"name": "run_shell", "arguments": {"command": "echo one"}},
            {"name": "run_shell", "arguments": {"command": "echo two"}},
        ]
    },
    {"text": "done"},
]


def phoenix_executable() -> str | None:
    folder = os.environ.get("HOTLOOP_PHOENIX_VENV", "/work/phoenix-venv/bin")
    return shutil.which("phoenix", path=folder) or shutil.which("phoenix")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=5) as reply:
        return json.load(reply)


class Phoenix:
    """`phoenix serve` in a process group of its own, on loopback, storing into `folder`."""

    def __init__(self, executable: str, folder: Path) -> None:
        self.port, grpc_port = free_port(), free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = folder / "phoenix.log"
        environ = {k: v for k, v in os.environ.items() if not k.startswith(("PHOENIX_", "OTEL_"))}
        environ |= {
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            "PHOENIX_GRPC_PORT": str(grpc_port),
            "PHOENIX_WORKING_DIR": str(folder),
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
        }
        with self.log.open("wb") as log:
            self.process = subprocess.Popen(
                [executable, "serve"],
                cwd=folder,
                env=environ,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait_ready(self) -> None:
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                pytest.fail(f"phoenix exited with {self.process.returncode}:\n{self.tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.25)
        pytest.fail(f"phoenix did not answer on {self.url} within {STARTUP_SECONDS} s:\n{self.tail()}")

    def spans(self, project: str) -> list[dict[str, Any]]:
        """Every span Phoenix holds for `project` ([] while the project doesn't exist yet)."""
        try:
            body = get_json(f"{self.url}/v1/projects/{project}/spans?limit=1000")
        except urllib.error.HTTPError as error:
            if error.code == 404:
                return []
            raise
        spans: list[dict[str, Any]] = body["data"]
        return spans

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        for sig, wait in ((signal.SIGTERM, 10), (signal.SIGKILL, 5)):
            if self.process.poll() is not None:
                return
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.process.wait(timeout=wait)
            except subprocess.TimeoutExpired:
                continue


@pytest.fixture
def phoenix(tmp_path: Path) -> Iterator[Phoenix]:
    executable = phoenix_executable()
    if executable is None:
        pytest.skip(INSTALL)
    folder = tmp_path / "phoenix"
    folder.mkdir()
    served = Phoenix(executable, folder)
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop()


def run_hotloop(home: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    (home / "steps.json").write_text(json.dumps(STEPS))
    (home / "config.toml").write_text(
        "tool_timeout = 20\n"
        f'[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 1\nscenario = "{home / "steps.json"}"\n'
        "[routing]\ntitles = false\n"
    )
    workspace = home / "ws"
    workspace.mkdir(exist_ok=True)
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ |= {
        "HOTLOOP_CONFIG": str(home / "config.toml"),
        "HOTLOOP_DATA_DIR": str(home / "data"),
        "OTEL_EXPORTER_OTLP_ENDPOINT": endpoint,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={PROJECT}",
    }
    script = "import sys\nfrom hotloop.cli import main\nsys.exit(main(['run', '--yes', '--otel', 'echo twice']))\n"
    return subprocess.run(
        [sys.executable, "-c", script], cwd=workspace, env=environ, capture_output=True, text=True, timeout=45
    )


def test_phoenix_receives_and_shows_a_sessions_spans(isolated_home: Path, phoenix: Phoenix) -> None:
    result = run_hotloop(isolated_home, phoenix.url)
    assert result.returncode == 0, result.stderr
    assert "telemetry" not in result.stderr, result.stderr  # no "no OTLP collector answered"

    (log,) = (isolated_home / "data" / "sessions").glob("*.jsonl")
    events = read_session(log).events
    steps = [e for e in events if isinstance(e, StepFinished)]
    models = [e.model for e in events if isinstance(e, StepStarted)]
    tool_calls = {e.call_id: e for e in events if isinstance(e, ToolFinished)}
    (ended,) = (e for e in events if isinstance(e, TurnFinished))
    assert len(steps) == 2 and len(tool_calls) == 2 and ended.reason == "answer"

    # Phoenix writes what it is sent in the background: poll, bounded, until all five spans are readable.
    deadline, spans = time.monotonic() + 30, []
    while time.monotonic() < deadline:
        spans = phoenix.spans(PROJECT)
        if len(spans) >= 5:
            break
        time.sleep(0.25)

    def named(prefix: str) -> list[dict[str, Any]]:
        return sorted((s for s in spans if s["name"].startswith(prefix)), key=lambda s: s["start_time"])

    (turn,), requests, tools = named("invoke_agent"), named("chat "), named("execute_tool ")
    assert len(spans) == 5 and len(requests) == 2 and len(tools) == 2, [s["name"] for s in spans]

    # One trace: turn → requests → the tools the first request asked for.
    assert {s["context"]["trace_id"] for s in spans} == {turn["context"]["trace_id"]}
    assert turn["parent_id"] is None
    assert all(r["parent_id"] == turn["context"]["span_id"] for r in requests)
    assert all(t["parent_id"] == requests[0]["context"]["span_id"] for t in tools)

    # The turn: Phoenix shows it as an agent span of the session.
    assert turn["name"] == "invoke_agent hotloop" and turn["span_kind"] == "AGENT"
    assert turn["attributes"]["gen_ai.conversation.id"] == session_id_of(log)
    assert turn["attributes"]["hotloop.turn.end"] == "answer" and turn["attributes"]["hotloop.turn.steps"] == 2

    # Each request: the session log's own figures, as sent and as Phoenix reads them into its LLM columns.
    for request, step, model in zip(requests, steps, models, strict=True):
        usage, figures = step.usage, request["attributes"]
        assert usage is not None and usage.prompt_total and usage.output is not None
        assert request["name"] == f"chat {model}" and request["span_kind"] == "LLM"
        assert request["status_code"] != "ERROR"
        assert figures["gen_ai.request.model"] == model
        assert figures["gen_ai.usage.input_tokens"] == usage.prompt_total
        assert figures["gen_ai.usage.output_tokens"] == usage.output
        assert figures.get("gen_ai.usage.cache_read.input_tokens") == usage.cache_read
        assert figures.get("gen_ai.usage.cache_creation.input_tokens") == usage.cache_write
        assert figures.get("hotloop.usage.uncached_input_tokens") == usage.uncached
        assert figures["gen_ai.response.finish_reasons"] == [step.finish_reason]
        assert figures["gen_ai.response.time_to_first_chunk"] == pytest.approx(step.ttft)
        assert figures["hotloop.model_time"] == pytest.approx(step.model_time)
        assert figures["llm.token_count.prompt"] == usage.prompt_total
        assert figures["llm.token_count.completion"] == usage.output
        assert figures["llm.token_count.total"] == usage.prompt_total + usage.output
    assert steps[1].usage is not None and steps[1].usage.cache_read  # the second request read the first's prefix
    assert requests[1]["attributes"]["llm.token_count.prompt_details.cache_read"] == steps[1].usage.cache_read

    # Each tool call: its id, status and duration as the log has them.
    assert {t["attributes"]["gen_ai.tool.call.id"] for t in tools} == set(tool_calls)
    for tool in tools:
        call = tool_calls[tool["attributes"]["gen_ai.tool.call.id"]]
        assert tool["name"] == "execute_tool run_shell" and tool["attributes"]["gen_ai.tool.name"] == "run_shell"
        assert tool["attributes"]["hotloop.tool.status"] == call.status == "ok"
        assert tool["attributes"]["hotloop.tool.duration"] == pytest.approx(call.duration)
        assert tool["status_code"] != "ERROR"
