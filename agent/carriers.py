"""Programs that carry a command in a setting, a variable or another language: git, `PAGER=…`, `python -c`, tar.

`git -c alias.x='!rm -rf d' x` runs `rm -rf d`, and so does `git -c core.pager='rm -rf d' log`;
`GIT_PAGER=…`, `EDITOR=…` and `PROMPT_COMMAND=…` hold command lines too, and `tar
--to-command=…`, `rsync -e …`, `man -P …` take one as an option's value: each is read as the
command line it is. Where the code can't be read (`core.hooksPath`, `BASH_ENV`, `LD_PRELOAD`,
`python -c`, `perl -e`, awk's `system()`, `vim -c`), it is a `Doubt`: a deny rule can't rule it
out. A setting written for later (`git config alias.x '!…'`) counts as run now.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
from collections.abc import Sequence

from hotloop.agent.runs import Doubt, Handler, Inner, Run, Script, Spec, command_at, getopt, named

# Git settings whose value is a command git runs (sh -c, mostly), and those that name code in a file.
GIT_COMMANDS = (
    *("core.pager", "pager.*", "core.editor", "sequence.editor", "core.sshcommand", "core.fsmonitor"),
    *("core.askpass", "credential.helper", "credential.*.helper", "diff.external", "diff.*.command"),
    *("diff.*.textconv", "filter.*.clean", "filter.*.smudge", "filter.*.process", "merge.*.driver"),
    *("gpg.program", "gpg.*.program", "gpg.ssh.defaultkeycommand", "difftool.*.cmd", "mergetool.*.cmd"),
    *("man.*.cmd", "browser.*.cmd", "core.gitproxy", "remote.*.uploadpack", "remote.*.receivepack"),
    *("uploadpack.packobjectshook", "sendemail.*cmd", "interactive.difffilter", "hook.*.command"),
)
GIT_FILES = ("core.hookspath", "include.path", "includeif.*.path", "init.templatedir")
_BOOLEAN = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})
_GIT_OPTIONS = Spec(
    "Cc", ("git-dir", "work-tree", "namespace", "super-prefix", "config-env", "list-cmds", "attr-source")
)
# Subcommands' options whose value is a command line.
_GIT_LINES: dict[str, tuple[str, ...]] = {
    "rebase": ("-x", "--exec"),
    "difftool": ("-x", "--extcmd"),
    "send-email": ("--sendmail-cmd", "--to-cmd", "--cc-cmd", "--header-cmd"),
    "filter-branch": (
        *("--setup", "--env-filter", "--tree-filter", "--index-filter", "--parent-filter", "--msg-filter"),
        *("--commit-filter", "--tag-name-filter"),
    ),
    "fetch": ("--upload-pack",),
    "pull": ("--upload-pack",),
    "clone": ("-u", "--upload-pack"),
    "ls-remote": ("--upload-pack",),
    "push": ("--receive-pack", "--exec"),
    "archive": ("--exec",),
}


def _git_kind(key: str) -> str:
    """What a git setting holds: "alias", "command" (a line git runs), "file" (code in a file), or ""."""
    lowered = key.lower()
    if lowered.startswith("alias."):
        return "alias"
    if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in GIT_COMMANDS):
        return "command"
    return "file" if any(fnmatch.fnmatchcase(lowered, pattern) for pattern in GIT_FILES) else ""


def git_setting(key: str, value: str) -> list[Run]:
    """What a git setting makes git run: its command line, or a doubt where it names code in a file."""
    kind = _git_kind(key)
    if kind == "alias":
        return _alias_runs(value)
    if kind == "command":
        line = value.removeprefix("!")
        return [] if line.lower() in _BOOLEAN else [Script(line)]
    return [Doubt(f"git's {key} runs code from a file, which can't be read before it runs")] if kind else []


def _alias_runs(value: str, words: Sequence[str] = ("git", ""), at: int = 1, more: str = "") -> list[Run]:
    """A git alias at `words[at]`: `!LINE` runs LINE with the words after it in a shell; else its words stand there."""
    rest = words[at + 1 :]
    if value.startswith("!"):
        return [Script(" ".join([value[1:], *map(shlex.quote, rest)]))]
    try:
        parts = shlex.split(value)
    except ValueError:
        return [Doubt("a git alias doesn't split into words")]
    origins = (*range(at), *(None,) * len(parts), *range(at + 1, len(words)))
    return [Inner((*words[:at], *parts, *rest), origins, more)]


def _git(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """git's own options (`-c`, `--config-env`, `--exec-path`), an alias they define, and what its subcommand runs."""
    options, operands = getopt(words, _GIT_OPTIONS)
    found: list[Run] = []
    aliases: dict[str, str] = {}
    for name, value in options:
        key, _, setting = value.partition("=")
        if name == "-c" and _git_kind(key) == "alias":
            aliases[key[6:].lower()] = setting
        elif name == "-c":
            found += git_setting(key, setting)
        elif name == "--config-env" and _git_kind(key):
            found.append(Doubt(f"git --config-env takes {key} from a variable"))
        elif name.startswith("--exec-path") and value:
            found.append(Doubt("git --exec-path runs git's commands from another folder"))
    if not operands:
        return found
    at = operands[0]
    alias = aliases.get(words[at].lower())
    if alias is not None:
        return [*found, *_alias_runs(alias, words, at, more)]
    return [*found, *_subcommand(words[at], words, at, more)]


