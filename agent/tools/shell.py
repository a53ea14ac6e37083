"""`run_shell`: a command line run by bash (else sh) in the workspace, its output streamed as it comes.

Each call is its own process in its own process group (a new session), with the workspace as its
working folder: parallel calls never share a shell or a `cd`. stdin is /dev/null, so nothing waits
on the keyboard; stdout and stderr share one pipe, interleaved as the command wrote them, as in a
terminal. The environment is built from an allowlist (`secret_policy.allowed_environment`: PATH,
HOME, the locale, TERM, toolchain roots, …), PWD set to the workspace, plus the names `[shell] env`
adds; nothing else of hotloop's environment, so a credential in a variable (`GITHUB_PAT`,
`DATABASE_URL`, `LC_DEPLOY`) never reaches a command, nor an agent's socket (`SSH_AUTH_SOCK`).

Everything a call started goes when it ends, however it ends (see `processes.py`): at a timeout or
a cancel (Esc) its processes get SIGTERM, then SIGKILL after KILL_GRACE; after a normal exit,
whatever the command left running in the background is stopped the same way, since nothing would
ever stop it otherwise and it may hold the output pipe open. That includes what left the process
group (`setsid`, a double fork), found by a tag in its environment and, on Linux, because it stays a
descendant of the subreaper the shell runs under (`subreaper.py`) even once its parent has exited,
and by the file-locks limit the subreaper gives the shell, even once the command has killed it.

The model reads the head and the tail of a long output, with the cut said between them (the tail
is where a command says what failed); the pane gets all of it as it comes.
"""

from __future__ import annotations

import asyncio
import codecs
import collections
import os
import signal
import socket
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from functools import cache
from pathlib import Path
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.tools.processes import KILL_GRACE, RUN_ID, Marks, request, stop, subreaper_problem, subreapers
from hotloop.agent.tools.registry import OUTPUT_LIMIT, Tool, ToolContext, ToolError, cap_output
from hotloop.agent.tools.sandbox import NO_BWRAP, bwrap_argv, bwrap_problem, find_bwrap, sandbox_problem
from hotloop.agent.tools.workspace import real_root
from hotloop.secret_policy import allowed_environment

DRAIN = 0.2  # seconds to wait, after the command exits, for output still in the pipe
VARIABLE = r"^[A-Za-z_][A-Za-z0-9_]*$"  # lower case too: http_proxy and its kin are spelled so
use_subreaper = True  # off only to measure the path without it (benchmarks/shell_reaper.py)


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
    # Variables passed to commands besides the allowlist (secret_policy.allowed_environment); never a provider key.
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
    """The one warning to show when commands can't be contained as configured; None when all is as configured.

    Without the sandbox asked for, or without it and without a subreaper (see processes.py).
    """
    sandboxed = settings.sandbox != "off" and (problem := sandbox_problem()) is None
    said = (
        []
        if settings.sandbox == "off" or sandboxed
        else [f"run_shell's sandbox is unavailable, commands will run unsandboxed: {problem}"]
    )
    if not sandboxed and (missing := subreaper_problem()) is not None:
        said.append(
            "run_shell can't keep what a command leaves running as its descendant here: one that clears its "
            f"environment and leaves its process group may outlive the call ({missing})"
        )
    return "; ".join(said) or None


