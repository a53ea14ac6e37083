"""Who lets a call with side effects run: rules, the user, or a flag.

Rules (`rules.py` says what a pattern means) are checked against what the call does: the commands
`run_shell` would run, the file a write would really reach. Deny rules win, then the user's
question where only a question may decide, then `--yes`, then allow rules. Only a question may
allow a write inside `.git/` (hooks and config there run code later), a call a tool marks as
destructive (an MCP tool's `destructiveHint`), or, when deny rules exist, a command they can't
rule out: one that can't be read whole, that runs code no rule can read (`source`, `python -c`),
or that may be what a rule denies (`/bin/r? -rf d`). With no rule deciding, the user is asked
(`Ask`), told why; headless there is no one to ask, so the call fails with the flag that would
allow it, or why none can. Read-only tools never ask.
"""

from __future__ import annotations

import fnmatch
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.command_line import CommandLine, read_command
from hotloop.agent.rules import (
    FILE_TOOLS,
    RULE,
    SHELL,
    CommandPattern,
    canonical_arguments,
    check_rule,
    exact_command_rule,
    exact_rule,
    split_rule,
)
from hotloop.agent.tools.registry import Tool

Pattern = Annotated[str, Meta(pattern=RULE, extra={"problem": "must be TOOL or TOOL:PATTERN"})]
GIT_WARNING = "inside .git/, where hooks and config run code: no rule or flag allows that, only you"


class ApprovalRules(Struct, frozen=True, forbid_unknown_fields=True):
    """`[approvals]` in the config: `allow = ["run_shell:pytest *"]`, `deny = ["run_shell:rm -rf *"]`."""

    allow: tuple[Pattern, ...] = ()
    deny: tuple[Pattern, ...] = ()

    def __post_init__(self) -> None:
        for rule in (*self.allow, *self.deny):
            check_rule(rule)  # a ValueError names the rule; msgspec makes it the config's error


Answer = Literal["once", "session", "deny"]
NO_ONE = "no one to ask"  # who refused a call headless: the run then fails


@dataclass(frozen=True)
class Subject:
    """What a call is judged by: its command, the file it writes, or its arguments."""

    text: str  # the command line; the path a write reaches, relative to the workspace; else canonical JSON
    given: str = ""  # the path as the call named it, where the write reaches another one (through a symlink)
    command: CommandLine | None = None  # run_shell's, as read
    file: bool = False  # `text` is the path a write reaches

    @property
    def inside_git(self) -> bool:
        return self.file and ".git" in PurePosixPath(self.text).parts


def subject_of(tool: Tool, arguments: dict[str, Any], workspace: Path) -> Subject:
    """What rules match for this call: the commands it runs, the file it writes, or its arguments."""
    if tool.name == SHELL and isinstance(command := arguments.get("command"), str):
        return Subject(command, command=read_command(command))
    if tool.name in FILE_TOOLS and tool.target is not None:
        reached, named = tool.target(arguments, workspace)
        return Subject(reached, "" if reached == named else named, file=True)
    return Subject(canonical_arguments(arguments))


@dataclass(frozen=True)
class Request:
    """A call waiting for the user's answer, with what the question must show."""

    call_id: str
    tool: str
    subject: str
    preview: str
    given: str = ""  # the path as the call named it, where the write reaches another one
    file: bool = False  # `subject` is the path a write reaches
    commands: tuple[str, ...] = ()  # run_shell: each command it runs, one line each
    programs: tuple[str, ...] = ()  # run_shell: the programs those commands run, each once
    unread: tuple[str, ...] = ()  # why no rule could allow it
    warning: str = ""
    session_rules: tuple[str, ...] = ()  # what "allow for this session" adds; () when nothing can


@dataclass(frozen=True)
class Reply:
    answer: Answer
    reason: str = ""  # a denial's, for the model


Ask = Callable[[Request], Awaitable[Reply]]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    by: str  # `rule run_shell:pytest *`, `you (once)`, `--yes`, …
    reason: str = ""
    asked: bool = False


def _matches(rule: str, tool: str, subject: Subject, *, deny: bool) -> str | None:
    """What of the call `rule` matches ("" for the whole call); None if it doesn't."""
    name, pattern = split_rule(rule)
    if name != tool:
        return None
    if pattern is None:
        return ""
    if subject.command is not None:
        if not deny:
            return None  # allow rules are matched command by command (`Approvals._allowed_by`)
        parsed = CommandPattern.parse(pattern)
        denied = next((c for c in subject.command.commands if parsed.denies(c)), None)
        return None if denied is None else "" if denied.shown == subject.text.strip() else denied.shown
    texts = (subject.text, subject.given) if deny and subject.given else (subject.text,)
    return "" if any(fnmatch.fnmatchcase(text, pattern) for text in texts) else None


def doubts(deny: tuple[str, ...], tool: str, subject: Subject) -> list[str]:
    """Why `tool`'s deny rules can't rule this command out before it runs; [] if they can, or there are none."""
    rules = [(rule, pattern) for rule in deny for name, pattern in [split_rule(rule)] if name == tool]
    if subject.command is None or not rules:
        return []
    said = [*subject.command.reasons(), *subject.command.doubts]
    for rule, pattern in rules:
        if pattern is None:
            continue  # the whole tool: denied already
        parsed = CommandPattern.parse(pattern)
        said += [
            f"{d}: the rule {rule!r} can't rule it out" for c in subject.command.commands if (d := parsed.doubt(c))
        ]
    return list(dict.fromkeys(said))


