"""Helpers shared by the tests: simulators, providers, agents, a watch, an event recorder, and real processes
started as a terminal starts them."""

from __future__ import annotations

import asyncio
import fcntl
import inspect
import json
import os
import pty
import queue
import re
import select
import shutil
import signal
import struct
import subprocess
import sys
import termios
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from pathlib import Path
from typing import IO, Any, TypeVar

import anthropic
import openai
import pytest
from aiohttp import web
from openai.types.chat import ChatCompletionFunctionToolParam

from hotloop import paths
from hotloop.agent.approvals import Approvals
from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, ToolStarted, fan_out
from hotloop.agent.hooks import Hooks
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.core.resumption import Resumption
from hotloop.core.server_watch import ServerReport
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.openai_responses import OpenAIResponsesProvider
from hotloop.sessions.log import SessionLog
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import NO_LATENCY, LatencyProfile, SimConfig
from hotloop.sim.scenario import load_scenario
from hotloop.watch import Watch, upstream_at

FIXTURES = Path(__file__).parent / "fixtures"
KEY_VARIABLES = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "OPENAI_BASE_URL")

# A tool in Chat Completions' form: the simulator's planner calls it for "read README.md".
READ_FILE: ChatCompletionFunctionToolParam = {
    "type": "function",
    "function": {
        "name": "read_file",
        "description": "Read a file",
        "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
    },
}


async def _forever(arguments: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.Event().wait()
    return "never"


# A tool whose call runs until it is cancelled: a step held in its tools.
SLOW_TOOL = Tool("slow", "Takes its time.", {"type": "object", "properties": {}}, _forever, read_only=True)

# What `lines_of` gives once the stream has ended.
ENDED = "(the process ended)"

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


class Seen:
    """A watch's sink: every event with its conversation."""

    def __init__(self) -> None:
        self.events: list[tuple[str, AgentEvent]] = []

    def __call__(self, conversation: str, event: AgentEvent) -> None:
        self.events.append((conversation, event))

    def of(self, kind: type[Any]) -> list[tuple[str, Any]]:
        return [(conversation, event) for conversation, event in self.events if isinstance(event, kind)]

    def steps(self) -> list[str]:
        """The conversation of every finished step, in order."""
        return [conversation for conversation, _ in self.of(StepFinished)]

    def started(self) -> list[str]:
        return [conversation for conversation, _ in self.of(StepStarted)]


@asynccontextmanager
async def watching(sim: EmbeddedSimulator) -> AsyncIterator[tuple[Watch, Seen, str]]:
    """A started watch in front of `sim`, writing to the sessions folder; its sink, and its root URL."""
    seen = Seen()
    watch = Watch(upstream_at(sim.url, "sim"), seen, folder=paths.sessions_dir(), workspace=Path.cwd())
    url = await watch.start()
    try:
        yield watch, seen, url
    finally:
        await watch.aclose()


def as_in_a_terminal() -> None:
    """SIGINT and SIGHUP at their defaults, as a terminal starts a command: a runner started in the background
    passes them on ignored, and an ignored signal stays ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@contextmanager
def in_a_terminal(
    command: list[str], environment: dict[str, str], cwd: Path
) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """`command` started on a new 120x40 xterm-256color pseudo-terminal, as a shell starts it; and the terminal's
    master end, to read what it draws and to type. Killed on the way out if it still runs."""
    master, terminal = pty.openpty()
    fcntl.ioctl(terminal, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    process = subprocess.Popen(
        command,
        env={**environment, "TERM": "xterm-256color"},
        cwd=cwd,
        stdin=terminal,
        stdout=terminal,
        stderr=terminal,
        preexec_fn=as_in_a_terminal,
    )
    os.close(terminal)
    try:
        yield process, master
    finally:
        killed_if_running(process)
        os.close(master)


def read_until(master: int, drawn: bytearray, done: Callable[[], bool], what: str) -> None:
    """Read what the process draws into `drawn` until `done()` holds; 30 s at most without a byte."""
    while not done():
        assert select.select([master], [], [], 30)[0], f"no {what} after 30 s: {drawn[-2000:]!r}"
        drawn += os.read(master, 65536)


def stopped_in_a_terminal(process: subprocess.Popen[bytes], master: int, stop: signal.Signals) -> None:
    """Send `stop`, then read what the process draws, so it never blocks on a full terminal, until it closes its end
    (or 30 s pass without a byte); then wait, 30 s at most, for it to exit."""
    process.send_signal(stop)
    while select.select([master], [], [], 30)[0]:
        try:
            if not os.read(master, 65536):
                break
        except OSError:  # EIO: the process has exited and closed its end
            break
    process.wait(timeout=30)


@contextmanager
def sim_served(*flags: str) -> Iterator[tuple[str, str]]:
    """`hotloop sim serve` answering at once on a free port, `flags` added, in its own process: its banner and its
    `/v1` URL; stopped after."""
    command = [sys.executable, "-m", "hotloop", "sim", "serve", "--port", "0", "--no-latency", *flags]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        banner = process.stdout.readline()
        assert "hotloop sim:" in banner, banner
        yield banner, banner.split(" on ", 1)[1].split(" ", 1)[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


def alive(pid: int) -> bool:
    """Whether `pid` runs: gone or a zombie has ended (a container's init may never reap the orphans it inherits)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:  # gone, or going while we read
        return False


def killed_if_running(process: subprocess.Popen[Any]) -> None:
    """For a test's `finally`: a process that a failed wait left running is killed, never left behind."""
    if process.poll() is None:
        process.kill()
        process.wait()


def communicated(process: subprocess.Popen[str], timeout: float) -> tuple[str, str]:
    """Its stdout and stderr once it exits; past `timeout`, its process group (`start_new_session`) is killed, so
    nothing it started outlives the test."""
    try:
        return process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        process.communicate()
        raise


def lines_of(stream: IO[str]) -> queue.Queue[str]:
    """The stream's lines as they come, so a wait for one has a bound; `ENDED` once the stream ends."""
    lines: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        for line in stream:
            lines.put(line.rstrip("\n"))
        lines.put(ENDED)

    threading.Thread(target=pump, daemon=True).start()
    return lines


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


async def cancelled_in_its_tools(agent: Agent, recorder: Recorder, prompt: str) -> None:
    """`prompt`'s turn, cancelled once a tool of it has started (as Esc cancels it)."""
    before = len(recorder.of(ToolStarted))
    turn = asyncio.create_task(agent.run_turn(prompt))
    await wait_until(lambda: len(recorder.of(ToolStarted)) > before, what="a tool of the turn started")
    turn.cancel()
    await asyncio.gather(turn, return_exceptions=True)


async def resumed_beside(
    sim: EmbeddedSimulator, protocol: str, original: Agent, log: SessionLog, prompt: str, copy: Path
) -> tuple[bytes, Resumption, Agent]:
    """The log copied to `copy` as it stands, then `prompt`'s request from `original` (which is then closed), and an
    agent resumed from the copy: it must send the same bytes for `prompt`."""
    copy.parent.mkdir()
    log.flush()  # the writer thread has the turn: on disk once flush returns
    shutil.copy(log.path, copy)
    sent_before = len(sim.server.requests)
    await original.run_turn(prompt)
    expected = sim.server.requests[sent_before].body
    log.close()
    await original.provider.aclose()
    resumed = Resumption.load(copy, [])
    again, _ = logged_agent(sim, protocol, original.workspace, resumed.log)
    again.restore(resumed.conversation.messages, resumed.conversation.turns, resumed.conversation.warmth)
    return expected, resumed, again


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
