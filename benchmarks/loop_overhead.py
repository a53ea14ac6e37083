"""hotloop's own time per agent step, against the simulator with every latency at zero.

The simulator runs in a separate process (`hotloop sim serve --no-latency`), so the CPU time
this process spends is the client's. Each run is 20 steps: 19 with a tool call, then the
answer. Two things are measured, interleaved in the same process so machine noise hits both:

- a full step: request building, the SDK request, parsing the stream, running the tool, and
  emitting every event to a session log and the headless printer;
- the bare SDK request underneath: the same request bodies through the same SDK client
  (`client.post`, response drained), with nothing of hotloop's on top.

hotloop's own time is the difference. CPU time includes the kernel's loopback work.
`--protocol anthropic` measures the Anthropic provider and the `anthropic` SDK instead.

    python benchmarks/loop_overhead.py [--rounds N] [--protocol openai|anthropic] [--baseline DIR]

`--baseline DIR` (an earlier checkout) runs both, a round of each in turn, and prints the two.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx2

from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, fan_out
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.headless.printer import Printer
from hotloop.providers.anthropic import AnthropicProvider
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sessions.log import SessionLog

STEPS = 20
RUNS_PER_ROUND = 3


def start_simulator(scenario: Path) -> tuple[subprocess.Popen[str], str]:
    """The simulator in its own process, and its root URL."""
    process = subprocess.Popen(
        [sys.executable, "-m", "hotloop", "sim", "serve", "--no-latency", "--port", "0", "--scenario", str(scenario)],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    return process, line.split(" on ", 1)[1].split(" ", 1)[0].removesuffix("/v1")


class StepClock:
    """Records this process's CPU time for every step."""

    def __init__(self) -> None:
        self.cpu: list[float] = []
        self._started = 0.0

    def __call__(self, event: AgentEvent) -> None:
        if isinstance(event, StepStarted):
            self._started = time.process_time()
        elif isinstance(event, StepFinished):
            self.cpu.append(time.process_time() - self._started)


class Recording:
    """Mixed into a real provider: keeps each request body so the bare SDK can send the same bytes."""

    bodies: list[bytes]

    def request_body(self, request):  # type: ignore[no-untyped-def]
        body = super().request_body(request)  # type: ignore[misc]
        self.bodies.append(body)
        return body


class RecordingOpenAI(Recording, OpenAIChatProvider):
    pass


class RecordingAnthropic(Recording, AnthropicProvider):
    pass


RecordingProvider = RecordingOpenAI | RecordingAnthropic


def recording_provider(protocol: str, root_url: str) -> RecordingProvider:
    if protocol == "anthropic":
        provider: RecordingProvider = RecordingAnthropic(
            ProviderOptions(name="sim", model="sim-balanced", base_url=root_url, max_retries=0)
        )
    else:
        provider = RecordingOpenAI(
            ProviderOptions(name="sim", model="sim-balanced", base_url=f"{root_url}/v1", max_retries=0)
        )
    provider.bodies = []
    return provider


async def hotloop_steps(provider: RecordingProvider, workspace: Path, clock: StepClock) -> None:
    with (
        open(os.devnull, "w") as null,
        SessionLog.create(workspace / "sessions", provider="sim", model="sim-balanced", workspace=workspace) as log,
    ):
        emit = fan_out(Printer(out=null, err=null), log.write, clock)
        agent = Agent(
            provider,
            ToolRegistry(builtin_tools()),
            emit=emit,
            workspace=workspace,
            options=AgentOptions(max_steps=STEPS),
        )
        finished = await agent.run_turn("read the notes, one page per step")
    assert finished.steps == STEPS and finished.reason == "answer", finished


async def bare_sdk_requests(provider: RecordingProvider, bodies: list[bytes]) -> list[float]:
    client = provider._client  # the same SDK client, connection pool and transport
    cpu = []
    for body in bodies:
        started = time.process_time()
        response = await client.post(provider.path, content=body, cast_to=httpx2.Response, stream=True)
        async for _ in response.aiter_bytes():
            pass
        await response.aclose()
        cpu.append(time.process_time() - started)
    return cpu


