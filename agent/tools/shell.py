"""`run_shell`: a command line run by bash (else sh) in the workspace, its output streamed as it comes.

Each call is its own process in its own process group (a new session), with the workspace as its
working folder: parallel calls never share a shell or a `cd`. stdin is /dev/null, so nothing waits
on the keyboard; stdout and stderr share one pipe, interleaved as the command wrote them, as in a
terminal. The environment is built from an allowlist (`secret_policy.PASSED`: PATH, HOME, the
locale, TERM, toolchain roots, …), PWD set to the workspace, plus the names `[shell] env` adds;
nothing else of hotloop's environment, so a credential in a variable (`GITHUB_PAT`, `DATABASE_URL`)
never reaches a command, nor an agent's socket (`SSH_AUTH_SOCK`).

Everything a call started goes when it ends, however it ends (see `processes.py`): at a timeout or
a cancel (Esc) its processes get SIGTERM, then SIGKILL after KILL_GRACE; after a normal exit,
whatever the command left running in the background is stopped the same way, since nothing would
ever stop it otherwise and it may hold the output pipe open. That includes what left the process
group (`setsid`, a double fork), found by a tag in its environment.

The model reads the head and the tail of a long output, with the cut said between them (the tail
is where a command says what failed); the pane gets all of it as it comes.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterable, Sequence
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.tools.processes import KILL_GRACE, RUN_ID, stop
from hotloop.agent.tools.registry import OUTPUT_LIMIT, Tool, ToolContext, ToolError, cap_output
from hotloop.agent.tools.sandbox import NO_BWRAP, bwrap_argv, bwrap_problem, find_bwrap, sandbox_problem
from hotloop.agent.tools.workspace import real_root
from hotloop.secret_policy import allowed_environment

DRAIN = 0.2  # seconds to wait, after the command exits, for output still in the pipe
VARIABLE = r"^[A-Za-z_][A-Za-z0-9_]*$"  # lower case too: http_proxy and its kin are spelled so


class ShellSettings(Struct, frozen=True, forbid_unknown_fields=True):
    """`[shell]` in the config: run_shell's limits and sandbox."""

    # The most seconds a command may run; a call may ask for less, never more.
    timeout: Annotated[float, Meta(gt=0, extra={"problem": "must be positive"})] = 120.0
    # "workspace-write": under bubblewrap, writable only in the workspace (see sandbox.py).
    sandbox: Literal["off", "workspace-write"] = "off"
    network: bool = False  # whether a sandboxed command may use the network; unsandboxed ones always can
    # Characters of output the model reads: the first and the last half, the middle left out. No tool
    # result is longer than OUTPUT_LIMIT.
    output_limit: Annotated[
        int, Meta(ge=1_000, le=OUTPUT_LIMIT, extra={"problem": f"must be from 1000 to {OUTPUT_LIMIT}"})
    ] = OUTPUT_LIMIT
    # Variables passed to commands besides the allowlist (secret_policy.PASSED); never a provider key.
    env: Annotated[
        tuple[Annotated[str, Meta(pattern=VARIABLE)], ...],
        Meta(extra={"problem": 'must list variable names, e.g. ["HTTPS_PROXY"]'}),
    ] = ()


def command_environment(workspace: Path, settings: ShellSettings, hidden_env: Iterable[str]) -> dict[str, str]:
    """What a command sees of hotloop's environment: the allowlist and `[shell] env`, never a hidden name."""
    hidden = set(hidden_env)
    allowed = allowed_environment(os.environ, settings.env)
    return {name: value for name, value in allowed.items() if name not in hidden} | {"PWD": str(workspace)}


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

    def text(self, room: int) -> str:
        """The output in at most `room` characters, the cut (if any) said between its head and its tail."""
        tail = "".join(self.tail)
        cut = max(0, len(tail) - self.tail_room)
        return cap_output("".join(self.head) + tail[cut:], room, self.dropped + cut) or "(no output)"

    def after(self, line: str) -> str:
        """`line`, then the output: together no longer than a tool's result may be."""
        return f"{line}\n{self.text(OUTPUT_LIMIT - len(line) - 1)}"


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


def _status(code: int | None) -> str:
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit {code}"


class _Shell:
    """run_shell's handler and preview, with its settings and the environment its commands get."""

    def __init__(self, settings: ShellSettings, hidden_env: Iterable[str], protected: Sequence[Path]) -> None:
        self.settings = settings
        self.hidden_env = frozenset(hidden_env)
        self.protected = tuple(Path(os.path.realpath(path)) for path in protected)

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
        # In a thread: it reads /proc/net/unix and looks at every socket listed there.
        sandboxed = await asyncio.to_thread(
            bwrap_argv, bwrap, argv, workspace, network=self.settings.network, read_only=self.protected
        )
        return sandboxed, f"sandboxed: {network}"

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command = _command(args)
        _, mode = await self._argv(command, real_root(ctx.workspace))
        return f"$ {command}\nin {real_root(ctx.workspace)} · {mode} · timeout {self._timeout(args):g} s"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command, timeout = _command(args), self._timeout(args)
        workspace = real_root(ctx.workspace)
        argv, _ = await self._argv(command, workspace)
        tag = secrets.token_hex(16)  # the model never sees it, so no command can name it
        env = command_environment(workspace, self.settings, self.hidden_env) | {RUN_ID: tag}
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
                env=env,
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
                    running.output.after(f"timed out after {timeout:g} s; the command was killed")
                ) from None
        finally:
            try:
                await stop(group, tag, running.exited, running.closed)
                await asyncio.wait([running.exited], timeout=KILL_GRACE)  # reaped, before the transport closes
            finally:
                transport.close()
        return running.output.after(f"{_status(running.returncode)} · {took:.2f} s")


def _command(args: dict[str, Any]) -> str:
    command = args.get("command")
    if not isinstance(command, str) or not command.strip():
        raise ToolError("command must be a non-empty string")
    return command


def shell_tool(settings: ShellSettings, hidden_env: Iterable[str], protected: Sequence[Path] = ()) -> Tool:
    """`run_shell`, limited by `settings`.

    `hidden_env` names variables its commands must never see, even if `[shell] env` names them;
    `protected`, folders a sandboxed command must not change even inside the workspace (hotloop's own).
    """
    shell = _Shell(settings, hidden_env, protected)
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
