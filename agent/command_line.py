"""A shell command line read as the simple commands it would run, with tree-sitter-bash.

Approval rules judge a `run_shell` call by what it runs, not by its text (`approvals.py`): every
command of a list, a pipeline, a subshell, a block, an `if` or a loop; every command or process
substitution, wherever it sits (an argument, a string, a redirection, a heredoc); the string of
`bash -c`/`sh -c`/`eval` when it is plain text; and the command behind a wrapper that runs
another (`env`, `sudo`, `timeout`, `xargs`, `find -exec`, …). Each becomes a `SimpleCommand`:
its words as bash would pass them, once quotes and escapes are undone.

What can't be read for sure is said, never guessed (`unread`): a word whose value comes from an
expansion (`$X`, `$(…)`, `{a,b}`, `$'…'`), a heredoc whose body expands, a function definition
(the name it defines would look like a program), syntax that doesn't parse. Rules never allow such
a call; deny rules still see every command that could be read.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# Where a program named by its full path is the same program as named bare.
SYSTEM_BIN = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"})
MAX_DEPTH = 8  # `bash -c` inside `bash -c`…: deeper than this is read no further
# Output redirections that write nowhere.
_SINKS = frozenset({"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"})
_WRITES = frozenset({">", ">>", ">|", "&>", "&>>", "<>"})
_DYNAMIC = {
    "simple_expansion": "a variable ($X)",
    "expansion": "a parameter expansion (${…})",
    "arithmetic_expansion": "arithmetic ($((…)))",
    "command_substitution": "a command substitution ($(…))",
    "process_substitution": "a process substitution (<(…))",
    "ansi_c_string": "an ANSI-C string ($'…')",
    "translated_string": 'a translated string ($"…")',
}
_BRACES = re.compile(r"\{[^{}]*(?:,|\.\.)[^{}]*\}")
_DQ_ESCAPE = re.compile(r"\\([\\$`\"\n])")
_ESCAPE = re.compile(r"\\(.)", re.DOTALL)


@dataclass(frozen=True)
class SimpleCommand:
    """One command bash would run: `NAME=value` assignments, then the program and its arguments."""

    words: tuple[str, ...]
    assignments: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()  # files its output redirections write (sinks like /dev/null left out)
    unread: str = ""  # why its words can't all be known before it runs; "" when they can

    @property
    def program(self) -> str:
        return self.words[0] if self.words else ""

    @property
    def shown(self) -> str:
        """The command as one line: what the user reads in a question."""
        return " ".join([*self.assignments, *map(shlex.quote, self.words)]) or "(assignment)"


@dataclass
class CommandLine:
    """What a command line runs, and what of it couldn't be read."""

    text: str
    commands: list[SimpleCommand] = field(default_factory=list)
    unread: list[str] = field(default_factory=list)  # reasons, besides the commands' own

    @property
    def readable(self) -> bool:
        """Whether every command and every word of every command is known before it runs."""
        return not self.unread and all(not command.unread for command in self.commands)

    def reasons(self) -> list[str]:
        """Why it can't be read whole, each reason once."""
        said = [*self.unread, *(c.unread for c in self.commands if c.unread)]
        return list(dict.fromkeys(said))

    def programs(self) -> list[str]:
        """The programs it runs, in order, each once."""
        return list(dict.fromkeys(command.program or "(assignment)" for command in self.commands))


def read_command(text: str) -> CommandLine:
    """Every simple command `text` runs, as far as it can be read without running anything."""
    line = CommandLine(text)
    _Reader(line).read(text, 0)
    return line


def program_name(word: str) -> str:
    """A program as rules name it: `/usr/bin/rm` is `rm`; `./rm` and `/opt/x/rm` stay themselves."""
    folder, slash, name = word.rpartition("/")
    return name if slash and (folder or "/") in SYSTEM_BIN else word


@cache
def _parser() -> Parser:
    import tree_sitter_bash
    from tree_sitter import Language, Parser

    return Parser(Language(tree_sitter_bash.language()))