def under_subreaper(settings: ShellSettings) -> bool:
    """Whether commands run under a subreaper here as `settings` say (it probes the sandbox: for a thread)."""
    return (
        use_subreaper and subreaper_problem() is None and (settings.sandbox == "off" or sandbox_problem() is not None)
    )


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
    """The running command: its output decoded as it arrives, when it exited, and when its pipe closed.

    Under a subreaper, the call's subreaper tells (`told`) the shell's pid, when it started and its own
    pid, then the shell's exit status; `gone` is when the subreaper has been reaped (its socket's EOF),
    or when the shell started directly has exited.
    """

    def __init__(self, emit: Callable[[str], None], limit: int) -> None:
        loop = asyncio.get_running_loop()
        self.exited: asyncio.Future[None] = loop.create_future()
        self.closed: asyncio.Future[None] = loop.create_future()
        self.gone: asyncio.Future[None] = loop.create_future()
        # The shell's pid and start on the monotonic clock; why it could not start; None if the subreaper died first.
        self.spawned: asyncio.Future[tuple[int, float] | OSError | None] = loop.create_future()
        self.reaper: int | None = None  # the call's subreaper, once it has told its pid
        self._code: int | None = None
        self._reaper_code: int | None = None  # how the subreaper ended: the call's, if it never told the shell's
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
        _settle(self.gone)
        _settle(self.exited)
        if not self.spawned.done():
            self.spawned.set_result(None)

    def told(self, line: str) -> None:
        """A line from the subreaper: `pid PID STARTED REAPER`, `exit CODE`, `error ERRNO MESSAGE` or `gone CODE`."""
        word, _, rest = line.partition(" ")
        if word == "exit":
            self._code = int(rest)
            _settle(self.exited)
        elif word == "gone":
            self._reaper_code = int(rest)
        elif word == "pid" and not self.spawned.done():
            shell, started, reaper = rest.split(" ")
            self.reaper = int(reaper)
            self.spawned.set_result((int(shell), float(started)))
        elif word == "error" and not self.spawned.done():
            number, _, why = rest.partition(" ")
            self.spawned.set_result(OSError(int(number), why))

    @property
    def returncode(self) -> int | None:
        if self._code is not None:
            return self._code
        if self._reaper_code is not None:
            return self._reaper_code
        return None if self._transport is None else self._transport.get_returncode()

    def _add(self, text: str) -> None:
        if text:
            self.output.add(text)
            self._emit(text)


class _Lines(asyncio.Protocol):
    """The call's socket to its subreaper: each line written there, handed to the command; its end, the command's."""

    def __init__(self, command: _Command) -> None:
        self._command = command
        self._pending = b""

    def data_received(self, data: bytes) -> None:
        *lines, self._pending = (self._pending + data).split(b"\n")
        for line in lines:
            self._command.told(line.decode(errors="replace"))

    def eof_received(self) -> None:
        self._command.process_exited()  # the subreaper and the program that reaped it have both let go

    def connection_lost(self, exc: Exception | None) -> None:
        self._command.process_exited()


