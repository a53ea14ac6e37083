"""run_shell: streamed output, its own process group killed whole, a clean environment, and the sandbox."""

from __future__ import annotations

import asyncio
import os
import re
import shlex
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from hotloop.agent.tools import shell
from hotloop.agent.tools.processes import RUN_ID, subreaper_problem
from hotloop.agent.tools.registry import OUTPUT_LIMIT, ToolContext, ToolError, cap_output
from hotloop.agent.tools.sandbox import bwrap_argv, bwrap_problem, sandbox_problem
from hotloop.agent.tools.shell import ShellSettings, sandbox_notice, shell_tool
from hotloop.config import ConfigError, load_config
from hotloop.secret_policy import LOCALE, PASSED

from support import alive, wait_until


class Pane:
    """What a call streamed, each piece with the time it arrived."""

    def __init__(self) -> None:
        self.pieces: list[tuple[float, str]] = []

    def __call__(self, text: str) -> None:
        self.pieces.append((time.monotonic(), text))

    @property
    def text(self) -> str:
        return "".join(text for _, text in self.pieces)


def run(
    workspace: Path, command: str, pane: Pane | None = None, settings: ShellSettings | None = None, **args: object
) -> asyncio.Task[str]:
    tool = shell_tool(settings or ShellSettings(), {"HOTLOOP_TEST_PROVIDER_KEY"})
    context = ToolContext("c1", workspace, pane or Pane())
    return asyncio.ensure_future(tool.handler({"command": command, **args}, context))


def running_marker(marker: str) -> bool:
    """Whether a live process runs with `marker` in its command line (a zombie has none)."""
    for entry in os.listdir("/proc"):
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as cmdline:
                if marker.encode() in cmdline.read():
                    return True
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError, PermissionError):
            continue
    return False


async def test_output_streams_before_the_command_ends(tmp_path: Path) -> None:
    pane = Pane()
    task = run(tmp_path, "echo first; while [ ! -e go ]; do sleep 0.01; done; echo second >&2", pane)
    await wait_until(lambda: "first" in pane.text)
    assert not task.done()
    (tmp_path / "go").touch()
    result = await task
    assert result.startswith("exit 0 · ") and result.endswith("\nfirst\nsecond\n")
    assert pane.text == "first\nsecond\n"


async def test_parallel_calls_run_at_once_each_in_its_own_process(tmp_path: Path) -> None:
    # Each call waits until all three have started: run one after the other, the first would wait to its timeout.
    meet = "touch started.$$; until [ $(ls started.* | wc -l) -ge 3 ]; do sleep 0.01; done; echo $$"
    results = await asyncio.gather(*(run(tmp_path, meet, timeout=20) for _ in range(3)))
    assert len({result.split("\n")[1] for result in results}) == 3


async def test_each_call_runs_in_its_workspace(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    results = await asyncio.gather(run(one, "pwd"), run(two, "cd /; pwd"), run(one, "pwd"))
    assert [result.split("\n")[1] for result in results] == [str(one), "/", str(one)]


@pytest.mark.parametrize(
    "command",
    ["sleep 100 & echo $$ $!; wait", "trap '' TERM; sleep 100 & echo $$ $!; wait"],
    ids=["grandchildren too", "one that ignores SIGTERM too"],
)
async def test_cancel_kills_the_whole_group(tmp_path: Path, command: str) -> None:
    pane = Pane()
    task = run(tmp_path, command, pane)
    await wait_until(lambda: pane.text.endswith("\n"))
    pids = [int(pid) for pid in pane.text.split()]
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not any(alive(pid) for pid in pids))