class _Reader:
    def __init__(self, line: CommandLine) -> None:
        self.line = line

    def read(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.line.unread.append(f"commands nested more than {MAX_DEPTH} deep")
            return
        root = _parser().parse(text.encode()).root_node
        if root.has_error:
            self.line.unread.append("it doesn't parse as a bash command line")
        self.walk(root, depth)

    def walk(self, node: Node, depth: int) -> None:
        kind = node.type
        if kind == "command":
            self.command(node, [], depth)
        elif kind in ("variable_assignment", "variable_assignments"):
            assignments = [node] if kind == "variable_assignment" else node.named_children
            self.add([], assignments, [], None, depth)
        elif kind in ("declaration_command", "unset_command"):
            self.add(node.children, [], [], None, depth)
        elif kind == "function_definition":
            self.line.unread.append("it defines a function, whose calls look like programs")
        elif kind in ("test_command", "arithmetic_command") and _expands(node):
            self.line.unread.append("a test or arithmetic with expansions, which bash may evaluate as code")
            self.nested(node, depth)
        elif kind == "redirected_statement":
            self.redirected(node, depth)
        elif kind in ("command_substitution", "process_substitution"):
            for child in node.named_children:
                self.walk(child, depth)
        elif kind == "ERROR" or node.is_missing:
            self.line.unread.append("it doesn't parse as a bash command line")
            self.nested(node, depth)
        else:
            for child in node.children:
                self.walk(child, depth)

    def redirected(self, node: Node, depth: int) -> None:
        body = node.child_by_field_name("body")
        redirects = node.children_by_field_name("redirect")
        if body is not None and body.type == "command":
            self.command(body, redirects, depth)
            return
        if body is not None:
            self.walk(body, depth)
        unread: list[str] = []
        for redirect in redirects:
            written, extra = self.redirect(redirect, unread, depth)
            if written or extra:
                unread.append("a block's output written to a file")
        self.line.unread.extend(unread)

    def nested(self, node: Node, depth: int) -> None:
        """The substitutions inside `node`, read as commands of their own."""
        for child in node.named_children:
            if child.type in ("command_substitution", "process_substitution"):
                self.walk(child, depth)
            else:
                self.nested(child, depth)

    def command(self, node: Node, redirects: list[Node], depth: int) -> None:
        assignments = [c for c in node.named_children if c.type == "variable_assignment"]
        name = node.child_by_field_name("name")
        words = [*([name.named_children[0]] if name is not None and name.named_children else [])]
        words += node.children_by_field_name("argument")
        self.add(words, assignments, [*node.children_by_field_name("redirect"), *redirects], node, depth)

    def add(
        self, words: list[Node], assignments: list[Node], redirects: list[Node], node: Node | None, depth: int
    ) -> None:
        """One simple command, from its word, assignment and redirection nodes (and the command `node` they're in)."""
        unread: list[str] = []
        argv = [self.word(w, unread, depth) for w in words]
        sets = [self.assignment(a, unread, depth) for a in assignments]
        writes: list[str] = []
        for redirect in redirects:
            written, extra = self.redirect(redirect, unread, depth)
            writes += written
            argv += [self.word(w, unread, depth) for w in extra]  # `rm >/dev/null -rf d`: bash's arguments
        if node is not None and _joined(node):
            unread.append("a line continuation inside a word")
        command = SimpleCommand(tuple(argv), tuple(sets), tuple(writes), "; ".join(dict.fromkeys(unread)))
        self.line.commands.append(command)
        if not unread:
            self.inner(command, depth)

    def inner(self, command: SimpleCommand, depth: int) -> None:
        """The command a wrapper or a shell runs, read as one more command."""
        words = list(command.words)
        program = _base(command.program)
        if program in SHELLS or program == "eval":
            script = _script(program, words[1:])
            if script == "-" and program != "eval":
                self.line.unread.append(f"{program} reads its commands from stdin")
            elif script:
                self.read(script, depth + 1)
            return
        unwrapped = _unwrapped(program, words[1:])
        if unwrapped:
            self.line.commands.append(SimpleCommand(tuple(unwrapped)))
            self.inner(self.line.commands[-1], depth + 1)

    def assignment(self, node: Node, unread: list[str], depth: int) -> str:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        name_text = _text(name) if name is not None else ""
        return f"{name_text}={self.word(value, unread, depth) if value is not None else ''}"

    def redirect(self, node: Node, unread: list[str], depth: int) -> tuple[list[str], list[Node]]:
        """The files an output redirection writes, and the words after its target (the command's, to bash)."""
        if node.type in ("heredoc_redirect", "herestring_redirect"):
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in _text(start) for q in "'\"\\")
            if not quoted and _expands(node):
                unread.append("a heredoc or here-string that expands")
            self.nested(node, depth)
            return [], []
        operator = next((c for c in node.children if not c.is_named), None)
        destinations = node.children_by_field_name("destination")
        value = self.word(destinations[0], unread, depth) if destinations else ""
        extra = destinations[1:]
        kind = _text(operator) if operator is not None else ""
        if kind in _WRITES or (kind == ">&" and not value.isdigit() and value != "-"):
            return ([] if value in _SINKS else [value]), extra
        return [], extra

    def word(self, node: Node, unread: list[str], depth: int) -> str:
        """The text bash makes of one word; where an expansion decides it, the source, with the reason in `unread`."""
        kind = node.type
        if kind in _DYNAMIC:
            unread.append(f"a word comes from {_DYNAMIC[kind]}")
            if kind in ("command_substitution", "process_substitution"):
                self.walk(node, depth)
            else:
                self.nested(node, depth)
            return _text(node)
        if kind == "raw_string":
            return _text(node)[1:-1]
        if kind == "string":
            return "".join(self.word(part, unread, depth) for part in node.named_children)
        if kind == "string_content":
            return _DQ_ESCAPE.sub(_unescaped, _text(node))
        if kind == "concatenation":
            unquoted = "".join(_text(part) if part.type == "word" else "\0" for part in node.children)
            if _BRACES.search(unquoted):
                unread.append("a word comes from brace expansion ({a,b})")
            return "".join(self.word(part, unread, depth) for part in node.children)
        if kind in ("word", "number"):
            text = _text(node)
            if _BRACES.search(text):
                unread.append("a word comes from brace expansion ({a,b})")
            return _ESCAPE.sub(_unescaped, text)
        if kind == "variable_assignment":
            return self.assignment(node, unread, depth)
        if kind == "variable_name" or not node.is_named:
            return _text(node)
        unread.append(f"a word bash reads in a way not covered here ({kind})")
        self.nested(node, depth)
        return _text(node)