def session_rules(tool: str, subject: Subject) -> tuple[str, ...]:
    """The rules "allow for this session" adds: exactly this call again; () when no rule could allow it."""
    if subject.inside_git:
        return ()
    if subject.command is None:
        return (exact_rule(tool, subject.text),)
    if not subject.command.readable or not subject.command.commands:
        return ()
    if any(command.writes for command in subject.command.commands):
        return ()
    return tuple(dict.fromkeys(exact_command_rule(command) for command in subject.command.commands))


@dataclass
class Approvals:
    """The rules of a session, the ones the user added while it ran, and how to ask."""

    rules: ApprovalRules = field(default_factory=ApprovalRules)
    ask: Ask | None = None  # None: no one to ask (headless)
    allow_all: bool = False  # --yes
    _session: list[str] = field(default_factory=list)  # "always for this session" answers

    def allow(self, rule: str) -> None:
        """Allow calls matching `rule` for the rest of the session."""
        self._session.append(check_rule(rule))

    def ruling(self, tool: Tool, subject: Subject) -> Verdict | None:
        """The decision the rules and flags make without asking; None if only the user can decide."""
        for rule in self.rules.deny:
            if (denied := _matches(rule, tool.name, subject, deny=True)) is not None:
                runs = f": it runs `{denied}`" if denied else ""
                return Verdict(False, f"rule {rule}", f"denied by the rule {rule!r}{runs}")
        if self._only_asked(tool, subject):
            return None
        if self.allow_all:
            return Verdict(True, "--yes")
        if tool.destructive:
            return None
        by = self._allowed_by(tool.name, subject)
        return Verdict(True, "rule " + ", rule ".join(by)) if by else None

    def _only_asked(self, tool: Tool, subject: Subject) -> bool:
        """A write inside .git/, or a command the deny rules can't rule out before it runs."""
        return subject.inside_git or bool(doubts(self.rules.deny, tool.name, subject))

    def _allowed_by(self, tool: str, subject: Subject) -> list[str]:
        """The allow rules that together allow the call; [] if they don't."""
        rules = [rule for rule in (*self.rules.allow, *self._session) if split_rule(rule)[0] == tool]
        whole = next((rule for rule in rules if split_rule(rule)[1] is None), None)
        if subject.command is None or whole is not None:
            return [whole] if whole else [r for r in rules if _matches(r, tool, subject, deny=False) is not None][:1]
        if not subject.command.readable or not subject.command.commands:
            return []
        by: list[str] = []
        for command in subject.command.commands:
            rule = next((r for r in rules if CommandPattern.parse(str(split_rule(r)[1])).allows(command)), None)
            if rule is None:
                return []
            by.append(rule)
        return list(dict.fromkeys(by))

    def request(self, call_id: str, tool: str, subject: Subject, preview: str) -> Request:
        """The question about a call, with everything it must show."""
        command = subject.command
        doubted = doubts(self.rules.deny, tool, subject)
        return Request(
            call_id,
            tool,
            subject.text,
            preview,
            given=subject.given,
            file=subject.file,
            commands=tuple(c.shown for c in command.commands) if command is not None else (),
            programs=tuple(command.programs()) if command is not None else (),
            unread=tuple(doubted or (command.reasons() if command is not None else ())),
            warning=GIT_WARNING if subject.inside_git else "",
            session_rules=() if doubted else session_rules(tool, subject),
        )

    def refusal(self, tool: Tool, subject: Subject) -> Verdict:
        """Where no rule decides and no one can be asked (headless): no, naming what would allow it, if anything."""
        if subject.inside_git:
            reason = f"{tool.name} would write {subject.text} {GIT_WARNING}, and no one can be asked here"
            return Verdict(False, NO_ONE, reason)
        if doubted := doubts(self.rules.deny, tool.name, subject):
            reason = f"{tool.name} may run what a deny rule forbids ({'; '.join(doubted)})"
            return Verdict(False, NO_ONE, f"{reason}: only a question can allow it, and there is no one to ask here")
        rules = () if tool.destructive else session_rules(tool.name, subject)
        flags = " ".join(f"--allow {shlex.quote(rule)}" for rule in rules)
        flag = f"{flags} or --yes" if flags else "--yes"
        return Verdict(False, NO_ONE, f"{tool.name} needs approval, which only {flag} gives here")

    async def ask_user(self, request: Request) -> Verdict:
        """The user's answer, where no rule decides."""
        assert self.ask is not None
        reply = await self.ask(request)
        if reply.answer == "deny":
            reason = "the user denied this call" + (f": {reply.reason}" if reply.reason else "")
            return Verdict(False, "you", reason, asked=True)
        if reply.answer == "session" and request.session_rules:
            for rule in request.session_rules:
                self.allow(rule)
            return Verdict(True, "you, for this session", asked=True)
        return Verdict(True, "you, once", asked=True)