async def test_a_timeout_kills_the_group_and_keeps_the_output(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as error:
        # Long enough for both pids to be printed first on a busy machine (a shell and its subreaper to start).
        await run(tmp_path, "echo $!$$; sleep 100 & echo $!; wait", timeout=2)
    message = str(error.value)
    assert message.startswith("timed out after 2 s; the command was killed\n")
    pids = [int(pid) for pid in message.split("\n")[1:] if pid]
    assert len(pids) == 2
    await wait_until(lambda: not any(alive(pid) for pid in pids))


async def test_what_is_left_in_the_background_is_stopped_when_the_command_ends(tmp_path: Path) -> None:
    result = await run(tmp_path, "sleep 100 & echo $!")
    assert result.startswith("exit 0 · ")
    await wait_until(lambda: not alive(int(result.split("\n")[1])))


# Two processes that leave the call's process group: one `setsid -f`, one double-forked and setsid'd;
# each writes its pid, and the command prints both once they have.
ESCAPING = (
    "setsid -f sh -c 'echo $$ > a.pid; exec sleep 300' >/dev/null 2>&1; "
    "(setsid sh -c 'echo $$ > b.pid; exec sleep 300' >/dev/null 2>&1 &); "
    "until [ -s a.pid ] && [ -s b.pid ]; do sleep 0.01; done; cat a.pid b.pid"
)
# While the shell runs, a child that also cleared its environment is still found, as the shell's descendant.
ESCAPING_BARE = (
    "setsid env -i sh -c 'echo $$ > c.pid; exec sleep 300' >/dev/null 2>&1 & "
    f"{ESCAPING}; until [ -s c.pid ]; do sleep 0.01; done; cat c.pid"
)
needs_setsid = pytest.mark.skipif(shutil.which("setsid") is None, reason="setsid (util-linux) is not installed")


def pids_in(text: str) -> list[int]:
    return [int(line) for line in text.split("\n") if line.isdigit()]


@needs_setsid
async def test_what_left_the_group_is_stopped_when_the_command_ends(tmp_path: Path) -> None:
    result = await run(tmp_path, ESCAPING)
    assert result.startswith("exit 0 · ")
    pids = pids_in(result)
    assert len(pids) == 2
    await wait_until(lambda: not any(alive(pid) for pid in pids))


@needs_setsid
async def test_what_left_the_group_is_stopped_at_a_timeout(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as error:
        await run(tmp_path, f"{ESCAPING_BARE}; sleep 100", timeout=3)
    assert str(error.value).startswith("timed out after 3 s; the command was killed\n")
    pids = pids_in(str(error.value))
    assert len(pids) == 3
    await wait_until(lambda: not any(alive(pid) for pid in pids))


@needs_setsid
async def test_what_left_the_group_is_stopped_at_a_cancel(tmp_path: Path) -> None:
    pane = Pane()
    task = run(tmp_path, f"{ESCAPING_BARE}; sleep 100", pane)
    await wait_until(lambda: len(pids_in(pane.text)) == 3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pids = pids_in(pane.text)
    await wait_until(lambda: not any(alive(pid) for pid in pids))


# A process that clears its environment and leaves the group, double-forked: its parent (the subshell) has
# exited before the command's end, so only the subreaper keeps it a descendant of the call.
ORPHANED_BARE = (
    "(setsid env -i sh -c 'echo $$ > d.pid; exec sleep 300' >/dev/null 2>&1 &); "
    "until [ -s d.pid ]; do sleep 0.01; done; cat d.pid"
)
needs_subreaper = pytest.mark.skipif(subreaper_problem() is not None, reason=f"no subreaper: {subreaper_problem()}")


def gone(pid: int) -> bool:
    """Not even a zombie: reaped."""
    return not os.path.exists(f"/proc/{pid}")


def zombie_children() -> list[int]:
    """This process's children that have exited and that no one has reaped."""
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as stat:
                state, parent = stat.read().rsplit(")", 1)[1].split()[:2]
        except (FileNotFoundError, NotADirectoryError, ProcessLookupError):
            continue
        if state == "Z" and int(parent) == os.getpid():
            found.append(int(entry))
    return found


@needs_setsid
@needs_subreaper
async def test_an_orphan_that_cleared_its_environment_is_stopped_when_the_command_ends(tmp_path: Path) -> None:
    result = await run(tmp_path, ORPHANED_BARE)
    assert result.startswith("exit 0 · ")
    [pid] = pids_in(result)
    # Killed and reaped by the call's subreaper before the call returned: not left to a container's init.
    assert gone(pid)
    assert not zombie_children()


@needs_setsid
@needs_subreaper
async def test_an_orphan_that_cleared_its_environment_is_stopped_at_a_timeout(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as error:
        await run(tmp_path, f"{ORPHANED_BARE}; sleep 100", timeout=2)
    assert str(error.value).startswith("timed out after 2 s; the command was killed\n")
    [pid] = pids_in(str(error.value))
    assert gone(pid)
    assert not zombie_children()


@needs_setsid
@needs_subreaper
async def test_an_orphan_that_cleared_its_environment_is_stopped_at_a_cancel(tmp_path: Path) -> None:
    pane = Pane()
    task = run(tmp_path, f"{ORPHANED_BARE}; sleep 100", pane)
    await wait_until(lambda: len(pids_in(pane.text)) == 1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [pid] = pids_in(pane.text)
    assert gone(pid)
    assert not zombie_children()


# What a command can see of how it was started: its environment, the signals the shell ignores and those
# its children start with blocked, its session and group (its own), its open files.
SEEN = (
    "env | grep -v ^HOTLOOP_RUN_ID= | sort; grep -E '^SigIgn' /proc/$$/status; grep -E '^SigBlk' /proc/self/status; "
    "ps -o sid=,pgid= -p $$ | tr -s ' '; echo $$; cd /proc/$$/fd && echo *"
)


@needs_subreaper
async def test_the_subreaper_changes_nothing_a_command_sees(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LC_ALL", "C")  # a C locale: Python's start would add LC_CTYPE to its own environment
    reaped = await run(tmp_path, SEEN)
    monkeypatch.setattr(shell, "use_subreaper", False)
    direct = await run(tmp_path, SEEN)

    def seen(result: str) -> list[str]:
        lines = result.rstrip("\n").split("\n")[1:]
        pid = lines[-2]
        assert lines[-3].split() == [pid, pid]  # its own session and group
        return lines[:-3] + lines[-1:]

    assert seen(reaped) == seen(direct)
    assert "LC_CTYPE" not in reaped
    ignored = int(re.findall(r"SigIgn:\t(\w+)", reaped)[0], 16)
    assert not ignored & (1 << signal.SIGPIPE - 1 | 1 << signal.SIGXFSZ - 1)  # which Python's start ignores


@needs_setsid
async def test_without_a_subreaper_the_reason_is_said_once_and_commands_run_as_before(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    reason = "a subreaper (prctl PR_SET_CHILD_SUBREAPER) is Linux's alone"
    monkeypatch.setattr(shell, "subreaper_problem", lambda: reason)
    notice = sandbox_notice(ShellSettings())
    assert notice == (
        "run_shell can't keep what a command leaves running as its descendant here: one that clears its "
        f"environment and leaves its process group may outlive the call ({reason})"
    )
    if sandbox_problem() is None:  # sandboxed, a command needs no subreaper: its PID namespace ends with bwrap
        assert sandbox_notice(ShellSettings(sandbox="workspace-write")) is None
    result = await run(tmp_path, f"echo $PPID; {ESCAPING}")
    assert int(result.split("\n")[1]) == os.getpid()  # the shell is hotloop's own child, as before
    await wait_until(lambda: not any(alive(pid) for pid in pids_in(result)[1:]))


@needs_subreaper
async def test_a_command_that_signals_its_parent_still_ends_whole(tmp_path: Path) -> None:
    # SIGTERM to the subreaper is ignored; SIGKILL ends it, and the sweep falls back to the group and the tag.
    assert (await run(tmp_path, "kill $PPID; echo still here")).endswith("\nstill here\n")
    result = await run(tmp_path, "kill -9 $PPID; sleep 100 & echo $!; wait", timeout=10)
    assert result.startswith("killed by SIGKILL · ")
    await wait_until(lambda: not any(alive(pid) for pid in pids_in(result)))


# A hotloop that runs a command which prints its background child's pid, then waits to be killed.
HOTLOOP_RUNNING = """
import asyncio, sys
from pathlib import Path
from hotloop.agent.tools.registry import ToolContext
from hotloop.agent.tools.shell import ShellSettings, shell_tool
tool = shell_tool(ShellSettings(), set())
context = ToolContext("c1", Path(sys.argv[1]), lambda text: print(text, end="", flush=True))
asyncio.run(tool.handler({"command": "sleep 100 & echo $!; wait"}, context))
"""


@needs_subreaper
async def test_when_hotloop_dies_its_commands_die_with_it(tmp_path: Path) -> None:
    hotloop = await asyncio.create_subprocess_exec(
        sys.executable, "-c", HOTLOOP_RUNNING, str(tmp_path), stdout=asyncio.subprocess.PIPE
    )
    assert hotloop.stdout is not None
    pid = int(await asyncio.wait_for(hotloop.stdout.readline(), timeout=15))
    assert alive(pid)
    hotloop.kill()  # no sweep: the subreaper reads EOF on its socket, kills what is below it and exits
    await hotloop.wait()
    await wait_until(lambda: not alive(pid))


# Credentials by other names, agents' sockets, and a variable no one listed: none reaches a command.
KEPT_OUT = {
    "OPENAI_API_KEY": "sk-one",
    "HOTLOOP_TEST_PROVIDER_KEY": "sk-two",
    "GITHUB_TOKEN": "ghp-three",
    "GITHUB_PAT": "github-pat-value",
    "DATABASE_URL": "postgres://app:hunter2x@db/app",
    "NPM_AUTH": "npm-auth-value",
    "DB_CREDENTIALS": "db-credentials-value",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value",
    "SSH_AUTH_SOCK": "/tmp/ssh-agent.sock",
    "XDG_RUNTIME_DIR": "/run/user/1000",
    "DISPLAY": ":0",
    "DBUS_SESSION_BUS_ADDRESS": "unix:path=/run/user/1000/bus",
    "HOTLOOP_TEST_UNLISTED": "unlisted-value",
}


def environment_of(result: str) -> dict[str, str]:
    """What `env` printed, after the status line."""
    return dict(line.split("=", 1) for line in result.split("\n")[1:] if "=" in line)


async def test_the_environment_is_an_allowlist(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in KEPT_OUT.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("LC_ALL", "C.UTF-8")
    monkeypatch.setenv("VIRTUAL_ENV", "/opt/venv")
    first, second = await run(tmp_path, "env"), await run(tmp_path, "env")
    seen = environment_of(first)
    assert not set(KEPT_OUT) & set(seen)
    assert not [value for value in KEPT_OUT.values() if value in first]
    assert (seen["PATH"], seen["HOME"]) == (os.environ["PATH"], os.environ["HOME"])
    assert (seen["LC_ALL"], seen["VIRTUAL_ENV"], seen["PWD"]) == ("C.UTF-8", "/opt/venv", str(tmp_path))
    added_by_bash = {"SHLVL", "_"}
    assert {name for name in seen if name not in PASSED | LOCALE} <= {
        RUN_ID,
        "PWD",
    } | added_by_bash
    # Each call's own tag, which no model could have chosen (not the call's id).
    assert re.fullmatch(r"[0-9a-f]{32}", seen[RUN_ID]) and seen[RUN_ID] != environment_of(second)[RUN_ID]


async def test_the_config_adds_names_but_never_a_hidden_one(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOTLOOP_TEST_ADDED", "added")
    monkeypatch.setenv("HOTLOOP_TEST_PROVIDER_KEY", "sk-two")
    settings = ShellSettings(env=("HOTLOOP_TEST_ADDED", "HOTLOOP_TEST_PROVIDER_KEY"))
    seen = environment_of(await run(tmp_path, "env", settings=settings))
    assert seen["HOTLOOP_TEST_ADDED"] == "added" and "HOTLOOP_TEST_PROVIDER_KEY" not in seen


def test_the_config_refuses_a_key_in_shell_env_and_warns_of_a_secret(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('[shell]\nenv = ["PATH", "OPENAI_API_KEY"]\n')
    with pytest.raises(ConfigError, match=r"shell\.env must not name OPENAI_API_KEY: commands never get hotloop's"):
        load_config(path)
    path.write_text('[providers.openai]\napi_key_env = "WORK_KEY"\n[shell]\nenv = ["WORK_KEY"]\n')
    with pytest.raises(ConfigError, match=r"must not name WORK_KEY"):
        load_config(path)
    path.write_text('[shell]\nenv = ["GITHUB_PAT", "http_proxy"]\n')
    config = load_config(path)
    assert config.shell.env == ("GITHUB_PAT", "http_proxy")
    assert [warning.split(": ", 1)[1] for warning in config.warnings] == [
        "shell.env passes GITHUB_PAT to every command, and so maybe to the model "
        "(named like a secret; the session log masks its value)"
    ]
    path.write_text('[shell]\nenv = ["not a name"]\n')
    with pytest.raises(ConfigError, match=r"shell\.env must list variable names"):
        load_config(path)


async def test_a_failing_command_is_a_result_not_an_error(tmp_path: Path) -> None:
    result = await run(tmp_path, "echo no such thing >&2; exit 3")
    assert result.startswith("exit 3 · ") and result.endswith(" s\nno such thing\n")
    assert (await run(tmp_path, "kill -9 $$")).startswith("killed by SIGKILL · ")


async def test_bytes_that_are_not_utf8_are_replaced_and_split_characters_kept(tmp_path: Path) -> None:
    result = await run(tmp_path, r"printf 'a\377b '; printf '\303'; sleep 0.1; printf '\251'")
    assert result.split("\n", 1)[1] == "a\ufffdb \u00e9"


async def test_long_output_keeps_its_head_and_tail(tmp_path: Path) -> None:
    settings = ShellSettings(output_limit=1_000)
    result = await run(tmp_path, "echo START; head -c 100000 /dev/zero | tr '\\0' x; echo; echo END", settings=settings)
    output = result.split("\n", 1)[1]
    assert output.startswith("START\n") and output.endswith("x\nEND\n")
    assert "\n[output truncated: 99,011 characters left out here]\n" in output
    assert len(output) < 1_100


async def test_the_longest_output_and_its_status_fit_a_result_whole(tmp_path: Path) -> None:
    """Nothing is cut again after the shell's own cut, so the last line reaches the model."""
    result = await run(tmp_path, "seq 1 100000; echo 'FAILED: 3 tests'")
    assert len(result) <= OUTPUT_LIMIT and cap_output(result) == result
    assert result.startswith("exit 0 · ") and result.endswith("\n99999\n100000\nFAILED: 3 tests\n")
    assert result.count("[output truncated: ") == 1


async def test_a_command_that_cannot_start_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="could not start /bin/"):
        await run(tmp_path / "missing", "true")


@pytest.mark.parametrize("timeout", [0, -1, "5", True])
async def test_the_timeout_must_be_a_positive_number(tmp_path: Path, timeout: object) -> None:
    with pytest.raises(ToolError, match="timeout must be a positive number of seconds"):
        await run(tmp_path, "true", timeout=timeout)


async def test_the_preview_shows_the_command_where_and_how(tmp_path: Path) -> None:
    tool = shell_tool(ShellSettings(timeout=30), set())
    assert tool.preview is not None and tool.side_effects and not tool.read_only
    shown = await tool.preview({"command": "make test", "timeout": 300}, ToolContext("c1", tmp_path))
    assert shown == f"$ make test\nin {tmp_path} · unsandboxed · timeout 30 s"
    assert tool.timeout is not None and tool.timeout > 30  # its own timer goes first


@contextmanager
def listening(folder: Path) -> Iterator[Path]:
    """A Unix socket listening in `folder` while the context lasts."""
    with socket.socket(socket.AF_UNIX) as server:
        server.bind(str(folder / "s"))
        server.listen()
        yield (folder / "s").resolve()


@contextmanager
def folder_in(place: Path) -> Iterator[Path]:
    """A new folder under `place` (outside /tmp, which the sandbox hides anyway), gone afterwards."""
    with tempfile.TemporaryDirectory(prefix=".hotloop-test-", dir=place) as folder:
        yield Path(folder)


def at(argv: list[str], *part: str) -> int:
    """Where `part` starts in `argv`; -1 if it isn't there."""
    return next((i for i in range(len(argv)) if argv[i : i + len(part)] == list(part)), -1)


def test_the_bwrap_command_line(tmp_path: Path) -> None:
    argv = bwrap_argv("/usr/bin/bwrap", ["/bin/sh", "-c", "ls"], Path("/tmp/ws"), network=False)
    assert argv[:4] == ["/usr/bin/bwrap", "--ro-bind", "/", "/"]
    assert argv.index("--tmpfs") < argv.index("--bind")  # a workspace under /tmp is the real one
    assert argv[argv.index("--bind") : argv.index("--bind") + 3] == ["--bind", "/tmp/ws", "/tmp/ws"]
    assert {"--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"} <= set(argv)
    assert argv[-6:] == ["--chdir", "/tmp/ws", "--", "/bin/sh", "-c", "ls"]
    assert "--unshare-net" not in bwrap_argv("bwrap", ["true"], Path("/tmp/ws"), network=True)


def test_without_network_every_host_socket_is_masked_before_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    (workspace / ".git").mkdir(parents=True)
    (workspace / ".git" / "config").write_text("[core]\n")
    (workspace / "data").mkdir()
    with folder_in(Path.home()) as home, listening(home) as outside, listening(workspace) as inside:
        read_only = [workspace / "data", workspace / "config", Path("/etc")]
        argv = bwrap_argv("bwrap", ["true"], workspace, network=False, read_only=read_only)
        networked = bwrap_argv("bwrap", ["true"], workspace, network=True)
    bind = at(argv, "--bind", str(workspace), str(workspace))
    assert 0 < at(argv, "--ro-bind", "/dev/null", str(outside)) < bind
    assert at(argv, "--ro-bind", "/dev/null", str(inside)) == -1  # the workspace's own sockets stay reachable
    for folder in ("/tmp", "/var/tmp", "/run"):  # /var/run is a link to /run here, or a folder made private too
        assert 0 < at(argv, "--tmpfs", folder) < bind
    assert at(networked, "--ro-bind", "/dev/null", str(outside)) == at(networked, "--tmpfs", "/var/tmp") == -1
    # After the workspace: what in it must stay as it is. A missing folder gets an empty read-only stand-in.
    for path in ("data", ".git/config"):
        assert at(argv, "--ro-bind", str(workspace / path), str(workspace / path)) > bind
    for path in (".git/hooks", "config"):
        assert at(argv, "--tmpfs", str(workspace / path), "--remount-ro", str(workspace / path)) > bind
    assert at(argv, "--ro-bind", "/etc", "/etc") == -1  # outside the workspace, read-only already


async def test_without_bwrap_the_reason_is_said_once_and_in_every_preview(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap there
    settings = ShellSettings(sandbox="workspace-write")
    reason = "bwrap (bubblewrap) is not installed, or not on PATH"
    assert sandbox_problem() == reason
    assert sandbox_notice(settings) == f"run_shell's sandbox is unavailable, commands will run unsandboxed: {reason}"
    assert sandbox_notice(ShellSettings()) is None
    tool = shell_tool(settings, set())
    assert tool.preview is not None
    shown = await tool.preview({"command": "echo hi"}, ToolContext("c1", tmp_path))
    assert f"UNSANDBOXED (the sandbox is unavailable: {reason})" in shown
    assert (await run(tmp_path, "echo hi", settings=settings)).endswith("\nhi\n")


def test_a_bwrap_that_cannot_make_namespaces_is_named(tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to create new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    problem = sandbox_problem(str(tmp_path))
    assert problem == "bwrap can't make its sandbox here: bwrap: No permissions to create new namespace"


async def test_the_sandbox_confines_writes_or_says_why_it_cannot(tmp_path: Path) -> None:
    """Where bwrap works (it does on the development machine), what it forbids; elsewhere, the fallback."""
    workspace, outside = tmp_path / "ws", tmp_path / "outside"
    workspace.mkdir()
    outside.mkdir()
    settings = ShellSettings(sandbox="workspace-write")
    # `touch /` only sets a time, where it may: harmless if the sandbox turns out to be missing.
    command = f"echo in > inside.txt; echo out > {outside}/x.txt; touch /; tail -n +3 /proc/net/dev | wc -l"
    result = await run(workspace, command, settings=settings)
    assert (workspace / "inside.txt").read_text() == "in\n"
    problem = sandbox_problem()
    if problem is None:
        assert f"{outside}/x.txt: No such file or directory" in result  # its /tmp is its own
        assert "touch: setting times of '/': Read-only file system" in result
        assert result.endswith("\n1\n")  # one network interface: its own loopback
        assert not (outside / "x.txt").exists()
    else:
        assert (outside / "x.txt").exists()
        assert sandbox_notice(settings) is not None


async def test_cancel_kills_everything_in_the_sandbox(tmp_path: Path) -> None:
    pane = Pane()
    marker = f"{os.getpid()}.{time.monotonic_ns() % 10**6}"  # a sleep no other test runs
    task = run(tmp_path, f"sleep {marker} & echo started; wait", pane, ShellSettings(sandbox="workspace-write"))
    await wait_until(lambda: "started" in pane.text)
    # The shell echoes while its background child may not have exec'd `sleep` yet (a busy machine).
    await wait_until(lambda: running_marker(f"sleep\0{marker}"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not running_marker(f"sleep\0{marker}"))


needs_bwrap = pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
# Tries each socket named; prints what it reached and what it couldn't.
CONNECT = """
import socket, sys
for path in sys.argv[1:]:
    with socket.socket(socket.AF_UNIX) as probe:
        try:
            probe.connect(path)
            print("reached", path)
        except OSError as error:
            print("refused", path, error.errno)
"""


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
async def test_without_network_no_socket_outside_the_workspace_answers(tmp_path: Path, network: bool) -> None:
    settings = ShellSettings(sandbox="workspace-write", network=network)
    with (
        folder_in(Path.home()) as home,
        folder_in(Path("/var/tmp")) as var_tmp,
        listening(home) as in_home,
        listening(var_tmp) as in_var_tmp,
        listening(tmp_path) as in_workspace,
    ):
        command = shlex.join(
            [sys.executable, "-I", "-S", "-c", CONNECT, str(in_home), str(in_var_tmp), str(in_workspace)]
        )
        said = (await run(tmp_path, command, settings=settings)).split("\n")[1:]
    assert f"reached {in_workspace}" in said
    if network:  # the same probe reaches them when nothing masks them
        assert f"reached {in_home}" in said and f"reached {in_var_tmp}" in said
    else:
        assert not [line for line in said if line.startswith("reached") and str(tmp_path) not in line]


@needs_bwrap
async def test_a_sandboxed_command_can_plant_no_git_hook_nor_touch_hotloops_folders(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "config").write_text("[core]\n")
    (tmp_path / "data").mkdir()
    tool = shell_tool(ShellSettings(sandbox="workspace-write"), set(), [tmp_path / "data", tmp_path / "config/hotloop"])
    attempts = (
        "echo x > .git/hooks/pre-commit; echo x >> .git/config; echo x > data/session.jsonl; "
        "mkdir -p config/hotloop; echo x > config/hotloop/config.toml; echo fine > fine.txt"
    )
    result = await tool.handler({"command": attempts}, ToolContext("c1", tmp_path))
    assert result.count("Read-only file system") == 4
    assert (tmp_path / "fine.txt").read_text() == "fine\n"
    assert (tmp_path / ".git" / "config").read_text() == "[core]\n"
    assert sorted(str(path.relative_to(tmp_path)) for path in tmp_path.rglob("*") if path.is_file()) == [
        ".git/config",
        "fine.txt",
    ]


@pytest.mark.skipif(
    any(Path(sys.executable).resolve().is_relative_to(folder) for folder in (Path("/tmp"), Path("/var/tmp"))),
    reason="the probe's Python is where the sandbox hides",
)
def test_the_self_test_names_a_socket_the_sandbox_leaves_reachable(tmp_path: Path) -> None:
    leaky = tmp_path / "bwrap"  # runs the command as it is: everything stays reachable
    leaky.write_text('#!/bin/sh\nwhile [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n')
    leaky.chmod(0o755)
    problem = bwrap_problem(str(leaky))
    assert problem is not None
    assert re.fullmatch(r"bwrap's sandbox leaves a host socket reachable: /\S+/\.hotloop-probe-\w+/s", problem)