def _subcommand(sub: str, words: Sequence[str], at: int, more: str) -> list[Run]:
    rest = words[at:]
    if sub == "bisect" and list(rest[1:2]) == ["run"]:
        return command_at(words, at + 2, more)
    if sub == "submodule" and "foreach" in rest:
        line = [word for word in rest[rest.index("foreach") + 1 :] if not word.startswith("--")]
        return [Script(" ".join(line))] if line else []
    if sub == "config":
        return _config(rest)
    names = _GIT_LINES.get(sub, ())
    if not names:
        return []
    long = tuple(name[2:] for name in names if name.startswith("--"))
    options, _ = getopt(rest, Spec("".join(n[1] for n in names if len(n) == 2), long, permute=True))
    return [Script(value) for name, value in options if name in names]


def _config(rest: Sequence[str]) -> list[Run]:
    """`git config [set] KEY VALUE`: a command written for git to run later counts as run now."""
    spec = Spec("f", ("file", "blob", "type", "default", "comment", "value", "fixed-value"), permute=True)
    _, operands = getopt(rest, spec)
    values = [rest[n] for n in operands]
    values = values[1:] if values[:1] == ["set"] else values
    return git_setting(values[0], values[1]) if len(values) >= 2 else []


# Variables whose value is a command line some program runs, and those that make code run unread.
COMMAND_VARIABLES = frozenset(
    {
        *("PAGER", "GIT_PAGER", "MANPAGER", "SYSTEMD_PAGER", "EDITOR", "VISUAL", "GIT_EDITOR", "FCEDIT"),
        *("GIT_SEQUENCE_EDITOR", "GIT_SSH_COMMAND", "GIT_SSH", "GIT_EXTERNAL_DIFF", "GIT_ASKPASS", "SSH_ASKPASS"),
        *("GIT_PROXY_COMMAND", "PROMPT_COMMAND", "LESSOPEN", "LESSCLOSE", "BROWSER"),
    }
)
CODE_VARIABLES = {
    "BASH_ENV": "makes bash run a file first, which can't be read before it runs",
    "ENV": "makes sh run a file first, which can't be read before it runs",
    "LD_PRELOAD": "loads a library into every program it starts",
    "LD_AUDIT": "loads a library into every program it starts",
    "GIT_CONFIG_PARAMETERS": "gives git settings (aliases, a pager, hooks) no rule reads",
    "GIT_CONFIG_COUNT": "gives git settings (aliases, a pager, hooks) no rule reads",
    "GIT_CONFIG_GLOBAL": "gives git a config file (aliases, a pager, hooks) no rule reads",
    "GIT_CONFIG_SYSTEM": "gives git a config file (aliases, a pager, hooks) no rule reads",
    "GIT_EXEC_PATH": "makes git run its commands from another folder",
    "PATH": "makes a name run another program",
}
_PROMPTS = re.compile(r"^PS[0-4]$")


def holds_code(name: str) -> bool:
    """Whether a variable of this name holds a command line or code some program runs."""
    return name in COMMAND_VARIABLES or name in CODE_VARIABLES or bool(_PROMPTS.match(name))


def variables(assignments: Sequence[str]) -> list[Run]:
    """What setting these `NAME=value` variables makes run: their command lines, or doubts."""
    found: list[Run] = []
    for assignment in assignments:
        name, _, value = assignment.partition("=")
        name = name.removesuffix("+")
        if name in COMMAND_VARIABLES:
            found.append(Script(value.lstrip("|")))
        elif name in CODE_VARIABLES:
            found.append(Doubt(f"{name}= {CODE_VARIABLES[name]}"))
        elif name.startswith("BASH_FUNC_"):
            found.append(Doubt(f"{name} defines a function, which makes a later word another program"))
        elif _PROMPTS.match(name) and ("$" in value or "`" in value):
            found.append(Doubt(f"{name} is expanded as code when bash shows it"))
    return found


# Interpreters: the options that give them code on the command line, and their other options that take a value.
INLINE_CODE: dict[str, tuple[str, str]] = {
    "perl": ("eE", "IMm"),
    "ruby": ("e", "IrCEF"),
    **dict.fromkeys(("lua", "luajit", "Rscript", "osascript", "bun"), ("e", "l")),
    **dict.fromkeys(("node", "nodejs"), ("ep", "r")),
    **dict.fromkeys(("pwsh", "powershell"), ("c", "f")),
    "php": ("rBRFE", "cdf"),
    "python": ("c", "WXm"),
}
_INLINE_LONG = ("eval", "print", "command")
_LONG_VALUES = ("require", "import", "loader", "experimental-loader", "input-type", "conditions")
_QUIET = frozenset({"-V", "-v", "--version", "-h", "--help", "-m", "-f"})
_PYTHON = re.compile(r"^(python|pypy)[0-9.]*$")
AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
_AWK = Spec("fvFEel", ("file", "assign", "field-separator", "source", "load", "exec"))


