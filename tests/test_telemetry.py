"""OpenTelemetry spans from the event stream, received by a real OTLP/HTTP endpoint on loopback.

The receiver decodes each POST /v1/traces with the protocol's own `ExportTraceServiceRequest`;
the session runs against the embedded simulator. Nothing here mocks the SDK or HTTP.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    ResponseFinished,
    SideRequest,
    StepFinished,
    StepStarted,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    TurnStarted,
)
from hotloop.config import load_config
from hotloop.core.session import Session, SessionOptions
from hotloop.core.telemetry import ENV_ENDPOINT, ENV_TRACES_ENDPOINT, Telemetry
from hotloop.providers.events import UsageLedger

ERROR = 2  # Status.STATUS_CODE_ERROR
SECRET = "sk-test-telemetry-secret-0123456789"
# Two calls that finish only when both run at once: each waits for the other's file.
RENDEZVOUS = {
    "tool_calls": [
        {"name": "run_shell", "arguments": {"command": "touch a && until [ -e b ]; do :; done"}},
        {"name": "run_shell", "arguments": {"command": "touch b && until [ -e a ]; do :; done"}},
    ]
}


@dataclass(frozen=True)
class ReceivedSpan:
    name: str
    span_id: bytes
    parent_id: bytes
    trace_id: bytes
    start: int
    end: int
    attributes: dict[str, Any]
    status: int


def _value(value: AnyValue) -> Any:
    kind = value.WhichOneof("value")
    if kind == "array_value":
        return tuple(_value(item) for item in value.array_value.values)
    return getattr(value, kind) if kind is not None else None


class Receiver:
    """An OTLP/HTTP traces endpoint in a thread of its own: keeps every span it is sent."""

    def __init__(self) -> None:
        self.spans: list[ReceivedSpan] = []
        self.posts = 0
        self._lock = threading.Lock()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                if self.path != "/v1/traces":
                    self.send_error(404)
                    return
                receiver.take(ExportTraceServiceRequest.FromString(body))
                reply = ExportTraceServiceResponse().SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self._thread.start()

    def take(self, request: ExportTraceServiceRequest) -> None:
        with self._lock:
            self.posts += 1
            for resource in request.resource_spans:
                for scope in resource.scope_spans:
                    for span in scope.spans:
                        self.spans.append(
                            ReceivedSpan(
                                span.name,
                                span.span_id,
                                span.parent_span_id,
                                span.trace_id,
                                span.start_time_unix_nano,
                                span.end_time_unix_nano,
                                {a.key: _value(a.value) for a in span.attributes},
                                span.status.code,
                            )
                        )

    def named(self, prefix: str) -> list[ReceivedSpan]:
        with self._lock:
            return sorted((s for s in self.spans if s.name.startswith(prefix)), key=lambda s: s.start)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    served = Receiver()
    yield served
    served.close()


@pytest.fixture(autouse=True)
def no_otel_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (ENV_ENDPOINT, ENV_TRACES_ENDPOINT):
        monkeypatch.delenv(name, raising=False)


def configure(home: Path, *steps: object, telemetry: str = "") -> None:
    (home / "steps.json").write_text(json.dumps(list(steps)))
    (home / "config.toml").write_text(
        "tool_timeout = 20\n"
        f'[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 1\nscenario = "{home / "steps.json"}"\n'
        "[routing]\ntitles = false\n" + telemetry
    )


async def run_turn(home: Path, prompt: str) -> list[AgentEvent]:
    workspace = home / "ws"
    workspace.mkdir(exist_ok=True)
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(workspace=workspace, yes=True), emit=events.append)
    try:
        await session.open()
        await session.turn(prompt)
    finally:
        await session.close()  # sends what is queued, within a bounded wait
    return events


def ns(ts: float) -> int:
    return int(ts * 1e9)


async def test_a_turn_is_a_tree_of_spans_carrying_each_steps_own_figures(
    isolated_home: Path, receiver: Receiver
) -> None:
    configure(isolated_home, RENDEZVOUS, {"text": "done"}, telemetry=f'[telemetry]\notlp_endpoint = "{receiver.url}"\n')
    events = await run_turn(isolated_home, "run both")
    assert [e.reason for e in events if isinstance(e, TurnFinished)] == ["answer"]
    (turn,) = receiver.named("invoke_agent")
    requests, tools = receiver.named("chat "), receiver.named("execute_tool ")
    steps = [e for e in events if isinstance(e, StepFinished)]
    assert len(requests) == len(steps) == 2 and len(tools) == 2
    # The tree: turn → requests → the tools the first request asked for, in one trace.
    assert turn.parent_id == b"" and {s.trace_id for s in (turn, *requests, *tools)} == {turn.trace_id}
    assert all(request.parent_id == turn.span_id for request in requests)
    assert all(tool.parent_id == requests[0].span_id for tool in tools)
    # The events' own times: the turn from its start to its end, each request to its response's end.
    started = next(e for e in events if isinstance(e, TurnStarted))
    ended = next(e for e in events if isinstance(e, TurnFinished))
    assert (turn.start, turn.end) == (ns(started.ts), ns(ended.ts))
    step_starts = [e for e in events if isinstance(e, StepStarted)]
    responses = [e for e in events if isinstance(e, ResponseFinished)]
    assert [(r.start, r.end) for r in requests] == [
        (ns(s.ts), ns(r.ts)) for s, r in zip(step_starts, responses, strict=True)
    ]
    for request, step, begun in zip(requests, steps, step_starts, strict=True):
        usage = step.usage
        assert usage is not None and usage.prompt_total and usage.output is not None and step.ttft is not None
        figures = request.attributes
        assert request.name == f"chat {begun.model}"
        assert figures["gen_ai.operation.name"] == "chat"
        assert figures["gen_ai.provider.name"] == "sim"  # the simulator is no provider of the conventions' list
        assert figures["gen_ai.request.model"] == begun.model
        assert figures["gen_ai.response.model"] == begun.model  # what the server's chunks said answered
        assert figures["gen_ai.usage.input_tokens"] == usage.prompt_total
        assert figures["gen_ai.usage.output_tokens"] == usage.output
        assert figures.get("gen_ai.usage.cache_read.input_tokens") == usage.cache_read
        assert figures.get("gen_ai.usage.cache_creation.input_tokens") == usage.cache_write
        assert figures.get("hotloop.usage.uncached_input_tokens") == usage.uncached
        assert figures["gen_ai.response.time_to_first_chunk"] == step.ttft
        assert figures["gen_ai.response.finish_reasons"] == (step.finish_reason,)
        assert figures.get("hotloop.decode.tokens_per_second") == step.decode_tps  # absent when not measured
        assert figures.get("hotloop.decode.measured_by") == ("hotloop" if step.decode_tps is not None else None)
        assert figures["hotloop.model_time"] == step.model_time
        assert request.status != ERROR
    assert steps[1].usage is not None and steps[1].usage.cache_read  # the second request read the first's prefix
    # The tools ran at once: their spans overlap, each with its call's id, status and duration.
    first, second = tools
    assert first.start < second.end and second.start < first.end
    finished = {e.call_id: e for e in events if isinstance(e, ToolFinished)}
    tool_starts = {e.call_id: e for e in events if isinstance(e, ToolStarted)}
    for tool in tools:
        call = finished[tool.attributes["gen_ai.tool.call.id"]]
        assert tool.name == "execute_tool run_shell" and tool.attributes["gen_ai.tool.name"] == "run_shell"
        assert (tool.start, tool.end) == (ns(tool_starts[call.call_id].ts), ns(call.ts))
        assert tool.attributes["hotloop.tool.status"] == call.status == "ok"
        assert tool.attributes["hotloop.tool.duration"] == call.duration
        assert tool.attributes["hotloop.tool.early_dispatch"] == (tool_starts[call.call_id].ts < responses[0].ts)
    # No content unless asked for.
    content = ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.tool.call.arguments")
    assert not [
        name for span in receiver.spans for name in (*content, "gen_ai.tool.call.result") if name in span.attributes
    ]


async def test_captured_content_is_masked_like_the_log(
    isolated_home: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    configure(
        isolated_home,
        {"text": f"the key is {SECRET}"},
        telemetry=f'[telemetry]\notlp_endpoint = "{receiver.url}/v1/traces"\ncapture_content = true\n',
    )
    await run_turn(isolated_home, f"say {SECRET}")
    (turn,) = receiver.named("invoke_agent")
    (request,) = receiver.named("chat ")
    prompt = json.loads(turn.attributes["gen_ai.input.messages"])
    answer = json.loads(request.attributes["gen_ai.output.messages"])
    assert prompt[0]["parts"][0]["content"] == "say [redacted]"
    assert answer[0]["parts"][0]["content"] == "the key is [redacted]"
    assert SECRET not in repr(receiver.spans)


async def test_a_cancelled_step_and_unreported_figures(receiver: Receiver, isolated_home: Path) -> None:
    """A step cut short is an error span; a figure nobody reported is absent, not 0."""
    configure(isolated_home)
    telemetry = Telemetry(f"{receiver.url}/v1/traces", load_config(), notify=lambda event: None)
    now = time.time()
    for event in (
        TurnStarted(turn=1, prompt="p", ts=now),
        StepStarted(turn=1, step=1, provider="openai", model="gpt-x", ts=now + 0.1),
        StepFinished(
            turn=1, step=1, usage=None, ttft=None, decode_tps=None, model_time=0.2, wall=0.2, tool_count=0,
            tool_sum=0, tool_wall=0, finish_reason="", cut="cancelled", ts=now + 0.3,
        ),
        TurnFinished(turn=1, reason="cancelled", steps=1, wall=0.3, ts=now + 0.3),
    ):  # fmt: skip
        telemetry.observe(event)
    await telemetry.close()
    (turn,), (request,) = receiver.named("invoke_agent"), receiver.named("chat ")
    assert turn.status == request.status == ERROR
    assert request.attributes["error.type"] == "cancelled"
    assert request.attributes["gen_ai.provider.name"] == "openai"  # OpenAI's own API: the conventions' name
    assert not [name for name in request.attributes if "usage" in name or "first_chunk" in name]
    assert "gen_ai.response.finish_reasons" not in request.attributes


async def test_side_requests_and_compactions_get_spans_of_their_own(receiver: Receiver, isolated_home: Path) -> None:
    """A pre-warm and a compaction's summary request are `chat` spans with their own figures and kind."""
    configure(isolated_home)
    telemetry = Telemetry(f"{receiver.url}/v1/traces", load_config(), notify=lambda event: None)
    now = time.time()
    usage = UsageLedger(3_000, cache_read=0, cache_write=None, uncached=3_000, output=1)
    summary = UsageLedger(9_000, cache_read=8_960, cache_write=None, uncached=40, output=300)
    for event in (
        SideRequest(kind="pre-warm", why="start", provider="sim", model="m", usage=usage, model_time=0.4, ts=now),
        SideRequest(
            kind="pre-warm", why="idle", provider="sim", model="m", usage=None, model_time=0.1, outcome="cancelled",
            ts=now + 1,
        ),
        Compacted(
            trigger="auto", turns=3, summary="s", provider="sim", model="m", usage=summary, ttft=0.1,
            model_time=2.0, ts=now + 5,
        ),
    ):  # fmt: skip
        telemetry.observe(event)
    await telemetry.close()
    warm, cancelled, compaction = receiver.named("chat ")
    assert (warm.start, warm.end) == (ns(now - 0.4), ns(now))
    assert warm.attributes["hotloop.request.kind"] == "pre-warm" and warm.status != ERROR
    assert (warm.attributes["gen_ai.usage.input_tokens"], warm.attributes["gen_ai.usage.output_tokens"]) == (3_000, 1)
    assert cancelled.status == ERROR and cancelled.attributes["error.type"] == "cancelled"
    assert not [name for name in cancelled.attributes if "usage" in name]
    assert compaction.attributes["hotloop.request.kind"] == "compaction"
    assert compaction.attributes["gen_ai.usage.cache_read.input_tokens"] == 8_960


