"""What an approval rule means: `TOOL` or `TOOL:PATTERN`, matched against what a call does.

For `run_shell` a pattern is a command, in words as the shell splits them (`pytest -q`,
`git status *`), matched against every simple command the call runs (`command_line.py`), never
against its text. A pattern's words are globs, one for each word of a command; a last word of
`*`, or a `*` at the end of the last word (`pytest*`, the older form), lets any further words
follow. The program is named bare: `/usr/bin/rm` is `rm` (the system's bin folders only).

- An **allow** rule is read strictly: a call is allowed only if *every* command it runs matches an
  allow rule word for word, `NAME=value` prefixes included, and writes no file by redirection.
  A call that can't be read whole (`$X`, `$(…)`, a heredoc that expands, …) is never allowed by a rule.
- A **deny** rule is read broadly: a call is denied if *any* command it runs (nested ones,
  `bash -c` strings and wrapped commands included) has the rule's program, every one of its
  flags in any spelling (`-rf` = `-r -f` = `-fr` = `--recursive --force`), and its other words in
  order, with any words between or after.

For `edit_file` and `write_file` a pattern is a glob over the path the write really reaches,
relative to the workspace (a symlink resolved); deny rules match the path as given too. For any
other tool it is a glob over the arguments as canonical JSON.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any

from hotloop.agent.command_line import SimpleCommand, program_name

SHELL = "run_shell"
FILE_TOOLS = frozenset({"edit_file", "write_file"})
RULE = r"^[A-Za-z0-9_.-]+(:.*)?$"  # a tool's name, then what its subject must match
# Other spellings of a short flag, by program: `--recursive` and `-R` are rm's `-r`.
SAME_FLAG: dict[str, dict[str, str]] = {
    "rm": {"--recursive": "r", "R": "r", "--force": "f", "--dir": "d"},
    "cp": {"--recursive": "r", "R": "r", "--force": "f"},
    "mv": {"--force": "f"},
    "ln": {"--force": "f", "--symbolic": "s"},
    "chmod": {"--recursive": "R"},
    "chown": {"--recursive": "R"},
    "chgrp": {"--recursive": "R"},
    "git": {"--force": "f"},
}
_CLUSTER = re.compile(r"^-[A-Za-z0-9]+$")


@dataclass(frozen=True)
class CommandPattern:
    """A run_shell rule's pattern: a glob a word, and whether more words may follow."""

    words: tuple[str, ...]
    rest: bool

    @classmethod
    def parse(cls, pattern: str) -> CommandPattern:
        words = shlex.split(pattern)  # a ValueError for unbalanced quotes: the config names the rule
        rest = bool(words) and words[-1].endswith("*") and not words[-1].endswith("[*]")
        if words and words[-1] == "*":
            words.pop()
        if not words:
            raise ValueError("names no program")
        return cls((program_name(words[0]), *words[1:]), rest)

    def allows(self, command: SimpleCommand) -> bool:
        """Every word of `command`, matched in order; only a readable command that writes no file by redirection."""
        if command.unread or command.writes or not command.words:
            return False
        words = (*command.assignments, program_name(command.program), *command.words[1:])
        if len(words) < len(self.words) or (len(words) > len(self.words) and not self.rest):
            return False
        return all(fnmatch.fnmatchcase(word, glob_) for word, glob_ in zip(words, self.words, strict=False))

    def denies(self, command: SimpleCommand) -> bool:
        """The program, every flag in any spelling, and the other words in order, with others between or after."""
        if not command.words or _base(command.program) != _base(self.words[0]):
            return False
        program = _base(self.words[0])
        flags, positional = _split(program, command.words[1:])
        wanted = [word.rstrip("*") if word.startswith("-") else word for word in self.words[1:]]
        for word in wanted:
            if word.startswith("-") and len(word) > 1 and not _has_flag(program, word, flags):
                return False
        remaining = iter(positional)
        return all(
            any(fnmatch.fnmatchcase(arg, word) for arg in remaining) for word in wanted if not word.startswith("-")
        )


def _base(word: str) -> str:
    return word.rpartition("/")[2]


def _split(program: str, args: list[str] | tuple[str, ...]) -> tuple[set[str], list[str]]:
    """A command's flags (every word before `--` that starts with `-`, each short cluster also as its letters)."""
    flags: set[str] = set()
    positional: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            positional.extend(words)
        elif word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            flags.add(name)
            flags.add(SAME_FLAG.get(program, {}).get(name, name))
            if _CLUSTER.match(word):
                flags.update(SAME_FLAG.get(program, {}).get(letter, letter) for letter in word[1:])
        else:
            positional.append(word)
    return flags, positional


def _has_flag(program: str, wanted: str, flags: set[str]) -> bool:
    same = SAME_FLAG.get(program, {})
    if any(fnmatch.fnmatchcase(flag, wanted) for flag in flags if flag.startswith("-")):
        return True
    if wanted.startswith("--"):
        return same.get(wanted, wanted) in flags
    return bool(_CLUSTER.match(wanted)) and all(same.get(letter, letter) in flags for letter in wanted[1:])


def split_rule(rule: str) -> tuple[str, str | None]:
    """A rule's tool and pattern (None: every call of the tool)."""
    name, colon, pattern = rule.partition(":")
    return name, pattern if colon else None


def check_rule(rule: str) -> str:
    """`rule` if it reads as a rule; else a ValueError saying why."""
    if not re.match(RULE, rule):
        raise ValueError(f"{rule!r} is not TOOL or TOOL:PATTERN (e.g. 'run_shell:pytest *')")
    name, pattern = split_rule(rule)
    if name == SHELL and pattern is not None:
        try:
            CommandPattern.parse(pattern)
        except ValueError as error:
            raise ValueError(f"{rule!r}: the command {error}") from None
    return rule


def exact_rule(tool: str, subject: str) -> str:
    """The rule that allows exactly this subject again: `*`, `?` and `[` matched as themselves."""
    return f"{tool}:{glob.escape(subject)}"


def exact_command_rule(command: SimpleCommand) -> str:
    """The rule that allows exactly this command again, word for word."""
    words = (*command.assignments, program_name(command.program), *command.words[1:])
    return f"{SHELL}:{shlex.join(glob.escape(word) for word in words)}"


def canonical_arguments(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, sort_keys=True, ensure_ascii=False)
