"""A step with three independent ~1 s tool calls: how long its tool phase takes.

The simulator issues the three calls in one message; the loop runs them concurrently. Two
cases: an in-process tool that sleeps, and the real `run_shell` running `sleep` in three
processes (allowed up front, as `--yes` does). The figures come from the loop's own events.
Target: tool phase < 1.3 × the slowest call.

    python benchmarks/parallel_tools.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hotloop.agent.approvals import Approvals
from hotloop.agent.events import AgentEvent, StepFinished, ToolFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.agent.tools.shell import ShellSettings, shell_tool
from hotloop.providers.base import ProviderOptions
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import SimConfig
from hotloop.sim.scenario import load_scenario

SECONDS = (1.0, 0.9, 1.1)
SCHEMA = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}


async def sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.sleep(args["seconds"])
    return "done"


async def measure(name: str, tool: Tool, calls: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp, "scenario.json")
        scenario.write_text(json.dumps([{"tool_calls": calls}, {"text": "done"}]))
        events: list[AgentEvent] = []
        with EmbeddedSimulator(SimConfig(scenario=load_scenario(scenario))) as sim:
            provider = OpenAIChatProvider(ProviderOptions(name="sim", model="sim-fast", base_url=sim.base_url))
            agent = Agent(
                provider,
                ToolRegistry([tool]),
                emit=events.append,
                workspace=Path(tmp),
                approvals=Approvals(allow_all=True),
            )
            await agent.run_turn("three at once")
            await provider.aclose()
    step = next(e for e in events if isinstance(e, StepFinished))
    slowest = max(e.duration for e in events if isinstance(e, ToolFinished))
    print(f"{name}: {step.tool_count} calls of {', '.join(f'{s:g}' for s in SECONDS)} s")
    print(f"  tool phase {step.tool_wall:.3f} s · slowest call {slowest:.3f} s · sum {step.tool_sum:.3f} s")
    print(
        f"  phase / slowest = {step.tool_wall / slowest:.3f} (target < 1.3) · "
        f"{step.tool_sum / step.tool_wall:.2f}× from parallelism"
    )


async def main() -> None:
    sleeper = Tool("sleep", "Sleep.", SCHEMA, sleep)
    await measure("in-process tool", sleeper, [{"name": "sleep", "arguments": {"seconds": s}} for s in SECONDS])
    shell = shell_tool(ShellSettings(), set())
    commands = [{"name": "run_shell", "arguments": {"command": f"sleep {s}; echo done"}} for s in SECONDS]
    await measure("run_shell, three processes", shell, commands)


if __name__ == "__main__":
    asyncio.run(main())
