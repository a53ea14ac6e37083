"""Hooks: the user's commands, run at points of the loop, that may stop what is about to happen.

The shape Claude Code, Codex, Crush and Goose share. Each `[[hooks]]` entry names an event
(`PreToolUse`, `PostToolUse`, `UserPromptSubmit`, `Stop`), for the tool events a `matcher` on the
tool's name (a regular expression over the whole name like `edit_file|write_file`, or a glob like
`read_*`; empty or `*` for every tool), a `command` and a `timeout`. The command runs with
`/bin/sh -c` in the workspace, in a process group of its own, and gets the event as JSON on stdin
(Claude Code's fields). Its environment is run_shell's allowlist (`secret_policy.allowed_environment`:
PATH, HOME, the locale, toolchain roots, …) plus the desktop session (DISPLAY, DBUS_SESSION_BUS_ADDRESS,
…), so a hook can notify the user; never a credential, nor an agent's socket. A hook is the
user's own command, but it often runs what the model wrote (tests after an edit), so it gets no
more than that; one that needs a secret reads it from a file of its own.

What it answers, as Claude Code reads it: exit 0 is fine, unless stdout holds a JSON decision
(`{"decision": "block", "reason": …}`, or `hookSpecificOutput.permissionDecision` `deny` or
`ask`); exit 2 blocks, stderr saying why; any other exit, a timeout (the group is killed) or a
command that can't start is a warning, and what was about to happen goes on. Matching hooks
run concurrently. Their output is the hook's, so it is capped, decoded with bad UTF-8 replaced,
and made inert before it is shown or handed to the model.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import json
import os
import re
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.text import inert
from hotloop.secret_policy import DESKTOP, allowed_environment

Event = Literal["PreToolUse", "PostToolUse", "UserPromptSubmit", "Stop"]
# "": the hook had no say; "allow" and "ask" are PreToolUse's permission decisions; "deny" stops it.
Decision = Literal["", "allow", "ask", "deny"]
TOOL_EVENTS = ("PreToolUse", "PostToolUse")
EXIT_BLOCK = 2  # Claude Code's exit status for "no", with stderr as the reason
MAX_OUTPUT = 64 * 1024  # bytes kept of each of a hook's stdout and stderr; the rest is read and dropped
MAX_REASON = 2_000  # characters of a reason or a warning handed on
_ORDER: tuple[Decision, ...] = ("", "allow", "ask", "deny")  # weakest first: the strongest any hook made wins


class Hook(Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A `[[hooks]]` entry: run `command` at `event`, for the tools `matcher` names."""

    event: Event
    matcher: str = ""
    command: Annotated[str, Meta(min_length=1, extra={"problem": "must not be empty"})]
    timeout: Annotated[float, Meta(gt=0, extra={"problem": "must be positive"})] = 10.0

    def __post_init__(self) -> None:
        # msgspec turns a ValueError into a validation error, which the config names as its own.
        try:
            re.compile(self.matcher)
        except re.error as error:
            if not _is_glob(self.matcher):
                raise ValueError(f"{self.matcher!r} is neither a regular expression nor a glob: {error}") from None

    def matches(self, tool: str) -> bool:
        """Whether this hook is for `tool` (hooks of other events are for none)."""
        if self.event not in TOOL_EVENTS:
            return False
        if self.matcher in ("", "*") or fnmatch.fnmatchcase(tool, self.matcher):
            return True
        with contextlib.suppress(re.error):
            return re.fullmatch(self.matcher, tool) is not None
        return False


@dataclass(frozen=True)
class HookRun:
    """One hook's run: how long it took, what it decided and why, and what went wrong if anything did."""

    hook: Hook
    seconds: float
    decision: Decision = ""
    reason: str = ""  # why it denied or asked, for the model or the user
    warning: str = ""  # a failure that stopped nothing: a bad exit, a timeout, a command that didn't start


