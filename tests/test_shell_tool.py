"""run_shell: streamed output, its own process group killed whole, a clean environment, and the sandbox."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from hotloop.agent.tools.registry import ToolContext, ToolError
from hotloop.agent.tools.sandbox import bwrap_argv, sandbox_problem
from hotloop.agent.tools.shell import ShellSettings, sandbox_notice, shell_tool

from support import wait_until


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


def dead(pid: int) -> bool:
    """Gone, or a zombie: a container's init may never reap the orphans it inherits."""
    try:
        with open(f"/proc/{pid}/stat") as status:
            return status.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # gone, or going while we read
        return True


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
    started = time.monotonic()
    results = await asyncio.gather(*(run(tmp_path, "sleep 1; echo $$") for _ in range(3)))
    assert time.monotonic() - started < 2.5  # three 1-s sleeps one after the other would take 3 s
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
    await wait_until(lambda: all(dead(pid) for pid in pids), timeout=5)


async def test_a_timeout_kills_the_group_and_keeps_the_output(tmp_path: Path) -> None:
    with pytest.raises(ToolError) as error:
        await run(tmp_path, "echo $!$$; sleep 100 & echo $!; wait", timeout=0.5)
    message = str(error.value)
    assert message.startswith("timed out after 0.5 s; the command was killed\n")
    pids = [int(pid) for pid in message.split("\n")[1:] if pid]
    assert len(pids) == 2
    await wait_until(lambda: all(dead(pid) for pid in pids), timeout=5)


async def test_what_is_left_in_the_background_is_stopped_when_the_command_ends(tmp_path: Path) -> None:
    result = await run(tmp_path, "sleep 100 & echo $!")
    assert result.startswith("exit 0 · ")
    await wait_until(lambda: dead(int(result.split("\n")[1])), timeout=5)


async def test_the_environment_has_no_keys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-one")
    monkeypatch.setenv("HOTLOOP_TEST_PROVIDER_KEY", "sk-two")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-three")
    monkeypatch.setenv("HOTLOOP_TEST_VISIBLE", "shown")
    result = await run(tmp_path, "env")
    for value in ("sk-one", "sk-two", "ghp-three"):
        assert value not in result
    assert "HOTLOOP_TEST_VISIBLE=shown" in result


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


def test_the_bwrap_command_line() -> None:
    argv = bwrap_argv("/usr/bin/bwrap", ["/bin/sh", "-c", "ls"], Path("/tmp/ws"), network=False)
    assert argv[:4] == ["/usr/bin/bwrap", "--ro-bind", "/", "/"]
    assert argv.index("--tmpfs") < argv.index("--bind")  # a workspace under /tmp is the real one
    assert argv[argv.index("--bind") : argv.index("--bind") + 3] == ["--bind", "/tmp/ws", "/tmp/ws"]
    assert {"--unshare-net", "--unshare-pid", "--die-with-parent", "--new-session"} <= set(argv)
    assert argv[-6:] == ["--chdir", "/tmp/ws", "--", "/bin/sh", "-c", "ls"]
    assert "--unshare-net" not in bwrap_argv("bwrap", ["true"], Path("/tmp/ws"), network=True)


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
    await wait_until(lambda: running_marker(f"sleep\0{marker}"), timeout=5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await wait_until(lambda: not running_marker(f"sleep\0{marker}"), timeout=5)
