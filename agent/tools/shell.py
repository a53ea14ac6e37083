"""`run_shell`: a command line run by bash (else sh) in the workspace, its output streamed as it comes.

Each call is its own process in its own process group (a new session), with the workspace as its
working folder: parallel calls never share a shell or a `cd`. stdin is /dev/null, so nothing waits
on the keyboard; stdout and stderr share one pipe, interleaved as the command wrote them, as in a
terminal. The environment is hotloop's without the provider keys (`hidden_env`) and without anything
named like a secret (`…_API_KEY`, `…_TOKEN`, `…_SECRET`, …).

The whole group goes when the call ends, however it ends: at a timeout or a cancel (Esc) it gets
SIGTERM, then SIGKILL after KILL_GRACE; after a normal exit, whatever the command left running in
the background is stopped the same way, since nothing would ever stop it otherwise and it may hold
the output pipe open. A process that starts a session of its own escapes the group, except under
the sandbox, whose PID namespace dies with it (see `sandbox.py`).
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import os
import re
import signal
import time
from collections.abc import Callable, Iterable
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.tools.registry import OUTPUT_LIMIT, Tool, ToolContext, ToolError
from hotloop.agent.tools.sandbox import NO_BWRAP, bwrap_argv, bwrap_problem, find_bwrap, sandbox_problem
from hotloop.agent.tools.workspace import real_root

KILL_GRACE = 0.5  # seconds between SIGTERM and SIGKILL
DRAIN = 0.2  # seconds to wait, after the command exits, for output still in the pipe
DEFAULT_KEY_ENVS = frozenset({"OPENAI_API_KEY", "ANTHROPIC_API_KEY"})
# Names that hold credentials by convention: kept out of the command's environment too.
SECRET_NAME = re.compile(r"(?:^|_)(?:API_?KEY|TOKEN|SECRET|SECRET_KEY|SECRET_ACCESS_KEY|PASSWORD)$", re.IGNORECASE)


class ShellSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[shell]` in the config: run_shell's limits and sandbox."""

    # The most seconds a command may run; a call may ask for less, never more.
    timeout: Annotated[float, Meta(gt=0, extra={"problem": "must be positive"})] = 120.0
    # "workspace-write": under bubblewrap, writable only in the workspace (see sandbox.py).
    sandbox: Literal["off", "workspace-write"] = "off"
    network: bool = False  # whether a sandboxed command may use the network; unsandboxed ones always can
    # Characters of output the model reads: the first and the last half, the middle left out.
    output_limit: Annotated[int, Meta(ge=1_000, extra={"problem": "must be at least 1000"})] = OUTPUT_LIMIT


def command_environment(hidden_env: Iterable[str], environ: dict[str, str] | None = None) -> dict[str, str]:
    """`environ` (default: hotloop's) without the hidden variables, the default key ones and secret-like names."""
    hidden = DEFAULT_KEY_ENVS | set(hidden_env)
    source = os.environ if environ is None else environ
    return {name: value for name, value in source.items() if name not in hidden and not SECRET_NAME.search(name)}


def sandbox_notice(settings: ShellSettings) -> str | None:
    """The one warning to show when the sandbox asked for can't be provided; None when all is as configured."""
    if settings.sandbox == "off" or (problem := sandbox_problem()) is None:
        return None
    return f"run_shell's sandbox is unavailable, commands will run unsandboxed: {problem}"


@cache
def _shell() -> str:
    return "/bin/bash" if os.access("/bin/bash", os.X_OK) else "/bin/sh"


class _Captured:
    """What a command printed, for the model: its first and last `limit // 2` characters and a count of the rest."""

    def __init__(self, limit: int) -> None:
        self.head: list[str] = []
        self.head_room = limit // 2
        self.tail: collections.deque[str] = collections.deque()
        self.tail_size, self.tail_room = 0, limit - limit // 2
        self.dropped = 0

    def add(self, text: str) -> None:
        if self.head_room > 0:
            self.head.append(text[: self.head_room])
            text = text[self.head_room :]
            self.head_room -= len(self.head[-1])
        if not text:
            return
        self.tail.append(text)
        self.tail_size += len(text)
        while self.tail_size - len(self.tail[0]) >= self.tail_room:
            self.dropped += len(self.tail[0])
            self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        tail = "".join(self.tail)
        cut = max(0, len(tail) - self.tail_room)
        head, dropped = "".join(self.head), self.dropped + cut
        if not dropped:
            return head + tail or "(no output)"
        return f"{head}\n[output truncated: {dropped:,} characters left out here]\n{tail[cut:]}"


