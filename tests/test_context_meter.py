"""How full the context is: from the server's own window, in the status bar, with one warning near the end."""

from __future__ import annotations

from pathlib import Path

import pytest

from hotloop.agent.events import AgentEvent, StepFinished, StepStarted, TurnStarted
from hotloop.agent.figures import context_use
from hotloop.providers.events import UsageLedger

from tui_support import running_app, wait_until, write_config


def step(turn: int, prompt: int, output: int) -> list[AgentEvent]:
    usage = UsageLedger(prompt_total=prompt, cache_read=None, uncached=None, output=output)
    return [
        TurnStarted(turn=turn, prompt="more"),
        StepStarted(turn=turn, step=1, provider="sim", model="sim-balanced"),
        StepFinished(
            turn=turn,
            step=1,
            usage=usage,
            ttft=0.1,
            decode_tps=90.0,
            model_time=1.0,
            wall=1.0,
            tool_count=0,
            tool_sum=0.0,
            tool_wall=0.0,
            finish_reason="stop",
        ),
    ]


def test_the_meter_names_the_window_as_people_say_it() -> None:
    assert context_use(19_988, 32_768) == "ctx 61% of 32k"
    assert context_use(122_000, 200_000) == "ctx 61% of 200k"
    assert context_use(65_536, 131_072) == "ctx 50% of 128k"
    assert context_use(1_000, 4_096) == "ctx 24% of 4k"


@pytest.mark.parametrize("auto_compact", [True, False])
async def test_the_status_bar_shows_the_servers_window_and_warns_once_near_the_end_unless_it_compacts(
    isolated_home: Path, auto_compact: bool
) -> None:
    write_config(isolated_home)
    with (isolated_home / "config.toml").open("a") as config:
        config.write(f"[context]\nauto_compact = {str(auto_compact).lower()}\n")
    async with running_app(size=(140, 30)) as (app, _):
        window = app.session.context_window()
        assert window == 131_072  # the simulator's max_model_len, as vLLM lists it
        for event in step(1, 40_000, 500):
            app.session.emit(event)
        await wait_until(lambda: app.main.status.context == (40_500, 131_072))
        assert "ctx 31% of 128k" in str(app.main.status.render())
        for event in [*step(2, 107_000, 300), *step(3, 108_000, 300)]:
            app.session.emit(event)
        await wait_until(lambda: app.main.status.context == (108_300, 131_072))

        def warnings() -> list[str]:
            return [str(n.message) for n in app._notifications if "context is" in str(n.message)]

        if auto_compact:  # the next turn compacts first (the meter's update and a warning come in one call)
            assert warnings() == []
            return
        await wait_until(warnings)
        assert warnings() == [  # at step 2, once: step 3 says nothing more
            "the context is 82% full (23,772 tokens left): /compact summarizes it, /new starts a fresh conversation"
        ]


def test_a_hosted_models_window_comes_from_the_price_table_and_a_local_namesake_gets_none() -> None:
    from hotloop.agent.pricing import known_window

    assert known_window("gpt-4o", "https://api.openai.com/v1") == 128_000
    assert known_window("claude-sonnet-4-5", "https://api.anthropic.com") == 200_000
    assert known_window("gpt-4o", "http://127.0.0.1:8000/v1") is None  # a self-hosted server says its own


def test_a_request_past_the_window_is_foretold_before_it_is_sent(
    isolated_home: Path, workspace: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A tool result makes step 2's request longer than the server's window: a warning line says so,
    with an estimate near the count the server then refuses it with, before the refusal."""
    import re

    import hotloop.agent.loop
    from hotloop.cli import main

    (workspace / "big.txt").write_text(Path(hotloop.agent.loop.__file__).read_text()[:6_000])  # code and prose
    read = {"tool_calls": [{"name": "read_file", "arguments": {"path": "big.txt"}}]}
    write_config(isolated_home, [read, {"text": "done"}], sim="max_model_len = 2500\n")
    monkeypatch.chdir(workspace)

    assert main(["run", "read big.txt"]) != 0
    err = capsys.readouterr().err
    warning = re.search(
        r"warning: step 2's request is ≈ ([\d,]+) tokens, more than the 2,500 tokens sim-\S+ holds", err
    )
    # Compacting first fails too (the summary request is this request and an instruction), and says so.
    *_, refused = re.finditer(r"your request has (\d+) input tokens", err)
    assert "compaction (auto, side request) · " in err[: refused.start()]
    assert warning is not None and warning.start() < refused.start()
    estimate, actual = int(warning[1].replace(",", "")), int(refused[1])
    assert actual > 2_500 and abs(estimate - actual) < 0.15 * actual
    assert "step 1's request" not in err  # the first request fit: nothing foretold
