"""A deny rule holds whatever spelling runs its program (issue 34, item 2).

With `deny = ["run_shell:rm -rf *"]` and `--yes`, 17 of 31 spellings deleted the folder: long options
by a prefix, a program named by a glob, `env -S`, `flock -c`, `su -c`, `unshare`, an alias, `trap`,
git's `!` aliases and fsmonitor. Each attack below is the test's input, judged by the real parser and
rules: what runs is looked through and denied; what can't be known before it runs is asked about,
even under `--yes`, and the question says why. The README's tables are tested row by row.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.approvals import ApprovalRules, Approvals, subject_of
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.cli import main
from hotloop.tui.widgets.approval_bar import ApprovalBar

from support import present
from tui_support import answer, drawn, idle, running_app, send, wait_until, write_config

README = Path(__file__).resolve().parent.parent / "README.md"
RULE = "run_shell:rm -rf *"
SCHEMA = {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}


async def _never(arguments: dict[str, Any], ctx: ToolContext) -> str:
    raise AssertionError("rules are judged without running anything")


SHELL = Tool("run_shell", "Run a command.", {"type": "object"}, _never, side_effects=True)


def judged(command: str, deny: tuple[str, ...] = (RULE,), allow: tuple[str, ...] = ("run_shell",)) -> bool | None:
    """Under --yes: True allowed, False denied by a rule, None only a question may allow it."""
    approvals = Approvals(ApprovalRules(allow=allow, deny=deny), allow_all=True)
    verdict = approvals.ruling(SHELL, subject_of(SHELL, {"command": command}, Path(".")))
    return None if verdict is None else verdict.allowed


def allowed(command: str, *rules: str) -> bool:
    """Whether these allow rules alone (no --yes, no deny rule) allow the call."""
    verdict = Approvals(ApprovalRules(allow=rules)).ruling(SHELL, subject_of(SHELL, {"command": command}, Path(".")))
    return verdict is not None and verdict.allowed


def refusal(command: str, deny: tuple[str, ...] = (RULE,)) -> str:
    """What a headless run says of a call only a question may allow."""
    approvals = Approvals(ApprovalRules(deny=deny), allow_all=True)
    return approvals.refusal(SHELL, subject_of(SHELL, {"command": command}, Path("."))).reason


# The spellings that deleted the folder in the issue's matrix, and the brief's: each now denied outright.
DENIED = [
    "rm --rec --for v",
    "rm --re --fo v",
    "rm --recursive --force v",
    "rm -r -f v",
    "rm -fr v",
    "command rm -rf v",
    "\\rm -rf v",
    '"r"m -rf v',
    "r''m -rf v",
    "busybox rm -rf v",
    "coreutils --coreutils-prog=rm -rf v",
    "env -S 'rm -rf v'",
    "env --split-string='rm -rf v'",
    "env --spl='rm -rf v'",
    "env -iS 'rm -rf v'",
    "env -S 'rm -rf' v",
    "flock L -c 'rm -rf v'",
    "flock -w 5 L rm -rf v",
    "su -c 'rm -rf v'",
    "su - root -c 'rm -rf v'",
    "runuser -u x -- rm -rf v",
    "setpriv --reuid=1000 rm -rf v",
    "setpriv --reuid 1000 rm -rf v",
    "unshare -r rm -rf v",
    "unshare --user --map-root-user rm -rf v",
    "chroot / rm -rf v",
    "script -qc 'rm -rf v' /dev/null",
    "script /dev/null -c 'rm -rf v'",
    "alias x='rm -rf'; x v",
    "alias x='rm -rf'\nx v",
    "trap 'rm -rf v' EXIT",
    "trap -- 'rm -rf v' 0",
    "git -c alias.x='!rm -rf v' x",
    "git -c alias.x='!rm' x -rf v",
    "git -c Alias.X='!sh' x -c 'rm -rf v'",
    "git -c core.fsmonitor='rm -rf v' status",
    "git -c core.pager='rm -rf v' log",
    "git -c core.editor='rm -rf v' commit",
    "git -c core.sshCommand='rm -rf v' fetch",
    "git config alias.x '!rm -rf v'",
    "git config core.pager 'rm -rf v'",
    "git rebase -x 'rm -rf v' main",
    "git bisect run rm -rf v",
    "git submodule foreach 'rm -rf v'",
    "sudo -u x rm -rf v",
    "sudo --user=x rm -rf v",
    "sudo -s rm -rf v",
    "doas rm -rf v",
    "pkexec rm -rf v",
    "xargs rm -rf <<<v",
    "xargs rm <<< '-rf v'",
    "sh <<EOF\nrm -rf v\nEOF",
    "sh <<'EOF'\nrm -rf v\nEOF",
    "bash <<< 'rm -rf v'",
    "bash -c -- 'rm -rf v'",
    "bash -o pipefail -c 'rm -rf v'",
    "exec -a x rm -rf v",
    "time -f %e rm -rf v",
    "watch 'rm -rf v'",
    "watch -n1 -- 'rm -rf v'",
    "watch -x rm -rf v",
    "nohup rm -rf v",
    "setsid -f rm -rf v",
    "stdbuf -oL rm -rf v",
    "ionice -c 3 rm -rf v",
    "chrt -f 1 rm -rf v",
    "taskset -c 0 rm -rf v",
    "systemd-run --user --scope -p CPUQuota=5% rm -rf v",
    "parallel rm -rf ::: v",
    "parallel 'rm -rf {}' ::: v",
    "timeout -s KILL 5 rm -rf v",
    "timeout --sig=KILL 5 rm -rf v",
    "nice -n 5 -- rm -rf v",
    "nsenter -t 1 -m rm -rf v",
    "strace -o /dev/null rm -rf v",
    "find . -exec true \\; -exec rm -rf v \\;",
    "find . -exec sh -c 'rm -rf \"$1\"' _ {} \\;",
    "f() { rm -rf v; }",
    "coproc rm -rf v",
    "! rm -rf v",
    "builtin eval 'rm -rf v'",
    "PAGER='rm -rf v' man ls",
    "GIT_PAGER='rm -rf v' git log",
    "export GIT_SSH_COMMAND='rm -rf v'",
    "mapfile -C 'rm -rf v' -c 1 < f",
    "tar -xf a.tar --to-command='rm -rf v'",
    "tar -cf /dev/null x --checkpoint=1 --checkpoint-action=exec='rm -rf v'",
    "rsync -e 'rm -rf v' a b:c",
    "man -P 'rm -rf v' ls",
    "ssh -o ProxyCommand='rm -rf v' h",
    "ssh h rm -rf v",
    "sg wheel -c 'rm -rf v'",
]
# What no rule can know before it runs: asked about, even under --yes, with the reason in the question.
ASKED = {
    "/bin/r? -rf v": "its program is named by a glob (/bin/r?), which could be rm",
    "/usr/*/r* -rf v": "its program is named by a glob (/usr/*/r*), which could be rm",
    "$X -rf v": "a word comes from a variable",
    "${X}m -rf v": "a word comes from a parameter expansion",
    "touch ./-rf; rm *": "an argument of rm is a glob (*) that a file named like -rf would fill",
    "echo -rf v | xargs rm": "rm gets more arguments when it runs (xargs adds the words it reads)",
    "echo 'rm -rf v' | sh": "sh reads its commands from stdin",
    "echo 'rm -rf v' | bash -s": "bash reads its commands from stdin",
    "echo 'rm -rf v' | parallel": "parallel runs the commands it reads from its input",
    "xargs -I{} sh -c '{}' <<< 'rm -rf v'": "xargs puts what it reads into the program or the line it runs",
    "su": "su starts a shell, which reads its commands from stdin",
    "sudo -s": "sudo starts a shell, which reads its commands from stdin",
    "source file": "source file runs a file in this shell, which can't be read before it runs",
    ". file": ". file runs a file in this shell",
    "bash build.sh": "bash runs the script build.sh, which can't be read before it runs",
    "perl -e 'system(\"rm -rf v\")'": "perl -e runs code in another language, which a deny rule can't read",
    "python3 -c 'import shutil; shutil.rmtree(\"v\")'": "python3 -c runs code in another language",
    "python3 - <<'EOF'\nimport shutil\nEOF": "python3 runs code from stdin or a string",
    "node --eval 'x'": "node --eval runs code in another language",
    "awk 'BEGIN { system(\"rm -rf v\") }'": "awk's program runs commands (system(), a pipe)",
    "vim -c '!rm -rf v'": "vim runs editor commands, which a deny rule can't read",
    "hash -p /bin/rm x; x -rf v": "hash -p makes a name run another program",
    "enable -f ./x.so rm": "enable -f loads a builtin from a file",
    "PATH=/tmp/bin ls": "PATH= makes a name run another program",
    "BASH_ENV=x bash -c ls": "BASH_ENV= makes bash run a file first",
    "env 'BASH_FUNC_ls%%=() { rm -rf v; }' bash -c ls": "BASH_FUNC_ls%% defines a function",
    "PS4='$(rm -rf v)' bash -xc :": "PS4 is expanded as code when bash shows it",
    "printf -v PAGER 'rm -rf v'; export PAGER; git log": "printf sets PAGER, which holds code",
    "declare -n r=PAGER; r='rm -rf v'": "declare -n makes a name stand for another variable",
    "git -c core.hooksPath=h commit -m x": "git's core.hooksPath runs code from a file",
    "git --config-env=core.pager=P log": "git --config-env takes core.pager from a variable",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0='rm -rf v' git log": "GIT_CONFIG_COUNT=",
    "torsocks rm -rf v": "torsocks, which hotloop doesn't look through, may run `rm -rf v`",
    "bwrap --bind / / rm -rf v": "bwrap, which hotloop doesn't look through, may run `rm -rf v`",
}
# What the rule never meant: still allowed under --yes.
NOT_DENIED = [
    "rm -r v",
    "rm -f *.log",
    "rm -r -- -f",
    "git rm -rf v",
    "echo 'rm -rf v'",
    "grep -rn 'rm -rf' .",
    "git commit -m 'rm -rf v'",
    "ls *",
    "python -m pytest -q",
    "python x.py",
    "perl x.pl",
    "awk '{ print $1 }' f",
    "find . -name x | xargs grep y",
    "git -c core.pager=cat log",
    "git -c core.fsmonitor=true status",
    "git -c user.name=x commit -m y",
    "cat <<'EOF'\n$(rm -rf v)\nEOF",
    "env",
    "xargs",
]


@pytest.mark.parametrize("command", DENIED)
def test_a_deny_rule_holds_whatever_spelling_runs_its_program(command: str) -> None:
    """Each spelling is denied by the rule, with --yes and an allow rule for every shell call."""
    assert judged(command) is False


@pytest.mark.parametrize("command", ASKED)
def test_what_a_deny_rule_cannot_rule_out_is_asked_about_and_the_refusal_says_why(command: str) -> None:
    """Not --yes, not an allow rule: only a question may allow it, and headless the refusal names why."""
    assert judged(command) is None
    said = refusal(command)
    assert ASKED[command] in said and said.startswith("run_shell may run what a deny rule forbids (")
    assert judged(command, deny=()) is True  # no deny rule to rule it out: --yes means yes


@pytest.mark.parametrize("command", NOT_DENIED)
def test_a_deny_rule_still_denies_only_what_it_names(command: str) -> None:
    assert judged(command) is True


def test_the_question_says_why_and_offers_no_rule_for_the_session() -> None:
    """The app's box and ACP show `Request.unread`; "allow for this session" could never skip the question."""
    approvals = Approvals(ApprovalRules(deny=(RULE,)))
    request = approvals.request("c1", "run_shell", subject_of(SHELL, {"command": "/bin/r? -rf v"}, Path(".")), "")
    assert request.unread == (
        f"its program is named by a glob (/bin/r?), which could be rm: the rule {RULE!r} can't rule it out",
    )
    assert request.session_rules == ()
    plain = approvals.request("c2", "run_shell", subject_of(SHELL, {"command": "ls -l"}, Path(".")), "")
    assert plain.unread == () and plain.session_rules == ("run_shell:ls -l",)