def run_cli(home: Path, *args: str, env: dict[str, str], code: str = "") -> subprocess.CompletedProcess[str]:
    """`hotloop run` in a process of its own; `code` runs after it, in the same interpreter."""
    script = f"import sys\nfrom hotloop.cli import main\nstatus = main({list(args)!r})\n{code}\nsys.exit(status)\n"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environ |= {"HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data"), **env}
    workspace = home / "ws"
    workspace.mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, "-c", script], cwd=workspace, env=environ, capture_output=True, text=True, timeout=45
    )


def test_nothing_of_the_sdk_loads_or_is_sent_unless_configured(isolated_home: Path, receiver: Receiver) -> None:
    configure(isolated_home, {"text": "done"})
    loaded = "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry.sdk', 'opentelemetry.exporter'))))"
    result = run_cli(isolated_home, "run", "hello", env={}, code=loaded)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1] == "[]"
    assert receiver.posts == 0


def test_the_standard_variable_and_otel_flag_send_spans_from_hotloop_run(
    isolated_home: Path, receiver: Receiver
) -> None:
    configure(isolated_home, {"text": "done"})
    result = run_cli(isolated_home, "run", "--otel", "hello", env={ENV_ENDPOINT: receiver.url})
    assert result.returncode == 0, result.stderr
    assert [span.name for span in receiver.named("invoke_agent")] == ["invoke_agent hotloop"]
    assert len(receiver.named("chat ")) == 1