def workload(root: Path) -> Path:
    (root / "notes.md").write_text("".join(f"Line {n} of the project notes.\n" for n in range(400)))
    steps = [
        {"tool_calls": [{"name": "read_file", "arguments": {"path": "notes.md", "offset": 1 + 20 * n, "limit": 20}}]}
        for n in range(STEPS - 1)
    ]
    scenario = root / "scenario.json"
    scenario.write_text(json.dumps([*steps, {"text": "Read all of it. " * 20}]))
    return scenario


async def measure(rounds: int, protocol: str) -> list[tuple[float, float]]:
    """Per round: (median full step, median bare SDK request), in milliseconds of CPU."""
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        process, root_url = start_simulator(workload(root))
        provider = recording_provider(protocol, root_url)
        try:
            await hotloop_steps(provider, root, StepClock())  # warm-up
            gc.collect()
            gc.freeze()
            for _ in range(rounds):
                clock, bare = StepClock(), []
                for _ in range(RUNS_PER_ROUND):
                    provider.bodies = []
                    await hotloop_steps(provider, root, clock)
                    bare += await bare_sdk_requests(provider, provider.bodies)
                results.append((1000 * statistics.median(clock.cpu), 1000 * statistics.median(bare)))
        finally:
            await provider.aclose()
            process.terminate()
            process.wait()
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rounds", type=int, default=7, help=f"rounds of {RUNS_PER_ROUND} runs of {STEPS} steps (default 7)"
    )
    parser.add_argument("--protocol", choices=("openai", "anthropic"), default="openai")
    parser.add_argument("--baseline", type=Path, help="an earlier checkout of hotloop's source, to compare with")
    args = parser.parse_args()
    if args.baseline is not None:
        compare(args.baseline, args.rounds, args.protocol)
        return
    rounds = asyncio.run(measure(args.rounds, args.protocol))
    full = [f for f, _ in rounds]
    own = [f - b for f, b in rounds]
    bare = [b for _, b in rounds]
    print(
        f"loop overhead ({args.protocol} protocol): {len(rounds)} rounds × {RUNS_PER_ROUND} runs × {STEPS} steps, "
        "simulator at zero latency, CPU per step"
    )
    print(
        f"  hotloop's own time (full step − bare SDK request): median {statistics.median(own):.2f} ms "
        f"(rounds {min(own):.2f}–{max(own):.2f})  target ≤ 3 ms"
    )
    print(
        f"  full step, SDK request included:                   median {statistics.median(full):.2f} ms "
        f"(rounds {min(full):.2f}–{max(full):.2f})"
    )
    print(
        f"  bare {args.protocol + ' SDK request, same bytes:':<44}  median {statistics.median(bare):.2f} ms "
        f"(rounds {min(bare):.2f}–{max(bare):.2f})"
    )


def compare(baseline: Path, rounds: int, protocol: str) -> None:
    """This checkout against `baseline`, a round of each in turn, every round a fresh process of each's own script.

    Each side runs the script of its own checkout (the baseline's agent may take other arguments),
    the baseline's package put on the path under the package's name.
    """
    own: dict[str, list[float]] = {"before": [], "now": []}
    with tempfile.TemporaryDirectory() as root:
        os.symlink(baseline.resolve(), os.path.join(root, "hotloop"))
        sides = {
            "before": (baseline.resolve() / "benchmarks" / Path(__file__).name, root),
            "now": (Path(__file__), None),
        }
        for _ in range(rounds):
            for name, (script, package_root) in sides.items():
                env = {**os.environ, **({"PYTHONPATH": package_root} if package_root else {})}
                done = subprocess.run(
                    [sys.executable, str(script), "--rounds", "1", "--protocol", protocol],
                    env=env, capture_output=True, text=True, check=True,
                )  # fmt: skip
                line = next(line for line in done.stdout.splitlines() if "hotloop's own time" in line)
                own[name].append(float(line.split("median ", 1)[1].split(" ms", 1)[0]))
    print(f"loop overhead ({protocol} protocol), hotloop's own CPU per step, {rounds} interleaved rounds:")
    for name, values in own.items():
        each = " / ".join(f"{value:.2f}" for value in values)
        print(f"  {name:>6}: median {statistics.median(values):.2f} ms ({each})")


if __name__ == "__main__":
    main()
