"""Issue 34's attacks on the host, each the test's input: a variable smuggled under the locale's name at every door
hotloop's environment goes through, a daemon left by a command that kills its own subreaper, and the sandbox's
self-test run from a venv under /tmp."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from hotloop.agent.approvals import Approvals
from hotloop.agent.events import Notice
from hotloop.agent.hooks import Hook, Hooks
from hotloop.agent.tools import shell
from hotloop.agent.tools.mcp import McpBridge
from hotloop.agent.tools.mcp_config import McpServer
from hotloop.agent.tools.processes import LOCKS_LIMIT, subreaper_problem
from hotloop.agent.tools.registry import ToolContext, ToolRegistry
from hotloop.agent.tools.sandbox import PRIVATE, sandbox_problem
from hotloop.agent.tools.shell import ShellSettings, shell_tool

from support import alive, make_agent, sim_with_scenario, wait_until

# Data under the locale's prefix, which ssh's usual `AcceptEnv LANG LC_*` carries: a name no C library reads, a
# locale variable with a value no locale has, and iTerm2's own.
POSING = {
    "LC_DEPLOY": "deploy-key-0123456789abcdef",
    "LC_TIME": "ghp_smuggled0123456789abcdefABCD",
    "LC_TERMINAL": "iTerm2",
}
LOCALE = {"LC_ALL": "C.UTF-8", "LANGUAGE": "en_US:en", "LC_MESSAGES": "sr_RS.UTF-8@latin"}


@pytest.fixture
def smuggled(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {**POSING, **LOCALE}.items():
        monkeypatch.setenv(name, value)


def environment_of(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def assert_only_the_locale(seen: dict[str, str], text: str) -> None:
    assert {name: seen.get(name) for name in LOCALE} == LOCALE
    assert not set(POSING) & set(seen)
    assert not [value for value in POSING.values() if value in text]


@pytest.mark.usefixtures("smuggled")
async def test_a_command_sees_the_locale_and_nothing_posing_as_it(tmp_path: Path) -> None:
    """A real run_shell call: `env` shows the locale settings, and none of the names or values posing as them."""
    tool = shell_tool(ShellSettings(), set())
    result = await tool.handler({"command": "env"}, ToolContext("c1", tmp_path))
    assert result.startswith("exit 0 · ")
    assert_only_the_locale(environment_of(result), result)


@pytest.mark.usefixtures("smuggled")
async def test_nothing_posing_as_the_locale_reaches_the_provider(tmp_path: Path) -> None:
    """The model reads what a command prints: the request that carries `env`'s output carries none of them."""
    command = 'env; echo "deploy=[$LC_DEPLOY]"'
    steps = [{"tool_calls": [{"name": "run_shell", "arguments": {"command": command}}]}, {"text": "done"}]
    sim = sim_with_scenario(tmp_path, steps)
    try:
        agent, _ = make_agent(sim, tmp_path, [shell_tool(ShellSettings(), set())], approvals=Approvals(allow_all=True))
        await agent.run_turn("show the environment")
        bodies = [request.body.decode() for request in sim.server.requests]
    finally:
        sim.stop()
    [result] = [m["content"] for m in json.loads(bodies[-1])["messages"] if m["role"] == "tool"]
    assert "deploy=[]" in result
    assert_only_the_locale(environment_of(result), "".join(bodies))


@pytest.mark.usefixtures("smuggled")
async def test_a_hook_and_an_mcp_server_see_nothing_posing_as_the_locale(tmp_path: Path) -> None:
    """The other doors: a hook's `env`, and an MCP stdio server asked for each variable, see the locale alone."""
    await Hooks([Hook(event="Stop", command="env > hook-env.txt")], tmp_path, set()).stop()
    said = (tmp_path / "hook-env.txt").read_text()
    assert_only_the_locale(environment_of(said), said)
    notices: list[Notice] = []
    registry = ToolRegistry()
    bridge = McpBridge(registry, notices.append, set())
    server = Path(__file__).parent / "mcp_server.py"
    await bridge.start([McpServer("env", sys.executable, (str(server),), trust_hints=True)])
    try:
        getenv = registry.get("getenv")
        assert getenv is not None, notices
        seen = {name: await getenv.handler({"name": name}, ToolContext("c", tmp_path)) for name in {**POSING, **LOCALE}}
    finally:
        await bridge.aclose()
    assert seen == {**dict.fromkeys(POSING, "<unset>"), **LOCALE}


# A daemon that leaves the group and clears its environment (so neither the group nor the tag finds it), then the
# command SIGKILLs the subreaper that held it: the daemon goes to init, no descendant of the call's any more.
DAEMON_THEN_KILL = (
    "setsid -f env -i sh -c 'echo $$ > d.pid; exec sleep 300' >/dev/null 2>&1; "
    "until [ -s d.pid ]; do sleep 0.01; done; cat d.pid; kill -9 $PPID; sleep 300"
)