def test_long_options_match_by_any_prefix_and_no_further() -> None:
    deny = ("run_shell:git push --force*",)
    assert judged("git push --forc origin main", deny) is False
    assert judged("git -c alias.p='push --force' p", deny) is False
    assert judged("git -c alias.p=push p -f", deny) is False
    assert judged("git push --force-with-lease", deny) is True
    assert judged("git push --follow-tags", deny) is True


def test_allow_rules_cover_what_a_setting_or_xargs_runs_only_if_they_name_it() -> None:
    """A call is allowed only if every command matches: the pager a setting names, the words xargs adds."""
    assert not allowed("git -c core.pager='rm -rf v' log", "run_shell:git *")
    assert allowed("git -c core.pager=cat log", "run_shell:git *", "run_shell:cat")
    assert not allowed("echo a | xargs git status", "run_shell:echo *", "run_shell:xargs *", "run_shell:git status")
    assert allowed("echo a | xargs git add", "run_shell:echo *", "run_shell:xargs *", "run_shell:git add *")


def readme_rows(header: str) -> dict[str, list[str]]:
    """The README table under `header`: each row's first cell, and the commands its second cell lists."""
    readme = README.read_text(encoding="utf-8")
    table = readme[readme.index(header) :].split("\n\n", 1)[0].splitlines()[2:]
    rows = {}
    for line in table:
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows[cells[0]] = [c.replace("\\|", "|") for c in re.findall(r"`((?:[^`])+)`", cells[1])]
    return rows


