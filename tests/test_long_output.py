"""A long output keeps both ends: the last line (where a command says what failed) reaches the model and the pane."""

from __future__ import annotations

import json
from pathlib import Path

from hotloop.agent.approvals import Approvals
from hotloop.agent.events import ToolFinished, ToolOutput
from hotloop.agent.tools.registry import OUTPUT_LIMIT, cap_output
from hotloop.agent.tools.shell import ShellSettings, shell_tool

from support import make_agent, sim_with_scenario

COMMAND = "seq 1 100000; echo 'FAILED: 3 tests'"


async def test_the_last_line_of_a_long_output_reaches_the_model_through_the_loop(tmp_path: Path) -> None:
    steps = [{"tool_calls": [{"name": "run_shell", "arguments": {"command": COMMAND}}]}, {"text": "3 tests failed"}]
    sim = sim_with_scenario(tmp_path, steps)
    try:
        tools = [shell_tool(ShellSettings(), set())]
        agent, recorder = make_agent(sim, tmp_path, tools, approvals=Approvals(allow_all=True))
        await agent.run_turn("run the tests")
        second = json.loads(sim.server.requests[-1].body)
    finally:
        sim.stop()
    [result] = [message["content"] for message in second["messages"] if message["role"] == "tool"]
    assert result.startswith("exit 0 · ") and result.endswith("\n99999\n100000\nFAILED: 3 tests\n")
    assert "\n1\n2\n3\n" in result and result.count("[output truncated: ") == 1
    [finished] = recorder.of(ToolFinished)
    assert finished.result == result  # what the pane shows once the call is done
    assert "".join(output.text for output in recorder.of(ToolOutput)).endswith("\n100000\nFAILED: 3 tests\n")


def test_any_result_cut_keeps_its_head_and_tail_and_says_how_much_is_gone() -> None:
    text = "".join(f"{n}\n" for n in range(1, 100_001)) + "FAILED: 3 tests\n"
    capped = cap_output(text)
    assert len(capped) <= OUTPUT_LIMIT
    assert capped.startswith("1\n2\n3\n") and capped.endswith("\n100000\nFAILED: 3 tests\n")
    head, rest = capped.split("\n[output truncated: ")
    count, tail = rest.split(" characters left out here]\n")
    assert text.startswith(head) and text.endswith(tail)
    assert int(count.replace(",", "")) == len(text) - len(head) - len(tail)
    assert cap_output("short") == "short" and cap_output("x" * OUTPUT_LIMIT) == "x" * OUTPUT_LIMIT
