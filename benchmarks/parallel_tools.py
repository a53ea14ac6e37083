"""A step with three independent ~1 s tool calls: how long its tool phase takes.

The simulator issues the three calls in one message; the loop runs them concurrently. The
figures come from the loop's own events. Target: tool phase < 1.3 × the slowest call.

    python benchmarks/parallel_tools.py
"""

from __future__ import annotations

import asyncio
import json
import tempfile
from pathlib import Path
from typing import Any

from hotloop.agent.events import AgentEvent, StepFinished, ToolFinished
from hotloop.agent.loop import Agent
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.sim.engine import SimConfig
from hotloop.providers.sim.model import load_scenario
from hotloop.providers.sim.server import EmbeddedSimulator

SECONDS = (1.0, 0.9, 1.1)


async def sleep(args: dict[str, Any], ctx: ToolContext) -> str:
    await asyncio.sleep(args["seconds"])
    return "done"


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        scenario = Path(tmp, "scenario.json")
        calls = [{"name": "sleep", "arguments": {"seconds": s}} for s in SECONDS]
        scenario.write_text(json.dumps([{"tool_calls": calls}, {"text": "done"}]))
        events: list[AgentEvent] = []
        with EmbeddedSimulator(SimConfig(scenario=load_scenario(scenario))) as sim:
            provider = OpenAIChatProvider(name="sim", model="sim-fast", base_url=sim.base_url)
            schema = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}
            tools = ToolRegistry([Tool("sleep", "Sleep.", schema, sleep)])
            await Agent(provider, tools, emit=events.append, workspace=Path(tmp)).run_turn("sleep three times")
            await provider.aclose()
    step = next(e for e in events if isinstance(e, StepFinished))
    slowest = max(e.duration for e in events if isinstance(e, ToolFinished))
    print(f"parallel tools: {step.tool_count} calls of {', '.join(f'{s:g}' for s in SECONDS)} s")
    print(f"  tool phase {step.tool_wall:.3f} s · slowest call {slowest:.3f} s · sum {step.tool_sum:.3f} s")
    print(
        f"  phase / slowest = {step.tool_wall / slowest:.3f} (target < 1.3) · {step.tool_sum / step.tool_wall:.2f}× from parallelism"
    )


if __name__ == "__main__":
    asyncio.run(main())
