"""`hotloop acp` as an editor runs it: a real subprocess on stdio, driven by the ACP SDK's own client side.

No mocks: the agent is `python -m hotloop acp` with its config and data folder in a temporary home and the
embedded simulator answering; the test is an ACP client (`acp.spawn_agent_process`) that records every
`session/update` and answers `session/request_permission` as a user would. Every wait is bounded, and the
process is ended however a test ends.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from acp import RequestError, spawn_agent_process, text_block
from acp.core import ClientSideConnection
from acp.interfaces import Agent
from acp.schema import (
    AgentMessageChunk,
    AllowedOutcome,
    ContentToolCallContent,
    FileEditToolCallContent,
    PermissionOption,
    PromptResponse,
    RequestPermissionResponse,
    TextContentBlock,
    ToolCallProgress,
    ToolCallStart,
    ToolCallUpdate,
    UsageUpdate,
    UserMessageChunk,
)

from tui_support import FAST_SIM

pytestmark = pytest.mark.timeout(90)
WAIT = 30.0  # seconds any one request may take


class Editor:
    """The client side: what an editor does with an agent's updates and questions."""

    def __init__(self) -> None:
        self.updates: list[Any] = []
        self.answers: list[str] = []  # the option each permission request is answered with, in order
        self.asked: list[tuple[ToolCallUpdate, list[str]]] = []
        self.options: list[list[PermissionOption]] = []  # each question's options, names and all

    async def request_permission(
        self, session_id: str, tool_call: ToolCallUpdate, options: list[PermissionOption], **kwargs: Any
    ) -> RequestPermissionResponse:
        self.asked.append((tool_call, [option.kind for option in options]))
        self.options.append(options)
        self.updates.append(("asked", tool_call.tool_call_id))
        chosen = self.answers.pop(0)
        return RequestPermissionResponse(outcome=AllowedOutcome(outcome="selected", option_id=chosen))

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        self.updates.append(update)

    def on_connect(self, conn: Agent) -> None:
        pass

    def __getattr__(self, name: str) -> Any:  # fs/ and terminal/: hotloop works on the files itself
        raise AttributeError(name)

    def text(self) -> str:
        return "".join(
            u.content.text
            for u in self.updates
            if isinstance(u, AgentMessageChunk) and isinstance(u.content, TextContentBlock)
        )

    def calls(self) -> list[ToolCallStart | ToolCallProgress]:
        return [u for u in self.updates if isinstance(u, ToolCallStart | ToolCallProgress)]


@asynccontextmanager
async def agent_process(home: Path, editor: Editor) -> AsyncIterator[ClientSideConnection]:
    """`hotloop acp` started and initialized with its config and data in `home`; killed however the test ends."""
    environment = {**os.environ, "HOTLOOP_CONFIG": str(home / "config.toml"), "HOTLOOP_DATA_DIR": str(home / "data")}
    with (home / "stderr.log").open("ab") as stderr:
        spawned = spawn_agent_process(
            editor,  # a client needs only the methods the agent calls; the rest are AttributeErrors
            sys.executable,
            "-m",
            "hotloop",
            "acp",
            env=environment,
            cwd=home,
            transport_kwargs={"stderr": stderr.fileno()},
        )
        async with spawned as (conn, process):
            try:
                ready = await asyncio.wait_for(conn.initialize(protocol_version=1), WAIT)
                assert ready.protocol_version == 1 and ready.agent_info is not None
                assert ready.agent_info.name == "hotloop"
                assert ready.agent_capabilities is not None and ready.agent_capabilities.prompt_capabilities
                yield conn
            finally:
                if process.returncode is None:
                    process.kill()
                    await process.wait()


@asynccontextmanager
async def hotloop_acp(home: Path, editor: Editor) -> AsyncIterator[tuple[ClientSideConnection, str, Path]]:
    """`hotloop acp` started, initialized and given a session in a fresh workspace: (connection, session id, cwd)."""
    workspace = home / "project"
    workspace.mkdir(exist_ok=True)
    async with agent_process(home, editor) as conn:
        session = await asyncio.wait_for(conn.new_session(cwd=str(workspace), mcp_servers=[]), WAIT)
        yield conn, session.session_id, workspace


async def prompt(conn: ClientSideConnection, session_id: str, text: str) -> PromptResponse:
    response = await asyncio.wait_for(conn.prompt(session_id=session_id, prompt=[text_block(text)]), WAIT)
    for _ in range(20):  # updates are handled as tasks of their own: let the last ones land
        await asyncio.sleep(0)
    return response