@dataclass(frozen=True)
class HookOutcome:
    """Every matching hook's run for one event; `seconds` is their wall time (they run together)."""

    runs: tuple[HookRun, ...] = ()
    seconds: float = 0.0

    @property
    def decision(self) -> Decision:
        """The strongest decision any hook made: deny, then ask, then allow."""
        return max((run.decision for run in self.runs), key=_ORDER.index, default="")

    @property
    def denied(self) -> bool:
        return self.decision == "deny"

    @property
    def reason(self) -> str:
        """Why, from the hooks that made the outcome's decision."""
        decision = self.decision
        return "; ".join(run.reason for run in self.runs if run.decision == decision and run.reason)

    @property
    def warnings(self) -> list[str]:
        return [run.warning for run in self.runs if run.warning]


class Hooks:
    """The configured hooks of one session, run for the events of its loop.

    `session_id` is sent to every hook; set it once the session has one (its log's id).
    With no hook for an event, its method returns an empty outcome at once.
    """

    def __init__(self, hooks: Sequence[Hook], workspace: Path, hidden_env: set[str], session_id: str = "") -> None:
        self.hooks = tuple(hooks)
        self.workspace = workspace
        self.session_id = session_id
        passed = allowed_environment(os.environ, DESKTOP)
        self._env = {key: value for key, value in passed.items() if key not in hidden_env} | {"PWD": str(workspace)}

    async def pre_tool_use(self, tool: str, arguments: str) -> HookOutcome:
        """Before a call runs: a `deny` outcome's reason is the call's error result."""
        hooks = [hook for hook in self.hooks if hook.event == "PreToolUse" and hook.matches(tool)]
        return await self._run(hooks, "PreToolUse", tool_name=tool, tool_input=_parsed(arguments))

    async def post_tool_use(self, tool: str, arguments: str, result: str) -> HookOutcome:
        """After a call ran: a `deny` outcome (`decision: block`) has a reason for the model to read."""
        hooks = [hook for hook in self.hooks if hook.event == "PostToolUse" and hook.matches(tool)]
        return await self._run(
            hooks, "PostToolUse", tool_name=tool, tool_input=_parsed(arguments), tool_response=result
        )

    async def user_prompt_submit(self, prompt: str) -> HookOutcome:
        """Before a prompt is sent: a `deny` outcome stops it, its reason shown to the user."""
        return await self._run(self._for("UserPromptSubmit"), "UserPromptSubmit", prompt=prompt)

    async def stop(self, active: bool = False) -> HookOutcome:
        """When the model has answered; `active` if the turn already went on because a Stop hook said so."""
        return await self._run(self._for("Stop"), "Stop", stop_hook_active=active)

    def _for(self, event: Event) -> list[Hook]:
        return [hook for hook in self.hooks if hook.event == event]

    async def _run(self, hooks: list[Hook], event: Event, **fields: Any) -> HookOutcome:
        if not hooks:
            return HookOutcome()
        started = time.perf_counter()
        payload = {"session_id": self.session_id, "cwd": str(self.workspace), "hook_event_name": event, **fields}
        data = json.dumps(payload, ensure_ascii=False).encode(errors="replace")  # a lone surrogate becomes ?
        runs = await asyncio.gather(*(self._execute(hook, data) for hook in hooks))
        return HookOutcome(tuple(runs), time.perf_counter() - started)

    async def _execute(self, hook: Hook, stdin: bytes) -> HookRun:
        started = time.perf_counter()
        try:
            process = await asyncio.create_subprocess_exec(
                "/bin/sh",
                "-c",
                hook.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.workspace,
                env=self._env,
                start_new_session=True,  # its own process group: a timeout kills what it started too
            )
        except OSError as error:
            return HookRun(hook, time.perf_counter() - started, warning=f"{_named(hook)} didn't start: {error}")
        try:
            async with asyncio.timeout(hook.timeout):
                status, stdout, stderr = await _exchange(process, stdin)
        except TimeoutError:
            _kill_group(process)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(1):  # the group is gone; don't hang on what escaped it
                    await process.wait()
            warning = f"{_named(hook)} timed out after {hook.timeout:g} s and was killed"
            return HookRun(hook, time.perf_counter() - started, warning=warning)
        except BaseException:  # cancelled with its turn: nothing of it may outlive the turn
            _kill_group(process)
            raise
        return _verdict(hook, time.perf_counter() - started, status, stdout, stderr)


