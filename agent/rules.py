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
  flags in any spelling (`-rf` = `-r -f` = `-fr` = `--recursive --force` = `--rec --for`, a long
  option by any prefix, as GNU getopt takes it), and its other words in order, with any words
  between or after. Where a command only *may* match, the rule can't rule it out (`doubt`): its
  program named by a glob that could be the rule's (`/bin/r? -rf d`), a glob argument that could
  expand to one of its flags (`rm *` by a file named `-rf`), arguments it gets at run time
  (`xargs rm`), or a program hotloop doesn't look through given the rule's command as its words
  (`bwrap --bind / / rm -rf d`).

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

from hotloop.agent.carriers import CARRIERS
from hotloop.agent.command_line import SimpleCommand, program_name
from hotloop.agent.runners import LOOKED_THROUGH

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
_WILDCARDS = re.compile(r"\[[^]]*\]|[*?]")
# Programs whose words are data, or that hotloop reads through itself: a rule's command among their words runs only
# as read (`echo rm -rf d`, `git rm -rf d`).
KNOWN = frozenset(
    {"echo", "printf", "man", "which", "type", "whatis", "whereis", "apropos", *LOOKED_THROUGH, *CARRIERS}
)


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
        if command.unread or command.writes or not command.words or (command.more and not self.rest):
            return False
        words = (*command.assignments, program_name(command.program), *command.words[1:])
        if len(words) < len(self.words) or (len(words) > len(self.words) and not self.rest):
            return False
        return all(fnmatch.fnmatchcase(word, glob_) for word, glob_ in zip(words, self.words, strict=False))

    def denies(self, command: SimpleCommand) -> bool:
        """The program, every flag in any spelling, and the other words in order, with others between or after."""
        return self._judged(command.words, command) is True

    def doubt(self, command: SimpleCommand) -> str:
        """Why `command` may be one this rule denies, though it can't be told before it runs; "" if it can."""
        judged = self._judged(command.words, command)
        return judged if isinstance(judged, str) else ""

    def _judged(self, words: tuple[str, ...], command: SimpleCommand, at: int = 0) -> bool | str:
        """True: denied; a reason: may be; False: not. `words` are `command.words[at:]`."""
        if not words:
            return False
        program, name = _base(words[0]), _base(self.words[0])
        by_glob = at in command.globs and fnmatch.fnmatchcase(name, program)
        if program != name and not by_glob:
            return self._through(words, command, at)
        args = words[1:]
        flags, positional = _split(name, args)
        wanted = [word.rstrip("*") if word.startswith("-") else word for word in self.words[1:]]
        has_flags = all(_has_flag(name, word, flags) for word in wanted if word.startswith("-") and len(word) > 1)
        remaining = iter(positional)
        has_words = all(
            any(fnmatch.fnmatchcase(arg, word) for arg in remaining) for word in wanted if not word.startswith("-")
        )
        if has_flags and has_words:
            return f"its program is named by a glob ({words[0]}), which could be {name}" if by_glob else True
        if command.more:
            return f"{name} gets more arguments when it runs ({command.more})"
        end = args.index("--") if "--" in args else len(args)
        globbed = (arg for n, arg in enumerate(args[:end], at + 1) if n in command.globs and _flag_like(arg))
        if has_words and (flag_like := next(globbed, "")):
            spelled = " ".join(word for word in wanted if word.startswith("-"))
            return f"an argument of {name} is a glob ({flag_like}) that a file named like {spelled} would fill"
        return False

    def _through(self, words: tuple[str, ...], command: SimpleCommand, at: int) -> bool | str:
        """A program hotloop doesn't read, given this rule's command among its words, may run it."""
        if _base(words[0]) in KNOWN:
            return False
        name = _base(self.words[0])
        for n in range(1, len(words)):
            program = _base(words[n])
            could = program == name or (at + n in command.globs and fnmatch.fnmatchcase(name, program))
            if could and self._judged(words[n:], command, at + n) is not False:
                shown = " ".join(words[n:])
                return f"{_base(words[0])}, which hotloop doesn't look through, may run `{shown}`"
        return False


def _base(word: str) -> str:
    return word.rpartition("/")[2]


def _split(program: str, args: list[str] | tuple[str, ...]) -> tuple[set[str], list[str]]:
    """A command's flags (every word before `--` that starts with `-`, each short cluster also as its letters,
    each long one also as the short flag of every long option it is a prefix of), and its other words."""
    same = SAME_FLAG.get(program, {})
    flags: set[str] = set()
    positional: list[str] = []
    words = iter(args)
    for word in words:
        if word == "--":
            positional.extend(words)
        elif word.startswith("-") and len(word) > 1:
            name = word.split("=", 1)[0]
            flags.add(name)
            if name.startswith("--"):
                flags.update(letter for full, letter in same.items() if full.startswith(name) and len(name) > 2)
            else:
                flags.add(same.get(name, name))
            if _CLUSTER.match(word):
                flags.update(same.get(letter, letter) for letter in word[1:])
        else:
            positional.append(word)
    return flags, positional


def _flag_like(pattern: str) -> bool:
    """Whether a file name pattern could expand to a flag: it may start with `-`, and holds only a flag's letters."""
    literal = _WILDCARDS.sub("", pattern)
    return pattern[:1] in "*?[-" and all(c.isalnum() or c in "-=" for c in literal)


def _has_flag(program: str, wanted: str, flags: set[str]) -> bool:
    """Whether `wanted` is among a command's flags: as spelled, as a short cluster, or a long one by a prefix."""
    same = SAME_FLAG.get(program, {})
    if any(fnmatch.fnmatchcase(flag, wanted) for flag in flags if flag.startswith("-")):
        return True
    if wanted.startswith("--"):
        long = [flag for flag in flags if flag.startswith("--") and len(flag) > 2]
        return same.get(wanted, wanted) in flags or any(wanted.startswith(flag) for flag in long)
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