def shape(updates: list[Any], names: dict[str, str]) -> list[str]:
    """The updates as a sequence: `text` for a run of chunks, `read_file pending` for a call's, `usage`."""
    seen: list[str] = []
    for update in updates:
        if isinstance(update, ToolCallStart | ToolCallProgress):
            item = f"{names[update.tool_call_id]} {update.status}"
        elif isinstance(update, UsageUpdate):
            item = "usage"
        else:
            item = "text" if isinstance(update, AgentMessageChunk) else type(update).__name__
        if not seen or item != seen[-1] or item != "text":
            seen.append(item)
    return seen


def logged_total(steps: list[dict[str, Any]], name: str) -> int | None:
    """A figure summed over the logged steps; None if a step's log left it out (not reported)."""
    values = [step["usage"].get(name) for step in steps]
    return None if None in values else sum(values)


@pytest.fixture
def home(isolated_home: Path) -> Path:
    (isolated_home / "config.toml").write_text(FAST_SIM)
    return isolated_home


def logged_steps(home: Path) -> list[dict[str, Any]]:
    (log,) = (home / "data" / "sessions").glob("*.jsonl")
    lines = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    return [line for line in lines if line.get("type") == "step_finished"]


async def test_a_turn_streams_its_tool_calls_and_answer_in_order(home: Path) -> None:
    editor = Editor()
    async with hotloop_acp(home, editor) as (conn, session_id, workspace):
        (workspace / "hello.txt").write_text("hello from the file\n")
        response = await prompt(conn, session_id, "read hello.txt then list the folder")
    assert response.stop_reason == "end_turn"
    calls = editor.calls()
    started = {c.tool_call_id: c for c in calls if isinstance(c, ToolCallStart)}
    kinds = sorted((c.title.split()[0], c.kind) for c in started.values())
    assert kinds == [("list_dir", "read"), ("read_file", "read")]
    read = next(c for c in started.values() if c.title.startswith("read_file"))
    assert read.locations is not None and read.locations[0].path == str((workspace / "hello.txt").resolve())
    for call_id in started:  # each call: announced, started, then finished, in that order
        statuses = [c.status for c in calls if c.tool_call_id == call_id and c.status is not None]
        assert statuses == ["pending", "in_progress", "completed"]
    finished = next(c for c in calls if c.tool_call_id == read.tool_call_id and c.status == "completed")
    assert finished.content is not None and isinstance(finished.content[-1], ContentToolCallContent)
    assert isinstance(finished.content[-1].content, TextContentBlock)
    assert "hello from the file" in finished.content[-1].content.text
    # Each step in order: its text, its call announced, started and finished, the context used; then the answer.
    names = {c.tool_call_id: c.title.split()[0] for c in started.values()}
    call = "{} {}".format
    assert shape(editor.updates, names) == [
        "text", call("read_file", "pending"), call("read_file", "in_progress"), call("read_file", "completed"), "usage",
        "text", call("list_dir", "pending"), call("list_dir", "in_progress"), call("list_dir", "completed"), "usage",
        "text", "usage",
    ]  # fmt: skip
    assert "## Results for: read hello.txt then list the folder" in editor.text()
    # The turn's usage: the draft field and hotloop's ledger, equal to what the session log holds.
    steps = logged_steps(home)
    assert response.usage is not None
    assert response.usage.input_tokens == logged_total(steps, "prompt_total")
    assert response.usage.output_tokens == logged_total(steps, "output")
    assert response.usage.total_tokens == response.usage.input_tokens + response.usage.output_tokens
    assert response.usage.cached_read_tokens == logged_total(steps, "cache_read")
    assert response.usage.cached_write_tokens == logged_total(steps, "cache_write")
    assert response.field_meta is not None
    ledger = response.field_meta["hotloop"]
    figures = ("prompt_total", "cache_read", "cache_write", "uncached", "output", "reasoning")
    # Step by step, the figures the log holds and no other: one not reported is left out, never sent as 0.
    assert [{k: v for k, v in s.items() if k in figures} for s in ledger["steps"]] == [s["usage"] for s in steps]
    assert ledger["turn"] == {name: total for name in figures if (total := logged_total(steps, name)) is not None}
    # The simulator has no price: no dollars are said, rather than $0.
    assert "dollars" not in ledger["turn"] and not any("dollars" in step for step in ledger["steps"])