def _unescaped(escape: re.Match[str]) -> str:
    """A backslash escape undone: the character itself, or nothing for a line continuation."""
    return "" if escape.group(1) == "\n" else escape.group(1)


def _text(node: Node) -> str:
    return (node.text or b"").decode(errors="replace")


def _expands(node: Node) -> bool:
    return any(child.type in _DYNAMIC or _expands(child) for child in node.named_children)


def _joined(node: Node) -> bool:
    """Whether a backslash-newline joins two parts of a word here: bash reads one word where the grammar sees two."""
    children = node.children
    source = node.text or b""
    offset = node.start_byte
    return any(
        source[a.end_byte - offset : b.start_byte - offset] == b"\\\n" for a, b in itertools.pairwise(children)
    ) or any(_joined(child) for child in children if child.type != "heredoc_body")


def _base(word: str) -> str:
    return word.rpartition("/")[2]


# Shell options that take the next word: `bash -o pipefail -c …`.
_SHELL_VALUES = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def _script(program: str, args: list[str]) -> str | None:
    """The script `bash -c SCRIPT` or `eval WORDS` runs; None if it reads a script file (which a rule can name)."""
    if program == "eval":
        return " ".join(args)
    n = 0
    while n < len(args):
        arg = args[n]
        if arg in _SHELL_VALUES:
            n += 2
            continue
        if arg == "--" or not arg.startswith(("-", "+")):
            return None
        if not arg.startswith("--") and "c" in arg[1:]:
            return args[n + 1] if n + 1 < len(args) else ""
        n += 1
    return "-"  # no script and no -c: commands from stdin, a pipe's perhaps


# Wrappers: the options each takes that consume the next word, and how many leading operands it takes.
_WRAPPERS: dict[str, tuple[frozenset[str], int]] = {
    "env": (frozenset({"-u", "--unset", "-C", "--chdir", "-S", "--split-string"}), 0),
    "command": (frozenset(), 0),
    "builtin": (frozenset(), 0),
    "exec": (frozenset({"-a"}), 0),
    "nohup": (frozenset(), 0),
    "time": (frozenset({"-f", "--format", "-o", "--output"}), 0),
    "sudo": (frozenset({"-u", "--user", "-g", "--group", "-C", "-D", "--chdir", "-h", "-p", "-r", "-t", "-U"}), 0),
    "doas": (frozenset({"-u", "-C"}), 0),
    "nice": (frozenset({"-n", "--adjustment"}), 0),
    "ionice": (frozenset({"-c", "-n", "-p", "-P", "-u"}), 0),
    "setsid": (frozenset(), 0),
    "stdbuf": (frozenset({"-i", "-o", "-e"}), 0),
    "chrt": (frozenset(), 1),
    "taskset": (frozenset(), 1),
    "timeout": (frozenset({"-s", "--signal", "-k", "--kill-after"}), 1),
    "xargs": (
        frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s", "--arg-file", "--delimiter"}),
        0,
    ),
    "watch": (frozenset({"-n", "--interval", "-d"}), 0),
    "flock": (frozenset({"-w", "--timeout", "-E", "--conflict-exit-code"}), 1),
    "busybox": (frozenset(), 0),
}


def _unwrapped(program: str, args: list[str]) -> list[str]:
    """The command a wrapper runs (`sudo -u x rm -rf d` → `rm -rf d`), or [] if `program` runs none."""
    if program == "find":
        for n, arg in enumerate(args):
            if arg in ("-exec", "-execdir", "-ok", "-okdir"):
                rest = args[n + 1 :]
                end = next((i for i, word in enumerate(rest) if word in (";", "+")), len(rest))
                return rest[:end]
        return []
    if program not in _WRAPPERS:
        return []
    takes_value, operands = _WRAPPERS[program]
    n = 0
    while n < len(args):
        arg = args[n]
        if arg == "--":
            n += 1
            break
        if program == "env" and "=" in arg and not arg.startswith("-"):
            n += 1
        elif arg.startswith("-") and len(arg) > 1:
            n += 2 if arg.split("=")[0] in takes_value and "=" not in arg else 1
        else:
            break
    return args[n + operands :]
