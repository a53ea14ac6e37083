"""Programs that run another command: wrappers, shells, the shell's own builtins, xargs, find and their kind.

`runs(words)` says what a command of these words makes run (`runs.py` has the kinds): the command
behind a wrapper (`env`, `nice`, `timeout`, `sudo`, `setpriv`, `unshare`, `chroot`, …), the
script of `bash -c`, `eval`, `trap`, `su -c`, `flock -c`, `script -c`, `watch` and an alias's
value, a literal heredoc a shell reads, and what no rule can read: a script file, `source`, a
shell reading a pipe. Programs that carry code in a setting or another language (git, `python
-c`, `PAGER=…`) are `carriers.py`'s.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from hotloop.agent.carriers import carrier, holds_code, variables
from hotloop.agent.runs import (
    Doubt,
    Handler,
    Inner,
    Run,
    Script,
    Spec,
    Unread,
    command_at,
    getopt,
    given,
    long_option,
    named,
)

SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish", "rbash", "yash", "csh", "tcsh"})
DECLARATIONS = frozenset({"export", "declare", "typeset", "local", "readonly"})

# Wrappers that run the command their operands name, once their options (and leading operands) are read.
WRAPPERS: dict[str, Spec] = {
    "command": Spec(),
    "builtin": Spec(),
    "coproc": Spec(),
    "exec": Spec("a"),
    "nohup": Spec(),
    "time": Spec("fo", ("format", "output")),
    "sudo": Spec("CDgprtTUu", ("user", "group", "close-from", "chdir", "prompt", "role", "type", "other-user")),
    "doas": Spec("Cu"),
    "pkexec": Spec(long=("user",)),
    "nice": Spec("n", ("adjustment",)),
    "ionice": Spec("cnP", ("class", "classdata")),
    "setsid": Spec(),
    "stdbuf": Spec("ioe", ("input", "output", "error")),
    "chrt": Spec("TPD", ("sched-runtime", "sched-period", "sched-deadline"), operands=1),
    "taskset": Spec(operands=1),
    "timeout": Spec("sk", ("signal", "kill-after"), operands=1),
    "chroot": Spec(long=("userspec", "groups"), operands=1),
    "setpriv": Spec(
        long=(
            *("ruid", "euid", "rgid", "egid", "reuid", "regid", "groups", "inh-caps", "ambient-caps", "bounding-set"),
            *("securebits", "pdeathsig", "selinux-label", "apparmor-profile", "landlock-access", "landlock-rule"),
            "seccomp-filter",
        )
    ),
    "unshare": Spec("RwSG", ("root", "wd", "setuid", "setgid", "propagation", "setgroups", "map-user", "map-group")),
    "nsenter": Spec("tSG", ("target", "setuid", "setgid")),
    "systemd-run": Spec(
        "upEMH",
        (
            *("unit", "property", "setenv", "machine", "host", "description", "slice", "uid", "gid", "nice"),
            *("working-directory", "service-type", "timer-property", "path-property", "socket-property"),
        ),
    ),
    "strace": Spec("abeEIoOpPsSuUX", ("output", "trace", "signal", "user", "env")),
    "ltrace": Spec("aAeDFlLnopsux", ("output",)),
    "fakeroot": Spec("lsib", ("lib", "faked", "save-file", "load-file")),
    "cgexec": Spec("g"),
    "numactl": Spec("CNmipP", ("physcpubind", "cpunodebind", "membind", "interleave", "preferred")),
    "prlimit": Spec("p", ("pid",)),
    "firejail": Spec(),
    "busybox": Spec(),
}
# With no command these start a shell, which then reads its commands from stdin: always (None), or with these options.
SHELL_WITHOUT_COMMAND: dict[str, frozenset[str] | None] = {
    "unshare": None,
    "chroot": None,
    "nsenter": None,
    "sudo": frozenset({"-s", "-i", "--shell", "--login"}),
    "doas": frozenset({"-s"}),
    "systemd-run": frozenset({"-S", "--shell"}),
}


def runs(words: tuple[str, ...], stdin: str | None = None, more: str = "") -> list[Run]:
    """What else a command of these words runs: commands, command lines, and code no rule can read."""
    if not words:
        return []
    program = words[0].rpartition("/")[2]
    if program in SHELLS:
        return _shell(program, words, stdin, more)
    if program in WRAPPERS:
        return _wrapped(program, words, more)
    handler = _HANDLERS.get(program) or carrier(program)
    return handler(program, words, stdin, more) if handler is not None else []


def _wrapped(program: str, words: Sequence[str], more: str) -> list[Run]:
    spec = WRAPPERS[program]
    options, operands = getopt(words, spec)
    start = operands[spec.operands] if len(operands) > spec.operands else len(words)
    if start < len(words):
        return command_at(words, start, more)
    if more:
        return [Unread(f"{program} runs a command it reads from its input")]
    if program in SHELL_WITHOUT_COMMAND:
        shell_options = SHELL_WITHOUT_COMMAND[program]
        if shell_options is None or shell_options & named(options):
            return [Unread(f"{program} starts a shell, which reads its commands from stdin")]
    return []


def _shell(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`bash -c SCRIPT`, a script from stdin (a literal heredoc is read), or a script file."""
    options, operands = getopt(words, Spec("oO", ("rcfile", "init-file", "command")))
    if "-c" in named(options):
        script = words[operands[0]] if operands else ""
        return [Unread(f"{program} -c runs a script from its input")] if more and not script else [Script(script)]
    if (fish := given(options, "--command")) is not None:
        return [Script(fish)]
    if operands and "-s" not in named(options):
        return [Doubt(f"{program} runs the script {words[operands[0]]}, which can't be read before it runs")]
    if more:
        return [Unread(f"{program} runs a script from its input")]
    return [Script(stdin)] if stdin is not None else [Unread(f"{program} reads its commands from stdin")]