class _Command(asyncio.SubprocessProtocol):
    """The running command: its output decoded as it arrives, when it exited, and when its pipe closed."""

    def __init__(self, emit: Callable[[str], None], limit: int) -> None:
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.output = _Captured(limit)
        self._emit = emit
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._transport: asyncio.SubprocessTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.SubprocessTransport)
        self._transport = transport

    def pipe_data_received(self, fd: int, data: bytes | str) -> None:
        self._add(self._decoder.decode(data.encode() if isinstance(data, str) else data))

    def pipe_connection_lost(self, fd: int, exc: Exception | None) -> None:
        self._add(self._decoder.decode(b"", final=True))
        _settle(self.closed)

    def process_exited(self) -> None:
        _settle(self.exited)

    @property
    def returncode(self) -> int | None:
        return None if self._transport is None else self._transport.get_returncode()

    def _add(self, text: str) -> None:
        if text:
            self.output.add(text)
            self._emit(text)


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def _signal(group: int, number: signal.Signals) -> bool:
    """Send `number` to the process group; False if it has no process left."""
    try:
        os.killpg(group, number)
    except ProcessLookupError:
        return False
    return True


async def _stop(group: int, command: _Command) -> None:
    """SIGTERM to the group, SIGKILL after KILL_GRACE, or at once if this wait is cancelled too."""
    if not _signal(group, signal.SIGTERM):
        return
    try:
        # The shell gone and the pipe closed: what could still clean up has had its chance.
        await asyncio.wait([command.exited, command.closed], timeout=KILL_GRACE)
    finally:
        _signal(group, signal.SIGKILL)


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class _Shell:
    """run_shell's handler and preview, with its settings and the environment its commands get."""

    def __init__(self, settings: ShellSettings, hidden_env: Iterable[str]) -> None:
        self.settings = settings
        self.hidden_env = frozenset(hidden_env)

    def _timeout(self, args: dict[str, Any]) -> float:
        asked = args.get("timeout")
        if asked is None:
            return self.settings.timeout
        if isinstance(asked, bool) or not isinstance(asked, int | float) or asked <= 0:
            raise ToolError("timeout must be a positive number of seconds")
        return min(float(asked), self.settings.timeout)

    async def _argv(self, command: str, workspace: Path) -> tuple[list[str], str]:
        """The argv that runs `command`, and how it is run, for the preview."""
        argv = [_shell(), "-c", command]
        if self.settings.sandbox == "off":
            return argv, "unsandboxed"
        bwrap = find_bwrap()
        problem = NO_BWRAP if bwrap is None else await asyncio.to_thread(bwrap_problem, bwrap)
        if bwrap is None or problem is not None:
            return argv, f"UNSANDBOXED (the sandbox is unavailable: {problem})"
        network = "with network" if self.settings.network else "no network"
        return bwrap_argv(bwrap, argv, workspace, network=self.settings.network), f"sandboxed: {network}"

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command = _command(args)
        _, mode = await self._argv(command, real_root(ctx.workspace))
        return f"$ {command}\nin {real_root(ctx.workspace)} · {mode} · timeout {self._timeout(args):g} s"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command, timeout = _command(args), self._timeout(args)
        workspace = real_root(ctx.workspace)
        argv, _ = await self._argv(command, workspace)
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        try:
            transport, running = await loop.subprocess_exec(
                lambda: _Command(ctx.emit_output, self.settings.output_limit),
                *argv,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                cwd=workspace,
                env=command_environment(self.hidden_env),
                start_new_session=True,
            )
        except OSError as error:
            raise ToolError(f"could not start {argv[0]} in {workspace}: {error.strerror or error}") from None
        group = transport.get_pid()  # with a new session, the group's id is the shell's pid
        try:
            async with asyncio.timeout(timeout):
                await asyncio.shield(running.exited)
                took = time.monotonic() - started
                await asyncio.wait([running.closed], timeout=DRAIN)
        except TimeoutError:
            if not running.exited.done():
                raise ToolError(
                    f"timed out after {timeout:g} s; the command was killed\n{running.output.text()}"
                ) from None
        finally:
            try:
                await _stop(group, running)
                await asyncio.wait([running.exited], timeout=KILL_GRACE)  # reaped, before the transport closes
            finally:
                transport.close()
        return f"{_status(running.returncode)} · {took:.2f} s\n{running.output.text()}"


def _command(args: dict[str, Any]) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("command must be a non-empty string")
    return command


def shell_tool(settings: ShellSettings, hidden_env: Iterable[str]) -> Tool:
    """`run_shell`, limited by `settings`; `hidden_env` names the variables its commands must not see."""
    shell = _Shell(settings, hidden_env)
    return Tool(
        name="run_shell",
        description=(
            f"Run a shell command with {Path(_shell()).name} -c in the workspace folder. Returns the exit code, "
            "the duration and the output (stdout and stderr interleaved). There is no stdin: nothing can be "
            "typed in. Processes left running in the background are stopped when the command ends. "
            f"Stopped after timeout seconds (at most {settings.timeout:g})."
        ),
        parameters={
            "type": "object",
            "properties": {
                "command": {"type": "string", "description": "The command line, e.g. 'pytest -q tests/test_x.py'."},
                "timeout": {
                    "type": "number",
                    "description": f"Seconds before it is stopped (default and most: {settings.timeout:g}).",
                },
            },
            "required": ["command"],
        },
        handler=shell.run,
        # The call's own timer goes first, so that the model reads the output so far and the group is killed.
        timeout=settings.timeout + 2 * KILL_GRACE + DRAIN + 5,
        side_effects=True,
        preview=shell.preview,
    )
