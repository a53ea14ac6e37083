"""run_shell's subreapers come from one program hotloop starts once, forked per call (issue 35, item 9).

A Python interpreter started for every call cost ~19 ms each; the program now forks the call's subreaper. What the
subreaper guaranteed still holds (tests/test_shell_tool.py, tests/test_host_doors.py); these show how it is made now:
one program, a fork of it per call, calls that don't wait on each other, and a program started again if it dies.
A session starts the program when it opens, in a thread, so that its first call doesn't wait for Python to load (44 to
136 ms), and lets it go when it closes.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest

from hotloop.agent.events import AgentEvent, ToolFinished
from hotloop.agent.tools.processes import StartAhead, subreaper_problem, subreapers
from hotloop.agent.tools.registry import ToolContext
from hotloop.agent.tools.shell import ShellSettings, shell_tool
from hotloop.config import load_config
from hotloop.core.session import Session, SessionOptions

from support import alive, present, wait_until
from tui_support import write_config

pytestmark = pytest.mark.skipif(subreaper_problem() is not None, reason=f"no subreaper: {subreaper_problem()}")

# The call's subreaper ($PPID): its pid, its parent's, and its command line.
WHO = "echo $PPID; cut -d' ' -f4 /proc/$PPID/stat; tr '\\0' ' ' < /proc/$PPID/cmdline; echo"


async def run(workspace: Path, command: str, **args: object) -> str:
    tool = shell_tool(ShellSettings(), set())
    return await tool.handler({"command": command, **args}, ToolContext("c1", workspace))


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as stat:
        return int(stat.read().rsplit(")", 1)[1].split()[1])


async def program(workspace: Path) -> int:
    """The program's pid: the parent of a call's subreaper."""
    return int((await run(workspace, WHO)).splitlines()[2])


async def test_each_call_s_subreaper_is_a_fork_of_one_program(tmp_path: Path) -> None:
    """Two calls: two subreapers, each a child of the same program, itself hotloop's child, with the program's own
    command line, as a fork has: no interpreter started for either call."""
    first, second = [(await run(tmp_path, WHO)).splitlines()[1:] for _ in range(2)]
    assert first[0] != second[0]
    assert int(first[1]) == int(second[1]) != os.getpid()
    assert parent_of(int(first[1])) == os.getpid()
    with open(f"/proc/{first[1]}/cmdline", "rb") as cmdline:
        assert first[2] == second[2] == cmdline.read().replace(b"\0", b" ").decode()
    assert first[2].split()[-1].endswith("subreaper.py")


async def test_each_subreaper_holds_its_own_call_s_socket_alone(tmp_path: Path) -> None:
    """Two calls at once: each one's subreaper holds one socket, its own call's. A fork that kept the other's would
    keep that call from seeing its subreaper end (the socket's EOF) until the later call ended too."""
    said: dict[str, list[str]] = {"earlier": [], "later": []}
    tool = shell_tool(ShellSettings(), set())

    def start(name: str, command: str) -> asyncio.Future[str]:
        context = ToolContext(name, tmp_path, said[name].append)
        return asyncio.ensure_future(tool.handler({"command": f"echo $PPID; {command}"}, context))

    def subreaper(name: str) -> int | None:
        first = "".join(said[name]).split("\n", 1)
        return int(first[0]) if len(first) == 2 else None

    earlier = start("earlier", "until [ -e go ]; do sleep 0.01; done; echo done")
    later: asyncio.Future[str] | None = None
    try:
        await wait_until(lambda: subreaper("earlier") is not None, what="the earlier call's subreaper")
        later = start("later", "sleep 60")
        await wait_until(lambda: subreaper("later") is not None, what="the later call's subreaper")
        held = [sockets(present(subreaper(name))) for name in ("earlier", "later")]
        assert [len(names) for names in held] == [1, 1] and held[0] != held[1]
        (tmp_path / "go").touch()
        result = await asyncio.wait_for(earlier, timeout=30)
        assert result.startswith("exit 0 · ") and result.endswith("\ndone\n")
        assert not later.done()
    finally:
        for call in (earlier, later):
            if call is not None and not call.done():
                call.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await call


def sockets(pid: int) -> list[str]:
    """The sockets a process holds open, as /proc names them (`socket:[123]`)."""
    held = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
    return [name for name in held if name.startswith("socket:")]


async def test_a_subreaper_a_command_kills_says_the_signal_and_its_processes_end(tmp_path: Path) -> None:
    """A signal the subreaper doesn't shield (SIGALRM) ends it: the call ends with that signal's name, told by the
    program that reaped it, and what the command left running ends too."""
    result = await run(tmp_path, "sleep 100 & echo $!; kill -ALRM $PPID; wait", timeout=30)
    assert result.startswith("killed by SIGALRM · ")
    pid = int(result.splitlines()[1])
    await wait_until(lambda: not alive(pid), timeout=10)


async def test_the_program_is_started_again_when_it_has_died(tmp_path: Path) -> None:
    """SIGKILLed from outside, the program is replaced at the next call, which runs under a fork of the new one."""
    old = await program(tmp_path)
    os.kill(old, signal.SIGKILL)
    await wait_until(lambda: not alive(old))
    result = (await run(tmp_path, WHO)).splitlines()
    assert result[0].startswith("exit 0 · ")
    assert int(result[2]) != old and parent_of(int(result[2])) == os.getpid()


def stats() -> dict[int, list[str]]:
    """Every live process's /proc stat fields after its name: state, parent, group, session, …"""
    found = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as stat:
                    fields = stat.read().rsplit(")", 1)[1].split()
            except OSError:  # gone meanwhile
                continue
            if fields[0] not in ("Z", "X"):
                found[int(name)] = fields
    return found


def children(pid: int) -> list[int]:
    return [child for child, fields in stats().items() if int(fields[1]) == pid]


def programs() -> list[int]:
    """The subreaper programs this process runs: its children whose command line names subreaper.py."""
    found = []
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
                if cmdline.read().rstrip(b"\0").endswith(b"subreaper.py"):
                    found.append(pid)
        except OSError:
            continue
    return found


def in_session(leader: int) -> list[int]:
    """The live processes of the session `leader` made (the program's, which its forks share)."""
    return [pid for pid, fields in stats().items() if int(fields[3]) == leader]


async def no_program() -> None:
    """The program an earlier test started, let go and gone: what follows starts its own."""
    subreapers.close()
    await wait_until(lambda: not programs(), what="an earlier program's end")


def session_in(
    home: Path, steps: list[dict[str, object]], events: list[AgentEvent], read_only: bool = False
) -> Session:
    """A session on the simulator playing `steps`, every call allowed, in a fresh workspace under `home`."""
    write_config(home, steps)
    workspace = home / "ws"
    workspace.mkdir()
    options = SessionOptions(workspace=workspace, yes=True, read_only=read_only)
    return Session(load_config(), options, emit=events.append)


async def test_a_session_s_first_call_runs_under_the_program_started_at_its_open(isolated_home: Path) -> None:
    """Once the session has opened, before any command, the program it holds runs and has loaded (it has forked its
    spare); the first call's subreaper is a fork of that one, and no second program was started. The session's close
    ends it."""
    await no_program()
    events: list[AgentEvent] = []
    steps: list[dict[str, object]] = [
        {"tool_calls": [{"name": "run_shell", "arguments": {"command": WHO}}]},
        {"text": "done"},
    ]
    session = session_in(isolated_home, steps, events)
    try:
        await session.open()
        held = present(await session.subreaper.started())
        await wait_until(lambda: children(held), what="the program's spare")
        assert programs() == [held]
        await session.turn("who reaps?")
        (finished,) = [event for event in events if isinstance(event, ToolFinished)]
        assert finished.result.startswith("exit 0 · ")
        assert int(finished.result.splitlines()[2]) == held
        assert programs() == [held]
    finally:
        await session.close()
    await wait_until(lambda: not alive(held), what="the program's end")


async def test_calls_made_as_the_start_begins_wait_for_that_same_start(tmp_path: Path) -> None:
    """Three calls made together at the moment a session's start begins, while no program runs: all three run under
    forks of the one program that start holds; none starts another."""
    await no_program()
    ahead = StartAhead()
    ahead.start(lambda: True)
    try:
        results = await asyncio.gather(*(run(tmp_path, WHO) for _ in range(3)))
        held = present(await ahead.started())
        assert [result.split(" · ")[0] for result in results] == ["exit 0"] * 3
        assert {int(result.splitlines()[2]) for result in results} == {held}
        assert programs() == [held]
    finally:
        await ahead.close()


async def test_a_session_closed_as_it_opens_leaves_no_process_of_the_program(isolated_home: Path) -> None:
    """A session closed right after its open, its program started but maybe still loading: the program and the spare
    it forks once loaded both end, and no process is left in the program's session."""
    await no_program()
    session = session_in(isolated_home, [{"text": "unused"}], [])
    try:
        await session.open()
        held = present(await session.subreaper.started())
        assert in_session(held)
    finally:
        await session.close()
    await wait_until(lambda: not in_session(held), what="every process of the program's session")
    assert subreapers.pid is None


async def test_a_session_that_runs_no_command_under_a_subreaper_starts_no_program(isolated_home: Path) -> None:
    """Read-only (no run_shell at all), a session holds no program and starts none."""
    await no_program()
    session = session_in(isolated_home, [{"text": "unused"}], [], read_only=True)
    try:
        await session.open()
        assert await session.subreaper.started() is None
        assert programs() == [] and subreapers.pid is None
    finally:
        await session.close()