def _verdict(hook: Hook, seconds: float, status: int, stdout: bytes, stderr: bytes) -> HookRun:
    """What a hook that exited said, read as Claude Code reads it."""
    if status == EXIT_BLOCK:
        return HookRun(hook, seconds, "deny", _text(stderr) or f"{_named(hook)} said no")
    if status != 0:
        said = _text(stderr)
        return HookRun(
            hook, seconds, warning=f"{_named(hook)} failed with exit status {status}" + (f": {said}" if said else "")
        )
    try:
        answer = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        answer = None  # plain text on stdout is the hook's business
    decision, reason = _decision(answer) if isinstance(answer, dict) else ("", "")
    if decision in ("deny", "ask") and not reason:
        reason = f"{_named(hook)} said no" if decision == "deny" else f"{_named(hook)} asks for your approval"
    return HookRun(hook, seconds, decision, _text(reason.encode()))


def _decision(answer: dict[str, Any]) -> tuple[Decision, str]:
    """The decision in a hook's JSON answer, and its reason."""
    specific = answer.get("hookSpecificOutput")
    if isinstance(specific, dict) and specific.get("permissionDecision") in ("allow", "ask", "deny"):
        return specific["permissionDecision"], str(specific.get("permissionDecisionReason") or "")
    if answer.get("decision") == "block":
        return "deny", str(answer.get("reason") or "")
    if answer.get("continue") is False:
        return "deny", str(answer.get("stopReason") or "")
    return "", ""


async def _exchange(process: asyncio.subprocess.Process, stdin: bytes) -> tuple[int, bytes, bytes]:
    """Write the event, read both outputs to their end (keeping the first MAX_OUTPUT bytes), wait for the exit."""
    assert process.stdin is not None and process.stdout is not None and process.stderr is not None
    stdout, stderr, _ = await asyncio.gather(
        _capped(process.stdout), _capped(process.stderr), _feed(process.stdin, stdin)
    )
    return await process.wait(), stdout, stderr


async def _feed(pipe: asyncio.StreamWriter, data: bytes) -> None:
    # A hook need not read its stdin: one that exits first closes the pipe under the write.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        pipe.write(data)
        await pipe.drain()
        pipe.close()


async def _capped(stream: asyncio.StreamReader) -> bytes:
    kept = bytearray()
    while chunk := await stream.read(65536):
        kept += chunk[: MAX_OUTPUT - len(kept)]  # the rest is still read, so the hook never blocks on a full pipe
    return bytes(kept)


def _kill_group(process: asyncio.subprocess.Process) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def _parsed(arguments: str) -> object:
    """A call's arguments as the hook gets them: the JSON object, or `{}` if they are not one."""
    try:
        parsed = json.loads(arguments)
    except ValueError:
        return {}
    return parsed if isinstance(parsed, dict) else {}


def _text(data: bytes) -> str:
    """A hook's output as safe text: bad UTF-8 replaced, controls made visible, capped."""
    text = inert(data.decode("utf-8", errors="replace").strip())
    return text if len(text) <= MAX_REASON else text[:MAX_REASON] + " …[cut]"


def _named(hook: Hook) -> str:
    """The hook, for a line about it: its event and (the start of) its command."""
    command = inert(hook.command)
    return f"{hook.event} hook `{command if len(command) <= 60 else command[:57] + '...'}`"


def _is_glob(pattern: str) -> bool:
    return any(char in pattern for char in "*?[")