@pytest.mark.skipif(shutil.which("setsid") is None, reason="setsid (util-linux) is not installed")
@pytest.mark.skipif(subreaper_problem() is not None, reason=f"no subreaper: {subreaper_problem()}")
async def test_a_daemon_left_by_a_command_that_killed_its_subreaper_ends_with_the_call(tmp_path: Path) -> None:
    """Out of the group, the tag cleared, its subreaper dead: the file-locks mark still finds it, and it is killed."""
    tool = shell_tool(ShellSettings(), set())
    result = await tool.handler({"command": DAEMON_THEN_KILL, "timeout": 30}, ToolContext("c1", tmp_path))
    assert result.startswith("killed by SIGKILL · ")  # the subreaper's end is the call's
    [pid] = [int(line) for line in result.splitlines()[1:] if line.isdigit()]
    # SIGKILLed before the call returned; the kernel may take a moment to end it on a busy machine.
    await wait_until(lambda: not alive(pid))


def file_locks(result: str) -> tuple[list[str], list[str]]:
    """`ulimit -Sa; ulimit -Ha` as run_shell returned it: the file-locks lines' values, and every other line."""
    lines = result.splitlines()[1:]
    locks = [line.split()[-1] for line in lines if line.startswith("file locks")]
    return locks, [line for line in lines if not line.startswith("file locks")]


@pytest.mark.skipif(subreaper_problem() is not None, reason=f"no subreaper: {subreaper_problem()}")
async def test_the_mark_is_the_one_limit_a_command_sees_changed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Under the subreaper the file-locks limit, soft and hard, is the call's mark, not hotloop's own (a command
    can't raise it back to that unless it is root); every other limit is as without the subreaper."""
    command = {"command": "ulimit -Sa; ulimit -Ha"}
    marked, others = file_locks(await shell_tool(ShellSettings(), set()).handler(command, ToolContext("c", tmp_path)))
    monkeypatch.setattr(shell, "use_subreaper", False)
    own, direct = file_locks(await shell_tool(ShellSettings(), set()).handler(command, ToolContext("c", tmp_path)))
    assert others == direct
    hard = resource.getrlimit(LOCKS_LIMIT)[1]
    assert own[1] == ("unlimited" if hard == resource.RLIM_INFINITY else str(hard))
    assert marked[0] == marked[1] and marked[1].isdigit() and own[1] != marked[1]


@pytest.fixture
def venv_under_tmp() -> Iterator[Path]:
    """A venv in /tmp, as a CI clone makes, that imports this hotloop: its python, a link to the interpreter."""
    with tempfile.TemporaryDirectory(prefix="hotloop-venv-", dir="/tmp") as folder:
        venv = Path(folder)
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", folder], check=True, timeout=60)
        site = venv / "lib" / f"python{sys.version_info.major}.{sys.version_info.minor}" / "site-packages"
        # addsitedir, not a path line: it reads the editable install's own .pth there.
        (site / "hotloop-under-test.pth").write_text(
            f"import site; site.addsitedir({sysconfig.get_paths()['purelib']!r})\n"
        )
        yield venv / "bin" / "python"


def run_in(python: Path, code: str) -> str:
    ran = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    return ran.stdout.strip()


def test_the_self_test_from_a_venv_under_tmp_runs_a_python_the_sandbox_shows(venv_under_tmp: Path) -> None:
    """The probe's interpreter is where the sandbox can see it, and it ran: a bwrap that hides nothing is caught."""
    folder = venv_under_tmp.parent.parent
    recorder = folder / "bwrap"
    recorder.write_text(
        '#!/bin/sh\nprintf "%s\\n" "$@" > "$(dirname "$0")/argv.txt"\n'
        'while [ "$1" != "--" ]; do shift; done\nshift\nexec "$@"\n'
    )
    recorder.chmod(0o755)
    said = run_in(
        venv_under_tmp,
        f"from hotloop.agent.tools.sandbox import bwrap_problem; print(bwrap_problem({str(recorder)!r}))",
    )
    assert said.startswith("bwrap's sandbox leaves a host socket reachable: ")
    argv = (folder / "argv.txt").read_text().splitlines()
    python = Path(argv[argv.index("--") + 1])
    shown = [Path(argv[i + 1]) for i, part in enumerate(argv) if part == "--ro-bind" and argv[i + 1] == argv[i + 2]]
    hidden = [private for private in PRIVATE if python.is_relative_to(private)]
    assert not hidden or any(python.is_relative_to(bound) for bound in shown)
    assert not python.is_relative_to(folder)  # not the venv's link: the interpreter itself


@pytest.mark.skipif(sandbox_problem() is not None, reason=f"no sandbox here: {sandbox_problem()}")
def test_the_sandbox_works_from_a_venv_under_tmp(venv_under_tmp: Path) -> None:
    """Where bwrap works, hotloop run from a venv under /tmp finds its sandbox usable: no fallback, no warning."""
    said = run_in(
        venv_under_tmp,
        "import sys; from hotloop.agent.tools.shell import ShellSettings, sandbox_notice; "
        "print(sys.prefix, sandbox_notice(ShellSettings(sandbox='workspace-write')))",
    )
    assert said == f"{venv_under_tmp.parent.parent} None"
    assert os.path.realpath(venv_under_tmp.parent.parent).startswith("/tmp/")
