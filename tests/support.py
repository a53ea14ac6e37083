"""Helpers shared by the tests: simulators, providers, agents and an event recorder."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import anthropic
import openai
import pytest
from aiohttp import web

from hotloop.agent.approvals import Approvals
from hotloop.agent.events import AgentEvent, fan_out
from hotloop.agent.hooks import Hooks
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import Tool, ToolRegistry
from hotloop.core.server_watch import ServerReport
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sessions.log import SessionLog
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import NO_LATENCY, LatencyProfile, SimConfig
from hotloop.sim.scenario import load_scenario

FIXTURES = Path(__file__).parent / "fixtures"
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")

E = TypeVar("E", bound=AgentEvent)
T = TypeVar("T")


def described(condition: Callable[[], object]) -> str:
    """What a wait waits for, for its TimeoutError: the condition's source line."""
    try:
        return inspect.getsource(condition).strip()
    except (OSError, TypeError):
        return repr(condition)


async def wait_until(condition: Callable[[], object], timeout: float = 15.0, what: str | None = None) -> None:
    """Poll `condition` until it holds; a TimeoutError naming `what` (or the condition) after `timeout` seconds.

    Generous because the CI machine has two busy cores: a wait that succeeds returns as soon as it can.
    """
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(f"waited {timeout:g} s for {what or described(condition)}")
        await asyncio.sleep(0.01)


def present(value: T | None) -> T:
    """`value`, which must not be None: for the optional fields of the SDKs' types that a test knows are set."""
    assert value is not None
    return value


def start_sim(config: SimConfig | None = None, **latency: float) -> EmbeddedSimulator:
    config = config or SimConfig()
    config = config.with_latency(**{**vars(NO_LATENCY), **latency})
    return EmbeddedSimulator(config).start()


def scenario_file(tmp_path: Path, steps: Sequence[object]) -> Path:
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(steps))
    return path


def sim_with_scenario(
    tmp_path: Path, steps: Sequence[object], profile: LatencyProfile = NO_LATENCY, max_model_len: int | None = None
) -> EmbeddedSimulator:
    config = SimConfig(scenario=load_scenario(scenario_file(tmp_path, steps)))
    if max_model_len is not None:
        config = replace(config, max_model_len=max_model_len)
    return EmbeddedSimulator(config.with_latency(**vars(profile))).start()


_opened: list[openai.AsyncOpenAI | anthropic.AsyncAnthropic] = []


@pytest.fixture(autouse=True)
async def close_clients() -> AsyncIterator[None]:
    """Closes every SDK client a test opened, inside the test's own event loop (autouse where imported)."""
    yield
    while _opened:
        await _opened.pop().close()


def openai_client(sim: EmbeddedSimulator) -> openai.AsyncOpenAI:
    """The official client on the simulator's OpenAI side, closed after the test by `close_clients`."""
    api = openai.AsyncOpenAI(base_url=sim.base_url, api_key="unused", max_retries=0)
    _opened.append(api)
    return api


def anthropic_client(sim: EmbeddedSimulator) -> anthropic.AsyncAnthropic:
    """The official client on the simulator's Anthropic side, closed after the test by `close_clients`."""
    api = anthropic.AsyncAnthropic(base_url=sim.url, api_key="unused", max_retries=0)
    _opened.append(api)
    return api


def provider_for(sim: EmbeddedSimulator, model: str = "sim-balanced") -> OpenAIChatProvider:
    return OpenAIChatProvider(ProviderOptions(name="sim", model=model, base_url=sim.base_url, max_retries=0))


class Recorder:
    """An event sink that keeps everything, for assertions."""

    def __init__(self) -> None:
        self.events: list[AgentEvent] = []

    def __call__(self, event: AgentEvent) -> None:
        self.events.append(event)

    def of(self, kind: type[E]) -> list[E]:
        return [e for e in self.events if isinstance(e, kind)]


