"""A rule means what it says: allow rules cover a call only if they cover every command it runs, and
deny rules catch a command in any spelling (issue 23, items 2 and 3).

The tables are the attack matrix: chains, pipes, substitutions, subshells, quoting tricks, `bash -c`,
env prefixes, absolute program paths and flag spellings, each judged by the real parser.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from hotloop.agent.approvals import ApprovalRules, Approvals, session_rules, subject_of
from hotloop.agent.command_line import read_command
from hotloop.agent.rules import check_rule
from hotloop.agent.tools.registry import Tool, ToolContext


async def _never(arguments: dict[str, Any], ctx: ToolContext) -> str:
    raise AssertionError("rules are judged without running anything")


SHELL = Tool("run_shell", "Run a command.", {"type": "object"}, _never, side_effects=True)


def ruling(command: str, allow: tuple[str, ...] = (), deny: tuple[str, ...] = (), yes: bool = False) -> bool | None:
    """True: a rule or flag allows it; False: a rule denies it; None: only a question could."""
    verdict = Approvals(ApprovalRules(allow=allow, deny=deny), allow_all=yes).ruling(
        SHELL, subject_of(SHELL, {"command": command}, Path("."))
    )
    return None if verdict is None else verdict.allowed


# Each ran a second command under the README's own `--allow 'run_shell:pytest*'` (5 of 5 before).
NOT_ALLOWED_BY_PYTEST = [
    "pytest --version; touch X",
    "pytest && touch X",
    "pytest || touch X",
    "pytest$(touch X)",
    "pytest `touch X`",
    "pytest | sh",
    "pytest |& tee log",
    "pytest\ntouch X",
    "pytest & touch X",
    "(pytest; touch X)",
    "{ pytest; touch X; }",
    "pytest > .git/hooks/pre-commit",
    "pytest >> ~/.bashrc",
    "pytest <(touch X)",
    'pytest "$(touch X)"',
    "pytest $HOME",
    "pytest ${X:-$(touch X)}",
    "FOO=1 pytest",
    "LD_PRELOAD=./evil.so pytest",
    "PATH=.:$PATH pytest",
    "PATH=/tmp; pytest",
    "./pytest",
    "/tmp/pytest -q",
    "bash -c pytest",
    "eval pytest",
    "f() { touch X; }; pytest; f",
    "pytest {a,b}",
    "pytest <<EOF\n$(touch X)\nEOF",
    "if pytest; then touch X; fi",
    "for f in a; do pytest; touch X; done",
    "pytest 'unterminated",
    "sudo pytest",
    "pytest; $(printf touch) X",
]
ALLOWED_BY_PYTEST = [
    "pytest",
    "pytest -q tests/test_x.py",
    "  pytest   -q",
    "/usr/bin/pytest -q",
    "pytest 'a b' \"c d\"",
    "pytest -k 'a and not b' > /dev/null 2>&1",
    "pytest <<'EOF'\n$(not run: the heredoc is quoted)\nEOF",
]


@pytest.mark.parametrize("command", NOT_ALLOWED_BY_PYTEST)
@pytest.mark.parametrize("rule", ["run_shell:pytest*", "run_shell:pytest *"])
def test_an_allow_rule_covers_nothing_it_does_not_name(command: str, rule: str) -> None:
    assert ruling(command, allow=(rule,)) is None


@pytest.mark.parametrize("command", ALLOWED_BY_PYTEST)
def test_an_allow_rule_covers_its_program_with_any_arguments(command: str) -> None:
    assert ruling(command, allow=("run_shell:pytest *",)) is True


def test_a_call_is_allowed_only_when_every_command_in_it_is() -> None:
    rules = ("run_shell:pytest *", "run_shell:ruff check *")
    assert ruling("pytest -q && ruff check .", allow=rules) is True
    assert ruling("pytest -q && ruff format .", allow=rules) is None
    assert ruling("pytest -q | ruff check -", allow=rules) is True
    assert ruling("ruff check $(touch X)", allow=rules) is None


def test_env_prefixes_and_exact_words_are_matched_word_for_word() -> None:
    assert ruling("PYTHONPATH=src pytest -q", allow=("run_shell:PYTHONPATH=src pytest *",)) is True
    assert ruling("PYTHONPATH=evil pytest -q", allow=("run_shell:PYTHONPATH=src pytest *",)) is None
    assert ruling("git status", allow=("run_shell:git status",)) is True
    assert ruling("git status --short", allow=("run_shell:git status",)) is None  # no `*`: no more words
    assert ruling("git push", allow=("run_shell:git status *",)) is None


# Each deleted its folder under `deny = ["run_shell:rm -rf*"]` before (only `rm -rf dir` was stopped).
DENIED_AS_RM_RF = [
    "rm -rf dir",
    " rm -rf dir",
    "rm  -rf dir",
    "rm -r -f dir",
    "rm -fr dir",
    "rm -Rf dir",
    "rm -f -R dir",
    "rm --recursive --force dir",
    "rm -r --force dir",
    "rm -rfv dir",
    "rm dir -rf",
    "rm -rf -- dir",
    "/bin/rm -rf dir",
    "/usr/bin/rm -rf dir",
    "/opt/tools/rm -rf dir",
    "\\rm -rf dir",
    "'rm' -rf dir",
    '"rm" "-rf" dir',
    "r''m -r''f dir",
    "true; rm -rf dir",
    "true && rm -rf dir",
    "false || rm -rf dir",
    "echo dir | xargs rm -rf",
    "ls | rm -rf dir",
    "(cd x && rm -rf dir)",
    "{ rm -rf dir; }",
    "echo $(rm -rf dir)",
    "cat <(rm -rf dir)",
    "bash -c 'rm -rf dir'",
    'sh -c "rm -rf dir"',
    "bash -lc 'cd x; rm -rf dir'",
    "bash -c \"bash -c 'rm -rf dir'\"",
    "eval 'rm -rf dir'",
    "sudo rm -rf dir",
    "sudo -u root rm -rf dir",
    "env FOO=1 rm -rf dir",
    "env -i rm -rf dir",
    "FOO=1 rm -rf dir",
    "command rm -rf dir",
    "exec rm -rf dir",
    "nohup rm -rf dir",
    "nice -n 5 rm -rf dir",
    "timeout 10 rm -rf dir",
    "time rm -rf dir",
    "find . -name dir -exec rm -rf {} +",
    "if true; then rm -rf dir; fi",
    "for d in a; do rm -rf dir; done",
    "rm >/dev/null -rf dir",
    "x=$(rm -rf dir)",
    "cat <<EOF\n$(rm -rf dir)\nEOF",
]
NOT_DENIED = ["rm file", "rm -f file", "rm -r dir", "rmdir dir", "echo rm -rf dir", "git rm -rf dir", "ls -rf"]
# Can't be read whole: no deny rule can be checked against them, so they're asked about, whatever --yes says.
UNREAD = ["$X -rf dir", "r=rm; $r -rf dir", "$'\\x72m' -rf dir", "rm -{r,f} dir", "eval $CMD", "r\\\nm -rf dir"]


@pytest.mark.parametrize("command", DENIED_AS_RM_RF)
@pytest.mark.parametrize("rule", ["run_shell:rm -rf*", "run_shell:rm -rf *", "run_shell:rm -fr"])
def test_a_deny_rule_stops_every_spelling(command: str, rule: str) -> None:
    assert ruling(command, allow=("run_shell",), deny=(rule,), yes=True) is False


@pytest.mark.parametrize("command", NOT_DENIED)
def test_a_deny_rule_stops_only_what_it_names(command: str) -> None:
    assert ruling(command, deny=("run_shell:rm -rf*",), yes=True) is True


@pytest.mark.parametrize("command", UNREAD)
def test_what_cannot_be_read_is_asked_about_even_with_yes_when_deny_rules_exist(command: str) -> None:
    assert not read_command(command).readable
    assert ruling(command, deny=("run_shell:rm -rf*",), yes=True) is None
    assert ruling(command, allow=("run_shell:* *",)) is None
    assert ruling(command, yes=True) is True  # no deny rule to check: --yes means yes


def test_the_tables_hold_forty_command_lines_and_more() -> None:
    assert len(NOT_ALLOWED_BY_PYTEST) + len(DENIED_AS_RM_RF) + len(UNREAD) >= 40


def test_deny_rules_keep_their_own_spelling_for_other_flags() -> None:
    assert ruling("git push --force origin main", deny=("run_shell:git push -f*",), yes=True) is False
    assert ruling("git -C repo push -f", deny=("run_shell:git push --force*",), yes=True) is False
    assert ruling("git push origin main", deny=("run_shell:git push --force*",), yes=True) is True
    assert ruling("git push --force-with-lease", deny=("run_shell:git push --force*",), yes=True) is True


def test_allow_for_this_session_names_one_exact_rule_per_command() -> None:
    assert session_rules("run_shell", subject_of(SHELL, {"command": "pytest -q && ruff check ."}, Path("."))) == (
        "run_shell:pytest -q",
        "run_shell:ruff check .",
    )
    assert session_rules("run_shell", subject_of(SHELL, {"command": "ls *.py 'a b'"}, Path("."))) == (
        "run_shell:ls '[*].py' 'a b'",
    )
    for command in ("pytest $(id)", "echo hi > out.txt"):
        assert session_rules("run_shell", subject_of(SHELL, {"command": command}, Path("."))) == ()


@pytest.mark.parametrize("rule", ["run_shell:pytest 'unterminated", "run_shell:*", "run shell", "run_shell:"])
def test_a_rule_that_names_no_command_is_refused(rule: str) -> None:
    with pytest.raises(ValueError):
        check_rule(rule)
