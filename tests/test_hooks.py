"""Hooks: commands the user configures around tool calls, prompts and stops, read as Claude Code reads them."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path

import msgspec
import pytest

from hotloop.agent.hooks import MAX_REASON, Hook, Hooks
from hotloop.agent.loop import Agent

from support import Recorder, alive, make_agent, sim_with_scenario, wait_until


def hooks(workspace: Path, *entries: Hook, hidden: set[str] | None = None) -> Hooks:
    return Hooks(entries, workspace, hidden or set(), session_id="s-1")


async def test_a_hook_that_exits_0_allows_and_says_how_long_it_took(tmp_path: Path) -> None:
    outcome = await hooks(tmp_path, Hook(event="PreToolUse", command="true")).pre_tool_use("read_file", "{}")
    assert not outcome.denied and outcome.decision == "" and outcome.warnings == []
    assert len(outcome.runs) == 1 and 0 < outcome.runs[0].seconds <= outcome.seconds


async def test_exit_2_denies_with_stderr_as_the_reason_made_inert(tmp_path: Path) -> None:
    command = r"printf 'no writes here \033]52;c;aGk=\007 \377' >&2; exit 2"
    outcome = await hooks(tmp_path, Hook(event="PreToolUse", command=command)).pre_tool_use("write_file", "{}")
    assert outcome.denied and outcome.reason == "no writes here ␛]52;c;aGk=␇ \ufffd"


async def test_a_json_answer_denies_asks_or_blocks_the_prompt(tmp_path: Path) -> None:
    deny = {"hookSpecificOutput": {"permissionDecision": "deny", "permissionDecisionReason": "not on main"}}
    ask = {"hookSpecificOutput": {"permissionDecision": "ask"}}
    both = hooks(
        tmp_path,
        Hook(event="PreToolUse", matcher="run_shell", command=f"echo '{json.dumps(ask)}'"),
        Hook(event="PreToolUse", matcher="run_shell", command=f"echo '{json.dumps(deny)}'"),
    )
    outcome = await both.pre_tool_use("run_shell", '{"command": "git push"}')
    assert [run.decision for run in outcome.runs] == ["ask", "deny"]
    assert outcome.denied and outcome.reason == "not on main"  # deny outranks ask
    block = {"decision": "block", "reason": "no secrets in prompts"}
    prompt = hooks(tmp_path, Hook(event="UserPromptSubmit", command=f"echo '{json.dumps(block)}'"))
    outcome = await prompt.user_prompt_submit("my key is sk-123")
    assert outcome.denied and outcome.reason == "no secrets in prompts"
    plain = hooks(tmp_path, Hook(event="Stop", command="echo done; echo '{not json'"))
    assert (await plain.stop()).decision == ""


async def test_a_failing_hook_is_a_warning_and_stops_nothing(tmp_path: Path) -> None:
    failing = hooks(tmp_path, Hook(event="PostToolUse", command="echo broken >&2; exit 3"))
    outcome = await failing.post_tool_use("grep", "{}", "result")
    assert not outcome.denied and outcome.warnings == [
        "PostToolUse hook `echo broken >&2; exit 3` failed with exit status 3: broken"
    ]


async def test_the_matcher_picks_the_tools(tmp_path: Path) -> None:
    def marking(name: str, matcher: str) -> Hook:
        return Hook(event="PreToolUse", matcher=matcher, command=f"echo x >> {name}")

    set_up = hooks(
        tmp_path,
        marking("any", ""),
        marking("star", "*"),
        marking("writes", "edit_file|write_file"),
        marking("reads", "read_*"),
        marking("mcp", "mcp__.*"),
        Hook(event="PostToolUse", command="echo x >> post"),
    )
    for tool in ("read_file", "write_file", "mcp__db__query", "write_files"):
        await set_up.pre_tool_use(tool, "{}")
    counts = {path.name: len(path.read_text().split()) for path in tmp_path.iterdir() if path.is_file()}
    assert counts == {"any": 4, "star": 4, "writes": 1, "reads": 1, "mcp": 1}
    assert not Hook(event="Stop", command="true").matches("read_file")  # a Stop hook is no tool's


async def test_a_hook_past_its_timeout_is_killed_with_its_children_and_warned_about(tmp_path: Path) -> None:
    slow = Hook(event="PreToolUse", command="sleep 30 & echo $! > child; wait", timeout=0.5)
    outcome = await hooks(tmp_path, slow).pre_tool_use("read_file", "{}")
    assert not outcome.denied and outcome.seconds < 5
    assert outcome.warnings == [
        "PreToolUse hook `sleep 30 & echo $! > child; wait` timed out after 0.5 s and was killed"
    ]
    child = int((tmp_path / "child").read_text())
    await wait_until(lambda: not alive(child), what="the hook's child to end")


async def test_a_cancelled_turn_kills_its_hooks(tmp_path: Path) -> None:
    running = asyncio.create_task(
        hooks(tmp_path, Hook(event="Stop", command="echo $$ > pid; exec sleep 30", timeout=60)).stop()
    )
    pid_file = tmp_path / "pid"
    await wait_until(lambda: pid_file.exists() and pid_file.read_text().strip(), what="the hook to start")
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    pid = int(pid_file.read_text())
    await wait_until(lambda: not alive(pid), what="the hook to end")


async def test_the_event_arrives_as_claude_code_json_on_stdin(tmp_path: Path) -> None:
    recording = hooks(
        tmp_path,
        *(
            Hook(event=event, command=f"cat > {event}.json")
            for event in ("PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop")
        ),
    )
    await recording.pre_tool_use("read_file", '{"path": "README.md"}')
    await recording.post_tool_use("read_file", '{"path": "README.md"}', "# Demo\n")
    await recording.user_prompt_submit("fix the bug ✓")
    await recording.stop()
    common = {"session_id": "s-1", "cwd": str(tmp_path)}
    read = {"tool_name": "read_file", "tool_input": {"path": "README.md"}}

    def received(event: str) -> object:
        return json.loads((tmp_path / f"{event}.json").read_text())

    assert received("PreToolUse") == {**common, "hook_event_name": "PreToolUse", **read}
    assert received("PostToolUse") == {**common, "hook_event_name": "PostToolUse", **read, "tool_response": "# Demo\n"}
    assert received("UserPromptSubmit") == {**common, "hook_event_name": "UserPromptSubmit", "prompt": "fix the bug ✓"}
    assert received("Stop") == {**common, "hook_event_name": "Stop", "stop_hook_active": False}


async def test_a_hook_runs_in_the_workspace_with_the_allowlist_and_the_desktop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kept_out = {
        "OPENAI_API_KEY": "sk-secret",
        "GITHUB_PAT": "github-pat-value",
        "DATABASE_URL": "postgres://app:hunter2x@db/app",
        "NPM_AUTH": "npm-auth-value",
        "DB_CREDENTIALS": "db-credentials-value",
        "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
        "HOTLOOP_HOOK_UNLISTED": "unlisted-value",
    }
    for name, value in kept_out.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("DISPLAY", ":7")  # a hook may notify the user
    monkeypatch.setenv("LANG", "C.UTF-8")
    probe = hooks(tmp_path, Hook(event="Stop", command="env > env.txt; pwd > pwd.txt"), hidden={"OPENAI_API_KEY"})
    await probe.stop()
    environment = (tmp_path / "env.txt").read_text()
    assert not [value for value in kept_out.values() if value in environment]
    assert {"DISPLAY=:7", "LANG=C.UTF-8", f"PATH={os.environ['PATH']}"} <= set(environment.splitlines())
    assert (tmp_path / "pwd.txt").read_text().strip() == os.path.realpath(tmp_path)


async def test_a_flood_of_output_is_capped(tmp_path: Path) -> None:
    flood = Hook(event="PreToolUse", command="head -c 1000000 /dev/zero | tr '\\0' x >&2; exit 2")
    outcome = await hooks(tmp_path, flood).pre_tool_use("grep", "{}")
    assert outcome.denied and len(outcome.reason) == MAX_REASON + len(" …[cut]")


def test_the_config_shape_is_checked() -> None:
    hook = msgspec.convert({"event": "PreToolUse", "matcher": "edit_file|write_file", "command": "./check"}, Hook)
    assert hook.timeout == 10 and hook.matches("edit_file") and not hook.matches("edit_files")
    for wrong in (
        {"event": "BeforeTool", "command": "x"},
        {"event": "Stop", "command": "x", "when": "always"},
        {"event": "Stop", "command": ""},
        {"event": "Stop", "command": "x", "timeout": 0},
        {"event": "PreToolUse", "command": "x", "matcher": "(unclosed"},
    ):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert(wrong, Hook)


# -- in the loop ---------------------------------------------------------------------------


async def run_agent(
    tmp_path: Path, steps: Sequence[object], *entries: Hook, prompt: str = "go"
) -> tuple[Agent, Recorder]:
    sim = sim_with_scenario(tmp_path, steps)
    try:
        agent, recorder = make_agent(sim, tmp_path, hooks=hooks(tmp_path, *entries))
        await asyncio.wait_for(agent.run_turn(prompt), 30)
        await agent.provider.aclose()
    finally:
        sim.stop()
    return agent, recorder


async def test_a_pre_tool_use_denial_is_the_calls_error_result_and_every_run_is_logged(tmp_path: Path) -> None:
    from hotloop.agent.events import HookRan, ToolFinished, TurnFinished
    from hotloop.sessions.waterfall import render, waterfalls

    (tmp_path / "a.txt").write_text("a")
    steps = [{"tool_calls": [{"name": "read_file", "arguments": {"path": "a.txt"}}]}, {"text": "ok"}]
    deny = Hook(event="PreToolUse", matcher="read_*", command="echo 'not today' >&2; exit 2")
    stop = Hook(event="Stop", command="sleep 0.2")
    _, recorder = await run_agent(tmp_path, steps, deny, stop)
    (finished,) = recorder.of(ToolFinished)
    assert finished.status == "error" and finished.result == "error: a PreToolUse hook denied this call: not today"
    ran = recorder.of(HookRan)
    assert [(r.hook_event, r.decision, bool(r.call_id)) for r in ran] == [
        ("PreToolUse", "deny", True),
        ("Stop", "", False),
    ]
    assert recorder.of(TurnFinished)[0].reason == "answer"
    (turn,) = waterfalls(recorder.events)
    hook_bars = [bar for bar in turn.bars if bar.kind == "hook"]
    assert [bar.label for bar in hook_bars] == ["  hook PreToolUse", "  hook Stop"]
    assert hook_bars[1].end - hook_bars[1].start >= 0.2  # the hook's own time, drawn
    assert "▒ hook" in render(turn, 100, None).plain


async def test_a_blocked_prompt_never_reaches_the_model(tmp_path: Path) -> None:
    from hotloop.agent.events import Notice, TurnStarted

    block = Hook(event="UserPromptSubmit", command='echo \'{"decision": "block", "reason": "no secrets"}\'')
    agent, recorder = await run_agent(tmp_path, [{"text": "never"}], block, prompt="my password is hunter2")
    assert recorder.of(TurnStarted) == [] and agent.messages == [] and agent.turn == 0
    assert [n.message for n in recorder.of(Notice)] == ["a hook blocked the prompt: no secrets"]
