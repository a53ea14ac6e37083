"""Who lets a call with side effects run: rules, the user, or a flag.

A rule is `TOOL` or `TOOL:PATTERN` (fnmatch, e.g. `run_shell:pytest*`, `edit_file:docs/*`),
matched against the call's subject: `run_shell`'s command, a file tool's path, another tool's
arguments as canonical JSON. Deny rules win, then `--yes`; a tool marked destructive (an MCP
tool's `destructiveHint`) is asked about whatever the allow rules say. With no rule deciding,
the user is asked (`Ask`); headless there is no one to ask, so the call fails with the flag that
would allow it. Read-only tools never ask.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import shlex
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from msgspec import Meta, Struct

from hotloop.agent.tools.registry import Tool

# Which argument is a tool's subject; other tools are matched on all their arguments.
SUBJECTS = {"run_shell": "command", "edit_file": "path", "write_file": "path"}

RULE = r"^[A-Za-z0-9_.-]+(:.*)?$"  # a tool's name, then what its subject must match
Pattern = Annotated[str, Meta(pattern=RULE, extra={"problem": "must be TOOL or TOOL:PATTERN"})]


class ApprovalRules(Struct, frozen=True, forbid_unknown_fields=True):
    """`[approvals]` in the config: `allow = ["run_shell:pytest*"]`, `deny = ["run_shell:rm -rf*"]`."""

    allow: tuple[Pattern, ...] = ()
    deny: tuple[Pattern, ...] = ()


Answer = Literal["once", "session", "deny"]
NO_ONE = "no one to ask"  # who refused a call headless: the run then fails


@dataclass(frozen=True)
class Request:
    """A call waiting for the user's answer."""

    call_id: str
    tool: str
    subject: str
    preview: str


@dataclass(frozen=True)
class Reply:
    answer: Answer
    reason: str = ""  # a denial's, for the model


Ask = Callable[[Request], Awaitable[Reply]]


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    by: str  # `rule run_shell:pytest*`, `you (once)`, `--yes`, …
    reason: str = ""
    asked: bool = False


def subject_of(tool: str, arguments: dict[str, Any]) -> str:
    """What rules match for this call: the command, the path, or the arguments as canonical JSON."""
    key = SUBJECTS.get(tool)
    if key is not None and isinstance(arguments.get(key), str):
        return str(arguments[key])
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)


def rule_for(tool: str, subject: str) -> str:
    """The rule that allows exactly this call again: `run_shell:pytest -q`, its `*`, `?` and `[` matched as such."""
    return f"{tool}:{glob.escape(subject)}"


def _matches(rule: str, tool: str, subject: str) -> bool:
    name, colon, pattern = rule.partition(":")
    return name == tool and (not colon or fnmatch.fnmatchcase(subject, pattern))


@dataclass
class Approvals:
    """The rules of a session, the ones the user added while it ran, and how to ask."""

    rules: ApprovalRules = field(default_factory=ApprovalRules)
    ask: Ask | None = None  # None: no one to ask (headless)
    allow_all: bool = False  # --yes
    _session: list[str] = field(default_factory=list)  # "always for this session" answers

    def allow(self, rule: str) -> None:
        """Allow calls matching `rule` for the rest of the session."""
        self._session.append(rule)

    def ruling(self, tool: Tool, subject: str) -> Verdict | None:
        """The decision the rules and flags make without asking; None if only the user can decide."""
        for rule in self.rules.deny:
            if _matches(rule, tool.name, subject):
                return Verdict(False, f"rule {rule}", f"denied by the rule {rule!r}")
        if self.allow_all:
            return Verdict(True, "--yes")
        if tool.destructive:
            return None
        for rule in (*self.rules.allow, *self._session):
            if _matches(rule, tool.name, subject):
                return Verdict(True, f"rule {rule}")
        return None

    def refusal(self, tool: Tool, subject: str) -> Verdict:
        """Where no rule decides and no one can be asked (headless): no, naming the flag that would allow it."""
        rule = shlex.quote(rule_for(tool.name, subject))
        flag = "--yes" if tool.destructive else f"--allow {rule} or --yes"
        return Verdict(False, NO_ONE, f"{tool.name} needs approval, which only {flag} gives here")

    async def ask_user(self, request: Request) -> Verdict:
        """The user's answer, where no rule decides."""
        assert self.ask is not None
        reply = await self.ask(request)
        if reply.answer == "deny":
            reason = "the user denied this call" + (f": {reply.reason}" if reply.reason else "")
            return Verdict(False, "you", reason, asked=True)
        if reply.answer == "session":
            self.allow(rule_for(request.tool, request.subject))
        return Verdict(True, "you, for this session" if reply.answer == "session" else "you, once", asked=True)