async def test_a_write_waits_for_permission_rejected_then_allowed(home: Path) -> None:
    editor = Editor()
    async with hotloop_acp(home, editor) as (conn, session_id, workspace):
        editor.answers = ["reject_once"]
        rejected = await prompt(conn, session_id, 'write "a first note" to notes.txt')
        assert rejected.stop_reason == "end_turn"
        assert not (workspace / "notes.txt").exists()
        editor.answers = ["allow_once"]
        allowed = await prompt(conn, session_id, 'write "a second note" to notes.txt')
        assert allowed.stop_reason == "end_turn"
        assert (workspace / "notes.txt").read_text().strip() == "a second note"
    assert len(editor.asked) == 2 and not editor.answers
    for tool_call, options in editor.asked:
        assert options[0] == "allow_once" and "reject_once" in options and "reject_always" in options
        # The question names a call the editor already knows, with its diff.
        index = editor.updates.index(("asked", tool_call.tool_call_id))
        (announced,) = [
            u
            for u in editor.updates[:index]
            if isinstance(u, ToolCallStart) and u.tool_call_id == tool_call.tool_call_id
        ]
        assert announced.kind == "edit" and announced.status == "pending"
        assert announced.content is not None and isinstance(announced.content[0], FileEditToolCallContent)
        assert announced.content[0].path == str((workspace / "notes.txt").resolve())
    statuses = [c.status for c in editor.calls() if c.status in ("completed", "failed")]
    assert statuses == ["failed", "completed"]


async def test_cancel_ends_the_turn_in_flight(home: Path) -> None:
    (home / "config.toml").write_text(FAST_SIM.replace("decode_ms_per_token = 0", "decode_ms_per_token = 5"))
    editor = Editor()
    async with hotloop_acp(home, editor) as (conn, session_id, _):
        running = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block("write 2000 words")]))
        try:
            async with asyncio.timeout(WAIT):
                while not editor.text():
                    await asyncio.sleep(0.01)
            await conn.cancel(session_id=session_id)
            cancelled = await asyncio.wait_for(running, WAIT)
        finally:
            running.cancel()
        assert cancelled.stop_reason == "cancelled"
        assert len(editor.text().split()) < 1500  # cut short, not answered in full
        again = await prompt(conn, session_id, "hello")  # the session goes on
        assert again.stop_reason == "end_turn"
    (cut, *_) = logged_steps(home)
    assert cut["cut"] == "cancelled"


async def test_hostile_text_passes_as_data(home: Path) -> None:
    hostile = 'say \x1b[31mred\x1b[0m [bold]markup[/bold] </script> {"jsonrpc": "2.0"} \u202e'
    editor = Editor()
    async with hotloop_acp(home, editor) as (conn, session_id, _):
        response = await prompt(conn, session_id, hostile)
        assert response.stop_reason == "end_turn"
        with pytest.raises(RequestError):
            await asyncio.wait_for(conn.prompt(session_id="no such session", prompt=[text_block("hi")]), WAIT)
    answer = editor.text()
    for piece in ("[bold]markup[/bold]", "</script>", '{"jsonrpc": "2.0"}'):
        assert piece in answer


def logged_events(home: Path) -> list[dict[str, Any]]:
    (log,) = (home / "data" / "sessions").glob("*.jsonl")
    return [json.loads(line) for line in log.read_text().splitlines()[1:] if line.strip()]


def replay_shape(updates: list[Any]) -> list[str]:
    """A replay as a sequence: `user: …` per prompt, `text` per run of chunks, `write_file completed` per call."""
    seen: list[str] = []
    for update in updates:
        if isinstance(update, UserMessageChunk) and isinstance(update.content, TextContentBlock):
            item = f"user: {update.content.text}"
        elif isinstance(update, ToolCallStart):
            item = f"{update.title.split()[0]} {update.status}"
        elif isinstance(update, AgentMessageChunk):
            item = "text"
        else:
            item = type(update).__name__
        if not seen or item != seen[-1]:
            seen.append(item)
    return seen