def make_agent(
    sim: EmbeddedSimulator,
    workspace: Path,
    tools: list[Tool] | None = None,
    registry: ToolRegistry | None = None,
    approvals: Approvals | None = None,
    hooks: Hooks | None = None,
    **options: Any,
) -> tuple[Agent, Recorder]:
    """An agent on the simulator with the built-ins plus `tools`, or with `registry` as given; `options` are
    `AgentOptions` fields, the rest as the config's defaults."""
    recorder = Recorder()
    registry = registry or ToolRegistry(builtin_tools() + (tools or []))
    agent = Agent(
        provider_for(sim),
        registry,
        emit=recorder,
        workspace=workspace,
        options=AgentOptions(**options),
        approvals=approvals,
        hooks=hooks,
    )
    return agent, recorder


@asynccontextmanager
async def serving(app: web.Application) -> AsyncIterator[str]:
    """`app` on a free loopback port, over real HTTP; yields its `/v1` base URL."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def serve_events(events: list[bytes], route: str) -> AsyncIterator[str]:
    """A one-route server that streams `events` at `route`, one write each, and yields its `/v1` base URL."""

    async def handler(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in events:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post(route, handler)
    async with serving(app) as url:
        yield url


def killed_mid_answer(home: Path) -> Path:
    """A session whose `hotloop run` was killed with SIGKILL while the answer streamed."""
    scenario = home / "killed.json"
    scenario.write_text(json.dumps([{"text": "word " * 400}, {"text": "Picked up again."}]))
    # 5 ms a token: the 400 words take 2 s to stream, and the kill comes ~20 words in.
    (home / "config.toml").write_text(
        f'[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 5\nscenario = "{scenario}"\n'
    )
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    process = subprocess.Popen(
        [sys.executable, "-m", "hotloop", "run", "talk at length"],
        cwd=home,
        env=environment,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    folder = home / "data" / "sessions"
    deadline = time.monotonic() + 30
    try:
        while True:
            logs = list(folder.glob("*.jsonl")) if folder.is_dir() else []
            if logs and logs[0].read_bytes().count(b'"type":"text_delta"') >= 20:
                break
            if process.poll() is not None or time.monotonic() > deadline:
                state = "exited" if process.returncode is not None else "still running after 30 s"
                raise TimeoutError(f"hotloop run {state} before its log had 20 text deltas (logs: {logs})")
            time.sleep(0.01)
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait()
    [path] = folder.glob("*.jsonl")
    return path


def provider_on(
    sim: EmbeddedSimulator, protocol: str
) -> OpenAIChatProvider | OpenAIResponsesProvider | AnthropicProvider:
    """A provider on the simulator, over OpenAI's Chat Completions, its Responses API (with reasoning, whose
    items go back) or Anthropic's Messages (with thinking, whose signatures go back)."""
    if protocol == "openai-responses":
        return OpenAIResponsesProvider(
            ProviderOptions(name="sim-responses", model="sim-fast", base_url=sim.base_url, max_retries=0),
            reasoning_summary=True,
        )
    if protocol == "anthropic":
        return AnthropicProvider(
            ProviderOptions(name="sim-anthropic", model="sim-fast", base_url=sim.url, max_retries=0),
            thinking_budget=1024,
            max_tokens=4096,
        )
    return OpenAIChatProvider(ProviderOptions(name="sim", model="sim-fast", base_url=sim.base_url, max_retries=0))


def logged_agent(sim: EmbeddedSimulator, protocol: str, workspace: Path, log: SessionLog) -> tuple[Agent, Recorder]:
    """An agent whose events go to `log` as a session's do, keyed by the log's id."""
    recorder = Recorder()
    agent = Agent(
        provider_on(sim, protocol),
        ToolRegistry(builtin_tools()),
        emit=fan_out(recorder, log.write),
        workspace=workspace,
        cache_key=log.id,
    )
    return agent, recorder


def drawn(report: ServerReport) -> str:
    """The server panel as it draws `report`, as text."""
    from hotloop.tui.widgets.server_panel import ServerPanel

    panel = ServerPanel()
    panel.report = report
    return str(panel.render())


def rows(panel: str) -> dict[str, str]:
    """The panel's figures: label → value, two spaces or more between them (a heading's value is "")."""
    return {label: value for line in panel.splitlines()[3:] if line for label, value in [_label_value(line)]}


def _label_value(line: str) -> tuple[str, str]:
    label, _, value = re.sub(r" {2,}", "\0", line.strip(), count=1).partition("\0")
    return label, value