def _interpreter(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """Code in another language on the command line or from stdin: no deny rule can read what it runs."""
    inline, values = INLINE_CODE.get(program, INLINE_CODE["python"])
    options, operands = getopt(words, Spec(inline + values, (*_INLINE_LONG, *_LONG_VALUES)))
    code = next((name for name, _ in options if name[1:] in inline or name[2:] in _INLINE_LONG), None)
    if code is not None:
        return [Doubt(f"{program} {code} runs code in another language, which a deny rule can't read")]
    script = words[operands[0]] if operands else ""
    from_stdin = script == "-" or (not script and not _QUIET & named(options))
    if from_stdin or (script == "eval" and program in ("deno", "bun")):
        return [Doubt(f"{program} runs code from stdin or a string, which a deny rule can't read")]
    return []


def _awk(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """awk's program runs commands only through system(), a pipe, or gawk's indirect calls and extensions."""
    options, operands = getopt(words, _AWK)
    flags = named(options)
    if flags & {"-l", "--load"}:
        return [Doubt(f"{program} -l loads an extension, which a deny rule can't read")]
    sources = [value for name, value in options if name in ("-e", "--source")]
    if not flags & {"-f", "--file", "-E", "--exec"} and operands:
        sources.append(words[operands[0]])
    if any(re.search(r"system|\||@", source) for source in sources):
        return [Doubt(f"{program}'s program runs commands (system(), a pipe), which a deny rule can't read")]
    return []


_EDITOR_CODE = frozenset({"-c", "--cmd", "-S", "-s", "--eval", "-eval", "-l", "--load"})  # and `+COMMAND`


def _editor(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    if any(word in _EDITOR_CODE or word.startswith("+") for word in words[1:]):
        return [Doubt(f"{program} runs editor commands, which a deny rule can't read")]
    return []


# Programs whose options carry a command line (GTFOBins' well-known ones).
COMMAND_OPTIONS: dict[str, tuple[Spec, tuple[str, ...]]] = {
    "tar": (
        Spec("IF", ("to-command", "use-compress-program", "rsh-command", "info-script", "new-volume-script")),
        ("-I", "-F", "--to-command", "--use-compress-program", "--rsh-command", "--info-script", "--new-volume-script"),
    ),
    "rsync": (Spec("e", ("rsh", "rsync-path")), ("-e", "--rsh", "--rsync-path")),
    "man": (Spec("PH", ("pager", "html")), ("-P", "--pager", "-H", "--html")),
    "zip": (Spec(long=("unzip-command",)), ("--unzip-command",)),
    "scp": (Spec("S"), ("-S",)),
    "sftp": (Spec("SD"), ("-S", "-D")),
}


def _command_options(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    spec, names = COMMAND_OPTIONS[program]
    options, _ = getopt(words, Spec(spec.values, (*spec.long, "checkpoint-action"), permute=True))
    lines = [value for name, value in options if name in names]
    lines += [value[5:] for name, value in options if name == "--checkpoint-action" and value.startswith("exec=")]
    lines += [words[n + 1] for n in range(1, len(words) - 1) if words[n] == "-TT" and program == "zip"]
    return [Script(line) for line in lines]


def _ssh(program: str, words: Sequence[str], stdin: str | None, more: str) -> list[Run]:
    """`ssh [options] HOST COMMAND…` runs the words as one line in the host's shell; ProxyCommand runs here."""
    options, operands = getopt(words, Spec("BbcDEeFIiJLlmOoPpQRSWw"))
    found: list[Run] = []
    for name, value in options:
        key, _, line = value.replace("=", " ", 1).partition(" ")
        if name == "-o" and key.lower() in ("proxycommand", "localcommand"):
            found.append(Script(line.strip()))
    if len(operands) > 1:
        found.append(Script(" ".join(words[operands[1] :])))
    return found


EDITORS = frozenset({"vim", "vi", "nvim", "ex", "view", "gvim", "emacs"})


def carrier(program: str) -> Handler | None:
    """How to read what `program` carries, if it carries code in a setting, a variable or another language."""
    if program == "git":
        return _git
    if program in INLINE_CODE or _PYTHON.match(program) or program == "deno":
        return _interpreter
    if program in AWKS:
        return _awk
    if program in EDITORS:
        return _editor
    if program in COMMAND_OPTIONS:
        return _command_options
    return _ssh if program == "ssh" else None


CARRIERS = frozenset({"git", "deno", "ssh", *INLINE_CODE, *AWKS, *EDITORS, *COMMAND_OPTIONS})  # and python*