async def test_a_session_is_listed_and_loaded_in_a_new_process_with_its_history(home: Path) -> None:
    (home / "config.toml").write_text(FAST_SIM.replace("decode_ms_per_token = 0", "decode_ms_per_token = 5"))
    editor = Editor()
    async with hotloop_acp(home, editor) as (conn, session_id, workspace):
        editor.answers = ["allow_once"]
        allowed = await prompt(conn, session_id, 'write "a first note" to notes.txt')
        editor.answers = ["reject_once"]
        rejected = await prompt(conn, session_id, 'write "a second note" to notes.txt')
        said = len(editor.text())
        running = asyncio.ensure_future(conn.prompt(session_id=session_id, prompt=[text_block("write 2000 words")]))
        try:
            async with asyncio.timeout(WAIT):
                while len(editor.text()) <= said:
                    await asyncio.sleep(0.01)
            await conn.cancel(session_id=session_id)
            cancelled = await asyncio.wait_for(running, WAIT)
        finally:
            running.cancel()
    assert (allowed.stop_reason, rejected.stop_reason, cancelled.stop_reason) == ("end_turn", "end_turn", "cancelled")
    assert (workspace / "notes.txt").read_text().strip() == "a first note"
    assert allowed.field_meta is not None
    hotloop_id = allowed.field_meta["hotloop"]["session"]  # the saved session this one writes to
    steps_before = logged_steps(home)

    later = Editor()
    async with agent_process(home, later) as conn:
        listing = await asyncio.wait_for(conn.list_sessions(cwd=str(workspace)), WAIT)
        assert [(s.session_id, s.cwd) for s in listing.sessions] == [(hotloop_id, str(workspace))]
        assert listing.sessions[0].title and listing.sessions[0].updated_at
        elsewhere = await asyncio.wait_for(conn.list_sessions(cwd=str(home)), WAIT)
        assert elsewhere.sessions == []
        loaded = await asyncio.wait_for(conn.load_session(cwd=str(workspace), session_id=hotloop_id), WAIT)
        replay = list(later.updates)  # every update of the history came before the answer
        assert loaded is not None and loaded.field_meta is not None and loaded.config_options
        assert replay_shape(replay)[:8] == [
            'user: write "a first note" to notes.txt', "text", "write_file completed", "text",
            'user: write "a second note" to notes.txt', "text", "write_file failed", "text",
        ]  # fmt: skip
        assert replay_shape(replay)[8:10] == ["user: write 2000 words", "text"]
        written = next(u for u in replay if isinstance(u, ToolCallStart) and u.status == "completed")
        assert written.content is not None and isinstance(written.content[0], FileEditToolCallContent)
        assert written.content[0].new_text.strip() == "a first note"
        # The ledger of the whole session, as its log holds it, step by step.
        figures = ("prompt_total", "cache_read", "cache_write", "uncached", "output", "reasoning")
        ledger = loaded.field_meta["hotloop"]
        assert [{k: v for k, v in s.items() if k in figures} for s in ledger["steps"]] == [
            s["usage"] or {}
            for s in steps_before  # the cancelled step reported none: none is said
        ]
        assert [s.get("cut") for s in ledger["steps"]][-1] == "cancelled"
        # The session goes on: its log appended, the same cache key.
        went_on = await prompt(conn, hotloop_id, "hello again")
        assert went_on.stop_reason == "end_turn"
        assert went_on.field_meta is not None and went_on.field_meta["hotloop"]["session"] == hotloop_id
    steps = logged_steps(home)  # one log still: the same session's
    assert len(steps) > len(steps_before) and steps[: len(steps_before)] == steps_before
    turns = [e["prompt"] for e in logged_events(home) if e["type"] == "turn_started"]
    assert turns[-1] == "hello again" and len(turns) == 4


def option(options: list[Any], option_id: str) -> Any:
    return next(o for o in options if o.id == option_id)


async def test_config_options_switch_tier_model_and_read_only(home: Path) -> None:
    editor = Editor()
    async with agent_process(home, editor) as conn:
        workspace = home / "project"
        workspace.mkdir()
        new = await asyncio.wait_for(conn.new_session(cwd=str(workspace), mcp_servers=[]), WAIT)
        session_id = new.session_id
        assert new.config_options is not None and new.modes is not None
        assert option(new.config_options, "tier").current_value == "balanced"
        assert option(new.config_options, "model").current_value == "sim:sim-balanced"
        assert option(new.config_options, "mode").current_value == "ask" and new.modes.current_mode_id == "ask"
        tiers = [o.value for o in option(new.config_options, "tier").options]
        assert {"fast", "balanced", "strong", "auto"} <= set(tiers)
        await prompt(conn, session_id, "hello")
        switched = await asyncio.wait_for(
            conn.set_config_option(config_id="tier", session_id=session_id, value="strong"), WAIT
        )
        assert option(switched.config_options, "model").current_value == "sim:sim-strong"
        await prompt(conn, session_id, "hello")
        await asyncio.wait_for(
            conn.set_config_option(config_id="model", session_id=session_id, value="sim:sim-fast"), WAIT
        )
        await prompt(conn, session_id, "hello")
        with pytest.raises(RequestError):
            await asyncio.wait_for(conn.set_config_option(config_id="tier", session_id=session_id, value="x"), WAIT)
        # Read-only: a write refused without a question.
        await asyncio.wait_for(conn.set_config_option(config_id="mode", session_id=session_id, value="read-only"), WAIT)
        refused = await prompt(conn, session_id, 'write "a note" to notes.txt')
        assert refused.stop_reason == "end_turn" and not (workspace / "notes.txt").exists()
        assert editor.asked == []
        # Back to asking, as a session mode: the write is put to the user.
        await asyncio.wait_for(conn.set_session_mode(session_id=session_id, mode_id="ask"), WAIT)
        editor.answers = ["allow_once"]
        await prompt(conn, session_id, 'write "a note" to notes.txt')
        assert len(editor.asked) == 1 and (workspace / "notes.txt").read_text().strip() == "a note"
    models = [e["model"] for e in logged_events(home) if e["type"] == "step_started"]
    assert models[:3] == ["sim-balanced", "sim-strong", "sim-fast"]
    statuses = [c.status for c in editor.calls() if c.status in ("completed", "failed")]
    assert statuses == ["failed", "completed"]