def _declare(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`export NAME=value`, `declare -n NAME=OTHER`: what the variables it sets run."""
    renames = any(word.startswith("-") and "n" in word for word in words[1:])
    found = [Doubt(f"{program} -n makes a name stand for another variable")] if renames else []
    return [*found, *variables([word for word in words[1:] if "=" in word and not word.startswith("-")])]


def _eval(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    return [Script(" ".join(words[1:]))]


def _source(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    file = f" {words[1]}" if len(words) > 1 else ""
    return [Doubt(f"{program}{file} runs a file in this shell, which can't be read before it runs")]


def _trap(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`trap LINE SIGNAL…`: LINE runs when a signal (or EXIT) comes."""
    args = [word for word in words[1:] if word != "--"]
    return [Script(args[0])] if len(args) > 1 and not args[0].startswith("-") else []


def _alias(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    values = [word.partition("=")[2] for word in words[1:] if "=" in word]
    if not values:
        return []
    return [*map(Script, values), Doubt("it defines an alias, which makes a later word another program")]


def _hash(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    path = given(getopt(words, Spec("pt"))[0], "-p")
    return [Inner((path,), (None,)), Doubt("hash -p makes a name run another program")] if path else []


def _enable(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    options, _ = getopt(words, Spec("f"))
    if given(options, "-f") is None:
        return []
    return [Doubt("enable -f loads a builtin from a file, which can't be read before it runs")]


def _mapfile(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`mapfile -C LINE` evaluates LINE every few lines it reads."""
    callback = given(getopt(words, Spec("CcdnOsu"))[0], "-C")
    return [Script(callback)] if callback else []


def _sets(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`printf -v NAME` and `read NAME…` set a variable to what no rule reads: a doubt if it holds code."""
    if program == "printf":
        names = [value for name, value in getopt(words, Spec("v"))[0] if name == "-v"]
    else:
        options, operands = getopt(words, Spec("adinNptu"))
        names = [value for name, value in options if name == "-a"] + [words[n] for n in operands]
    return [
        Doubt(f"{program} sets {name}, which holds code, to what no rule reads") for name in names if holds_code(name)
    ]


def _env(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`env [-i] [-u NAME] [-S STRING] [NAME=value…] COMMAND…`; -S's string is split into more of env's words."""
    options, operands = getopt(words, Spec("CSua", ("chdir", "split-string", "unset", "argv0")))
    split = given(options, "-S", "--split-string")
    start = operands[0] if operands else len(words)
    if split is not None:
        split = split.replace("\\_", " ")  # env's escape for a space between words
        if "$" in split or re.search(r"\\[^\\\"'#]", split):
            return [Doubt("env -S expands variables or escapes in the command it runs")]
        try:
            parts = shlex.split(split, comments=True)
        except ValueError:
            return [Doubt("env -S's string doesn't split into words")]
        made = len(parts) + 1
        found = runs(("env", *parts, *words[start:]), stdin, more)
        return [_pointed_back(run, made, start) for run in found]
    command = next((n for n in operands if "=" not in words[n]), len(words))
    return [*variables([words[n] for n in operands if n < command]), *command_at(words, command, more)]


def _pointed_back(run: Run, made: int, start: int) -> Run:
    """A run found in `env` + split words + env's own rest, its origins pointing back at env's words."""
    if not isinstance(run, Inner):
        return run
    origins = tuple(None if o is None or o < made else start + o - made for o in run.origins)
    return Inner(run.words, origins, run.more)


def _xargs(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """xargs runs its command with the words it reads appended (or put in place of -I's string)."""
    spec = Spec("aEILnPsd", ("arg-file", "delimiter", "max-args", "max-procs", "max-chars"), optional="eil")
    options, operands = getopt(words, spec)
    if not operands:
        return []  # echo, with what it reads
    start = operands[0]
    replace = given(options, "-I", "-i", "--replace")
    replace = "{}" if replace == "" else replace
    inner = words[start].rpartition("/")[2]
    if replace is not None and (replace in words[start] or inner in SHELLS or inner in WRAPPERS):
        return [Unread("xargs puts what it reads into the program or the line it runs")]
    if stdin is not None and replace is None and given(options, "-a", "--arg-file") is None:
        try:
            read = shlex.split(stdin)
        except ValueError:
            return command_at(words, start, "xargs adds the words it reads")
        return [Inner((*words[start:], *read), (*range(start, len(words)), *([None] * len(read))))]
    return command_at(words, start, "xargs adds the words it reads")


def _find(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """Every `-exec`/`-execdir`/`-ok`/`-okdir` of a find, each up to its `;` or `+`."""
    found: list[Run] = []
    n = 1
    while n < len(words):
        if words[n] in ("-exec", "-execdir", "-ok", "-okdir"):
            end = next((i for i in range(n + 1, len(words)) if words[i] in (";", "+")), len(words))
            found += [Inner(tuple(words[n + 1 : end]), tuple(range(n + 1, end)))] if end > n + 1 else []
            n = end
        n += 1
    return found


def _watch(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """watch runs its words as one `sh -c` line; with -x (--exec) as the command itself."""
    options, operands = getopt(words, Spec("nq", ("interval", "equexit")))
    if not operands:
        return []
    if {"-x", "--exec"} & named(options):
        return command_at(words, operands[0], more)
    return [Script(" ".join(words[operands[0] :]))]


def _flock(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`flock [options] FILE COMMAND…` or `flock [options] FILE -c LINE` (a line for `sh -c`)."""
    options, operands = getopt(words, Spec("wEc", ("timeout", "conflict-exit-code", "command")))
    line = given(options, "-c", "--command")
    if line is not None:
        return [Script(line)]
    if len(operands) < 2:
        return []
    after = operands[1]
    word = words[after]
    if word == "-c" or (word.startswith("--") and long_option(word[2:], ("command",))):
        return [Script(words[after + 1])] if after + 1 < len(words) else []
    return command_at(words, after, more)


def _su(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`su [-] [USER] -c LINE` runs LINE in USER's shell, else the shell reads stdin; `runuser -u USER COMMAND…`."""
    long = ("command", "session-command", "group", "supp-group", "shell", "whitelist-environment", "user")
    options, operands = getopt(words, Spec("cgGswu", long, permute=program == "su"))
    line = given(options, "-c", "--command", "--session-command")
    if line is not None:
        return [Script(line)]
    if program == "runuser" and given(options, "-u", "--user") is not None:
        return command_at(words, operands[0], more) if operands else []
    return [Unread(f"{program} starts a shell, which reads its commands from stdin")]


def _script(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`script -c LINE [FILE]`; without -c it starts a shell that reads stdin."""
    spec = Spec("cEIOBTm", ("command", "echo", "log-in", "log-out", "log-io", "log-timing"), permute=True)
    line = given(getopt(words, spec)[0], "-c", "--command")
    if line is None:
        return [Unread("script starts a shell, which reads its commands from stdin")]
    return [Script(line)]


def _sg(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`sg GROUP [-c] LINE` runs LINE with `sh -c`."""
    line = " ".join(word for word in words[2:] if word != "-c")
    return [Script(line)] if line else [Unread("sg starts a shell, which reads its commands from stdin")]


def _parallel(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """GNU parallel runs its command words as a shell line, each argument after `:::` put in for `{}` or appended."""
    options, operands = getopt(words, Spec("jPSadInNLCE", ("jobs", "sshlogin", "arg-file", "delimiter", "colsep")))
    end = next((n for n in operands if words[n].startswith(":::")), len(words))
    line = " ".join(words[n] for n in operands if n < end)
    if not line:
        return [Unread("parallel runs the commands it reads from its input")]
    if end < len(words) and words[end] == ":::" and given(options, "-a", "--arg-file") is None:
        values = " ".join(shlex.quote(word) for word in words[end + 1 :] if not word.startswith(":::"))
        return [Script(line.replace("{}", values) if "{}" in line else f"{line} {values}")]
    return [Script(line), Doubt("parallel adds what it reads from its input to the line it runs")]


def _coreutils(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`coreutils --coreutils-prog=NAME ARGS…` runs the utility NAME."""
    first = words[1] if len(words) > 1 else ""
    if not first.startswith("--coreutils-prog="):
        return []
    return [Inner((first.partition("=")[2], *words[2:]), (None, *range(2, len(words))), more)]


_HANDLERS: dict[str, Handler] = {
    **dict.fromkeys(DECLARATIONS, _declare),
    "eval": _eval,
    "source": _source,
    ".": _source,
    "trap": _trap,
    "alias": _alias,
    "hash": _hash,
    "enable": _enable,
    "mapfile": _mapfile,
    "printf": _sets,
    "read": _sets,
    "readarray": _mapfile,
    "env": _env,
    "xargs": _xargs,
    "find": _find,
    "watch": _watch,
    "flock": _flock,
    "su": _su,
    "runuser": _su,
    "script": _script,
    "sg": _sg,
    "parallel": _parallel,
    "coreutils": _coreutils,
}
LOOKED_THROUGH = frozenset({*SHELLS, *WRAPPERS, *_HANDLERS})  # whose words runs() reads