@pytest.mark.parametrize("row", readme_rows("| looked through | denied |"))
def test_every_row_of_the_readmes_looked_through_table_is_denied(row: str) -> None:
    commands = readme_rows("| looked through | denied |")[row]
    assert commands
    assert [c for c in commands if judged(c) is not False] == []


@pytest.mark.parametrize("row", readme_rows("| can't be known before it runs | asked |"))
def test_every_row_of_the_readmes_asked_table_is_asked_about(row: str) -> None:
    commands = readme_rows("| can't be known before it runs | asked |")[row]
    assert commands
    assert [c for c in commands if judged(c) is not None] == []


@pytest.mark.parametrize("depth", [10, 200, 5000])
def test_a_command_nested_past_any_stack_is_asked_about_not_a_crash(depth: int) -> None:
    """`$($($(…)))` thousands deep: read up to a bound, past it the line is unread, so asked about, and says why."""
    nested = "a=" + "$(" * depth + "rm -rf v" + ")" * depth
    assert judged(nested) is (False if depth < 50 else None)
    if depth > 50:
        assert "it nests more than 150 levels deep" in refusal("true; " + nested)


def test_the_tables_hold_the_issues_spellings_and_more() -> None:
    assert len(DENIED) + len(ASKED) >= 120


def test_a_headless_run_with_yes_deletes_nothing_and_says_why_each_call_was_refused(
    tmp_path: Path, isolated_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`hotloop run --yes` against a model that tries spellings the matrix saw delete the folder: each folder stays."""
    attacks = ["rm --rec --for d1", "/bin/r? -rf d2", "env -S 'rm -rf d3'", "flock L -c 'rm -rf d4'"]
    attacks += ["alias x='rm -rf'\nx d5", "trap 'rm -rf d6' EXIT", "git -c alias.x='!rm -rf d7' x", "unshare rm -rf d8"]
    here = tmp_path / "project"
    here.mkdir()
    monkeypatch.chdir(here)
    for n in range(1, len(attacks) + 1):
        (here / f"d{n}").mkdir()
    steps = [{"tool_calls": [{"name": "run_shell", "arguments": {"command": c}} for c in attacks]}, {"text": "done"}]
    (isolated_home / "steps.json").write_text(json.dumps(steps))
    (isolated_home / "config.toml").write_text(
        '[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\nscenario = "'
        f'{isolated_home / "steps.json"}"\n[routing]\ntitles = false\n[approvals]\ndeny = ["{RULE}"]\n'
    )
    assert main(["run", "--yes", "clean up"]) == 1  # a call only a question could allow fails the run
    assert sorted(p.name for p in here.iterdir() if p.is_dir()) == [f"d{n}" for n in range(1, len(attacks) + 1)]
    err = capsys.readouterr().err
    assert err.count(f"denied by the rule {RULE!r}") == len(attacks) - 1
    assert "its program is named by a glob (/bin/r?), which could be rm" in err


async def test_the_apps_question_names_why_a_deny_rule_cannot_rule_the_call_out(isolated_home: Path) -> None:
    """The approval box's note says the program is named by a glob; denying it runs nothing."""
    call = {"tool_calls": [{"name": "run_shell", "arguments": {"command": "/bin/r? -rf v"}}]}
    write_config(isolated_home, [call, {"text": "done"}])
    config = isolated_home / "config.toml"
    config.write_text(config.read_text() + f'[approvals]\ndeny = ["{RULE}"]\n')
    ran: list[str] = []

    async def handler(arguments: dict[str, Any], ctx: ToolContext) -> str:
        ran.append(arguments["command"])
        return "exit 0"

    tool = Tool("run_shell", "Run a command.", SCHEMA, handler, side_effects=True)
    async with running_app() as (app, pilot):
        present(app.session.runtime).tools.replace(tool)
        await send(app, pilot, "clean up")
        bar = app.query_one(ApprovalBar)
        await wait_until(lambda: bool(bar.requests) and "named by a glob" in drawn(app))
        assert "no rule can allow this: its program is named by a glob (/bin/r?)" in drawn(app)
        assert bar.requests[0].session_rules == ()
        await answer(app, "n")
        await idle(app, pilot)
        assert ran == []