def test_an_unreachable_collector_is_one_warning_and_the_run_still_succeeds(isolated_home: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    configure(isolated_home, RENDEZVOUS, {"text": "done"})
    began = time.monotonic()
    result = run_cli(isolated_home, "run", "--yes", "--otel", "go", env={ENV_ENDPOINT: f"http://127.0.0.1:{port}"})
    took = time.monotonic() - began
    assert result.returncode == 0, result.stderr
    warnings = [line for line in result.stderr.splitlines() if "telemetry" in line]
    assert len(warnings) == 1 and f"127.0.0.1:{port}/v1/traces" in warnings[0], result.stderr
    assert "Traceback" not in result.stderr and "opentelemetry" not in result.stderr
    assert took < 30  # bounded: the export's own timeout and the close's wait, never a hang


WATCHED = """
import anthropic, openai

chat = openai.OpenAI(api_key="sk-watched-key-0123456789")  # OPENAI_BASE_URL comes from hotloop watch
chat.chat.completions.create(model="sim-balanced", messages=[{"role": "user", "content": "say hello"}])
messages = anthropic.Anthropic(api_key="sk-watched-key-0123456789")
messages.messages.create(model="sim-fast", max_tokens=50, messages=[{"role": "user", "content": "say hi"}])
"""


def test_hotloop_watch_sends_each_watched_conversation_as_spans_of_its_own(
    isolated_home: Path, receiver: Receiver, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """Another agent's traffic, measured by the pass-through: the same spans a session sends, one trace each."""
    from hotloop.cli import main

    (isolated_home / "config.toml").write_text(
        "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
        f'[telemetry]\notlp_endpoint = "{receiver.url}"\n'
    )
    script = tmp_path / "agent.py"
    script.write_text(WATCHED)
    assert main(["watch", "--upstream", "sim", "--json", "--run", sys.executable, str(script)]) == 0
    events = [json.loads(line) for line in capfd.readouterr().out.splitlines()]
    finished = {event["conversation"]: event for event in events if event["type"] == "response_finished"}
    turns = receiver.named("invoke_agent")
    assert sorted(span.attributes["gen_ai.conversation.id"] for span in turns) == sorted(finished)
    requests = receiver.named("chat ")
    assert [span.attributes["gen_ai.response.model"] for span in requests] == ["sim-balanced", "sim-fast"]
    for turn in turns:
        (request,) = [span for span in requests if span.trace_id == turn.trace_id]
        response = finished[turn.attributes["gen_ai.conversation.id"]]
        assert request.parent_id == turn.span_id
        assert request.attributes["gen_ai.usage.input_tokens"] == response["usage"]["prompt_total"]
        assert request.attributes["gen_ai.usage.output_tokens"] == response["usage"]["output"]


def test_hotloop_bench_otel_sends_each_agents_turns_as_a_conversation_of_its_own(
    isolated_home: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from hotloop.cli import main

    (isolated_home / "config.toml").write_text(
        "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"
    )
    monkeypatch.setenv(ENV_ENDPOINT, receiver.url)
    assert main(["bench", "--agents", "2", "--json", "--otel"]) == 0
    level = json.loads(capsys.readouterr().out)["levels"][0]
    turns = receiver.named("invoke_agent")
    # The built-in task: two turns an agent, each agent's under its own key (its requests' routing key too).
    conversations = {turn.attributes["gen_ai.conversation.id"] for turn in turns}
    assert len(turns) == level["turns"] == 4 and len(conversations) == 2
    assert all(str(key).startswith("bench-") for key in conversations)
    assert len(receiver.named("chat ")) == level["steps"]
    assert len(receiver.named("execute_tool ")) > 0
