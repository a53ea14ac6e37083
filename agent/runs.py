"""What a command makes run besides its own program, and how a program's options are read to find it.

The kinds of run (`runners.py` and `carriers.py` say which program makes which): a command with
its words (`sudo -u x rm -rf d` runs `rm -rf d`), a shell command line (`bash -c`, `trap`, a git
pager), code no deny rule can read before it runs (`source FILE`, `python -c`), and commands that
can't be known at all (a shell reading a pipe). Options are read as getopt reads them: clustered
short flags, a value attached or in the next word, any unambiguous prefix of a long option (GNU
getopt_long takes `--spl` for `--split-string`), so no spelling of a wrapper's options hides its
command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Inner:
    """A command a program runs: its words, each the outer command's word `origins[i]` (None: made up here)."""

    words: tuple[str, ...]
    origins: tuple[int | None, ...]
    more: str = ""  # why it gets more arguments when it runs ("xargs adds the words it reads")


@dataclass(frozen=True)
class Script:
    """A shell command line a program runs (`bash -c`, `trap`, `eval`, a git pager)."""

    text: str


@dataclass(frozen=True)
class Doubt:
    """Code a program runs that no deny rule can read before it runs (`source FILE`, `python -c`)."""

    reason: str


@dataclass(frozen=True)
class Unread:
    """Commands a program runs that can't be known at all (a shell reading a pipe): no rule allows the call."""

    reason: str


Run = Inner | Script | Doubt | Unread
Handler = Callable[[str, Sequence[str], str | None, str], list[Run]]  # (program, words, stdin, more): its runs


@dataclass(frozen=True)
class Spec:
    """How a program reads its options: the short ones and long ones that take a value, and its leading operands."""

    values: str = ""  # short options that take a value, attached (`-n5`) or as the next word
    long: tuple[str, ...] = ()  # long options that take a value (`--user root`, `--user=root`)
    optional: str = ""  # short options whose value, if any, is attached (xargs's `-i[R]`): never the next word
    operands: int = 0  # words before the command it runs (timeout's duration, chroot's root)
    permute: bool = False  # options may follow operands (GNU getopt without a leading `+`)


Options = list[tuple[str, str]]  # (`-x` or `--long`, its value or "")


def getopt(words: Sequence[str], spec: Spec, start: int = 1) -> tuple[Options, list[int]]:
    """The options of `words[start:]`, and the indices of its operands (all words after the first, unless permuted)."""
    found: Options = []
    operands: list[int] = []
    n = start
    while n < len(words):
        arg = words[n]
        if arg == "--":
            operands.extend(range(n + 1, len(words)))
            break
        if arg.startswith("--"):
            name, eq, value = arg[2:].partition("=")
            full = long_option(name, spec.long)
            if full is not None and not eq:
                value, n = (words[n + 1] if n + 1 < len(words) else ""), n + 1
            found.append(("--" + (full or name), value))
        elif arg.startswith("-") and len(arg) > 1:
            for i, letter in enumerate(arg[1:], 2):
                if letter in spec.optional:
                    found.append(("-" + letter, arg[i:]))
                    break
                if letter in spec.values:
                    value = arg[i:]
                    if not value:
                        value, n = (words[n + 1] if n + 1 < len(words) else ""), n + 1
                    found.append(("-" + letter, value))
                    break
                found.append(("-" + letter, ""))
        elif spec.permute:
            operands.append(n)
        else:
            operands.extend(range(n, len(words)))
            break
        n += 1
    return found, operands


def long_option(name: str, names: Sequence[str]) -> str | None:
    """Which of `names` `--name` is, exactly or as a prefix (the first, where several start so); None if none."""
    if name in names:
        return name
    return next((full for full in names if name and full.startswith(name)), None)


def given(options: Options, *names: str) -> str | None:
    """The value of the last of these options given, None if none is."""
    return next((value for option, value in reversed(options) if option in names), None)


def named(options: Options) -> set[str]:
    return {name for name, _ in options}


def command_at(words: Sequence[str], start: int, more: str = "") -> list[Run]:
    """The command made of `words[start:]`, if there is one."""
    return [Inner(tuple(words[start:]), tuple(range(start, len(words))), more)] if start < len(words) else []