class _Output(asyncio.Protocol):
    """The output pipe of a command run under a subreaper, read into the command as a subprocess's pipe would be."""

    def __init__(self, command: _Command) -> None:
        self._command = command

    def data_received(self, data: bytes) -> None:
        self._command.pipe_data_received(1, data)

    def connection_lost(self, exc: Exception | None) -> None:
        self._command.pipe_connection_lost(1, exc)


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

    async def _argv(self, command: str, workspace: Path) -> tuple[list[str], str, bool]:
        """The argv that runs `command`, how it is run (for the preview), and whether under a subreaper.

        A sandboxed command runs under none: its PID namespace ends with bwrap, and everything in it.
        """
        argv = [_shell(), "-c", command]
        if self.settings.sandbox == "off":
            return _unsandboxed(argv, "unsandboxed")
        bwrap = find_bwrap()
        problem = NO_BWRAP if bwrap is None else await asyncio.to_thread(bwrap_problem, bwrap)
        if bwrap is None or problem is not None:
            return _unsandboxed(argv, f"UNSANDBOXED (the sandbox is unavailable: {problem})")
        network = "with network" if self.settings.network else "no network"
        # In a thread: it reads /proc/net/unix and looks at every socket listed there.
        sandboxed = await asyncio.to_thread(
            bwrap_argv, bwrap, argv, workspace, network=self.settings.network, read_only=self.protected
        )
        return sandboxed, f"sandboxed: {network}", False

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command = _command(args)
        _, mode, _ = await self._argv(command, real_root(ctx.workspace))
        return f"$ {command}\nin {real_root(ctx.workspace)} · {mode} · timeout {self._timeout(args):g} s"

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        command, timeout = _command(args), self._timeout(args)
        workspace = real_root(ctx.workspace)
        marks = Marks.new()  # the model never sees them, so no command can name them
        argv, _, reaped = await self._argv(command, workspace)
        if not reaped:
            marks = replace(marks, limit=None)  # only the subreaper sets it
        env = command_environment(workspace, self.settings, self.hidden_env) | {RUN_ID: marks.tag}
        running = _Command(ctx.emit_output, self.settings.output_limit)
        control: asyncio.Transport | None = None
        started = time.monotonic()
        try:
            if reaped:
                control, transports = await _under_subreaper(running, argv, env, workspace, marks.limit)
                group = None  # the subreaper tells the shell's pid
            else:
                shell = await _directly(running, argv, env, workspace)
                transports, group = [shell], shell.get_pid()  # with a new session, its group's id
        except OSError as error:
            raise ToolError(f"could not start {argv[0]} in {workspace}: {error.strerror or error}") from None
        try:
            async with asyncio.timeout(timeout):
                if reaped:
                    spawned = await asyncio.shield(running.spawned)
                    if isinstance(spawned, OSError):
                        raise ToolError(f"could not start {argv[0]} in {workspace}: {spawned.strerror or spawned}")
                    if spawned is not None:
                        group, started = spawned
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
                # A subreaper the command killed is gone, its pid maybe another process's by now.
                reaper = None if running.gone.done() else running.reaper
                await stop(group, marks, running.exited, running.closed, reaper)
            finally:
                try:
                    if control is not None:
                        control.write_eof()  # the release: the subreaper kills what is left, reaps it and exits
                    await asyncio.wait([running.gone], timeout=KILL_GRACE)  # reaped, before the transport closes
                finally:
                    for transport in transports:
                        transport.close()
        return running.output.after(f"{_status(running.returncode)} · {took:.2f} s")


async def _directly(
    running: _Command, argv: list[str], env: dict[str, str], workspace: Path
) -> asyncio.SubprocessTransport:
    """`argv` started as hotloop's own child, in a session of its own; its transport."""
    transport, _ = await asyncio.get_running_loop().subprocess_exec(
        lambda: running,
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        cwd=workspace,
        env=env,
        start_new_session=True,
    )
    return transport


async def _under_subreaper(
    running: _Command, argv: list[str], env: dict[str, str], workspace: Path, limit: int | None
) -> tuple[asyncio.Transport, list[asyncio.BaseTransport]]:
    """`argv` run by a subreaper of the call's own (see subreaper.py): the call's socket, and the transports to close.

    The socket carries the request and the release one way, the subreaper's lines the other; the output
    comes on a pipe of its own, as a subprocess's would.
    """
    if not subreapers.started:  # a fork and an exec, off the loop; a start under way (the session's) is waited for
        await asyncio.to_thread(subreapers.start)
    loop = asyncio.get_running_loop()
    asked = request(argv, env, workspace, limit)
    ours, theirs = socket.socketpair()
    reading, writing = os.pipe()
    try:
        subreapers.ask(theirs, writing)
        control, _ = await loop.connect_accepted_socket(lambda: _Lines(running), ours)
    except BaseException:
        ours.close()
        os.close(reading)
        raise
    finally:
        theirs.close()
        os.close(writing)
    control.write(asked)
    try:
        output, _ = await loop.connect_read_pipe(lambda: _Output(running), os.fdopen(reading, "rb", buffering=0))
    except BaseException:
        control.close()
        raise
    return control, [control, output]


def _unsandboxed(argv: list[str], mode: str) -> tuple[list[str], str, bool]:
    """`argv`, to run under a subreaper where there can be one (see processes.py)."""
    return argv, mode, use_subreaper and subreaper_problem() is None


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
