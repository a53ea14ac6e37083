"""A shell command line read as the simple commands it would run, with tree-sitter-bash.

Approval rules judge a `run_shell` call by what it runs, not by its text (`approvals.py`): every
command of a list, a pipeline, a subshell, a block, an `if`, a loop or a function's body; every
command or process substitution, wherever it sits (an argument, a string, a redirection, a
heredoc); and what a command makes run besides itself (`runners.py`, `carriers.py`): the command
behind a wrapper (`env`, `sudo`, `timeout`, `xargs`, `find -exec`, …), the script of `bash -c`,
`eval`, `trap` or a git alias, a literal heredoc a shell reads. Each becomes a `SimpleCommand`:
its words as bash would pass them, once quotes and escapes are undone, with the ones bash expands
as file name patterns marked.

What can't be read for sure is said, never guessed (`unread`): a word whose value comes from an
expansion (`$X`, `$(…)`, `{a,b}`, `$'…'`), a heredoc whose body expands, a function definition
(the name it defines would look like a program), a shell reading a pipe, syntax that doesn't
parse, nesting past `MAX_LEVELS`. Rules never allow such a call; deny rules still see every
command that could be read. Code that runs but can't be read before it runs (`source FILE`,
`python -c`, an alias) is a `doubt`: deny rules can't rule it out.
"""

from __future__ import annotations

import itertools
import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

from hotloop.agent.carriers import variables
from hotloop.agent.runners import runs
from hotloop.agent.runs import Doubt, Inner, Run, Script

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# Where a program named by its full path is the same program as named bare.
SYSTEM_BIN = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
MAX_DEPTH = 8  # `bash -c` inside `bash -c`…: deeper than this is read no further
MAX_LEVELS = 150  # parse-tree levels walked in all, scripts inside scripts counted: `$($($(…)))` deeper is unread
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
_HEREDOC_ESCAPE = re.compile(r"\\([\\$`\n])")
_GLOB = re.compile(r"[*?]|\[[^]]*\]")  # in a word's unquoted text, escapes taken out


@dataclass(frozen=True)
class SimpleCommand:
    """One command bash would run: `NAME=value` assignments, then the program and its arguments."""

    words: tuple[str, ...]
    assignments: tuple[str, ...] = ()
    writes: tuple[str, ...] = ()  # files its output redirections write (sinks like /dev/null left out)
    unread: str = ""  # why its words can't all be known before it runs; "" when they can
    globs: frozenset[int] = frozenset()  # the words bash expands as file name patterns (`/bin/r?`, `*`)
    more: str = ""  # why it gets more arguments when it runs (xargs's input); "" when it doesn't
    stdin: str | None = None  # the text a literal heredoc or here-string gives it

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
    doubts: list[str] = field(default_factory=list)  # code it runs that no rule can read (`source`, `python -c`)

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
        self.levels = 0  # of the scripts being read: what walking them takes of Python's stack

    def read(self, text: str, depth: int) -> None:
        if depth > MAX_DEPTH:
            self.line.unread.append(f"commands nested more than {MAX_DEPTH} deep")
            return
        root = _parser().parse(text.encode()).root_node
        levels = _levels(root, MAX_LEVELS - self.levels)
        if self.levels + levels > MAX_LEVELS:
            self.line.unread.append(f"it nests more than {MAX_LEVELS} levels deep")
            return
        if root.has_error:
            self.line.unread.append("it doesn't parse as a bash command line")
        self.levels += levels
        self.walk(root, depth)
        self.levels -= levels

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
            for child in node.named_children[1:]:  # the body: commands the line may run
                self.walk(child, depth)
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
            written, extra, _ = self.redirect(redirect, unread, depth)
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
        stdin: str | None = None
        nodes = list(words)
        for redirect in redirects:
            written, extra, given = self.redirect(redirect, unread, depth)
            writes += written
            stdin = given if redirect.type in ("heredoc_redirect", "herestring_redirect") else stdin
            nodes += extra
            argv += [self.word(w, unread, depth) for w in extra]  # `rm >/dev/null -rf d`: bash's arguments
        if node is not None and _joined(node):
            unread.append("a line continuation inside a word")
        globs = frozenset(n for n, w in enumerate(nodes) if _globbed(w))
        why = "; ".join(dict.fromkeys(unread))
        command = SimpleCommand(tuple(argv), tuple(sets), tuple(writes), why, globs, stdin=stdin)
        self.line.commands.append(command)
        self.follow(variables(sets), command, depth)
        self.follow(runs(command.words, stdin), command, depth)

    def follow(self, found: list[Run], outer: SimpleCommand, depth: int) -> None:
        """What a command makes run besides itself, read: commands, command lines, doubts, what can't be read."""
        if found and depth >= MAX_DEPTH:
            self.line.unread.append(f"commands nested more than {MAX_DEPTH} deep")
            return
        for run in found:
            if isinstance(run, Inner):
                command = _inner(run, outer)
                self.line.commands.append(command)
                self.follow(runs(command.words, command.stdin, command.more), command, depth + 1)
            elif isinstance(run, Script):
                self.read(run.text, depth + 1)
            elif isinstance(run, Doubt):
                self.line.doubts.append(run.reason)
            else:
                self.line.unread.append(run.reason)

    def assignment(self, node: Node, unread: list[str], depth: int) -> str:
        name = node.child_by_field_name("name")
        value = node.child_by_field_name("value")
        name_text = _text(name) if name is not None else ""
        return f"{name_text}={self.word(value, unread, depth) if value is not None else ''}"

    def redirect(self, node: Node, unread: list[str], depth: int) -> tuple[list[str], list[Node], str | None]:
        """The files an output redirection writes, the words after its target (the command's, to bash), and
        the text a heredoc or here-string gives, where it is literal."""
        if node.type in ("heredoc_redirect", "herestring_redirect"):
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in _text(start) for q in "'\"\\")
            self.nested(node, depth)
            if not quoted and _expands(node):
                unread.append("a heredoc or here-string that expands")
                return [], [], None
            if node.type == "herestring_redirect":
                return [], [], "".join(self.word(part, unread, depth) for part in node.named_children) + "\n"
            return [], [], _heredoc(node, quoted)
        operator = next((c for c in node.children if not c.is_named), None)
        destinations = node.children_by_field_name("destination")
        value = self.word(destinations[0], unread, depth) if destinations else ""
        extra = destinations[1:]
        kind = _text(operator) if operator is not None else ""
        if kind in _WRITES or (kind == ">&" and not value.isdigit() and value != "-"):
            return ([] if value in _SINKS else [value]), extra, None
        return [], extra, None

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


def _levels(root: Node, most: int) -> int:
    """How deep the tree under `root` goes, counted without recursion, up to just past `most`."""
    cursor = root.walk()
    deepest = 0
    while deepest <= most:
        deepest = max(deepest, cursor.depth)
        if cursor.goto_first_child():
            continue
        while not cursor.goto_next_sibling():
            if not cursor.goto_parent():
                return deepest
    return deepest


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


def _heredoc(node: Node, quoted: bool) -> str:
    """The text a literal heredoc gives a command on stdin: as written if its delimiter is quoted, else unescaped."""
    body = next((child for child in node.named_children if child.type == "heredoc_body"), None)
    text = _text(body) if body is not None else ""
    return text if quoted else _HEREDOC_ESCAPE.sub(_unescaped, text)


def _globbed(node: Node) -> bool:
    """Whether bash expands this word as a file name pattern: a `*`, `?` or `[…]` outside quotes."""
    if node.type == "concatenation":
        unquoted = "".join(_text(part) if part.type == "word" else "\0" for part in node.children)
    elif node.type == "word":
        unquoted = _text(node)
    else:
        return False
    return bool(_GLOB.search(re.sub(r"\\.", "", unquoted, flags=re.DOTALL)))


def _inner(run: Inner, outer: SimpleCommand) -> SimpleCommand:
    """The command a wrapper runs, its words' marks carried over from the wrapper's own."""
    globs = frozenset(n for n, origin in enumerate(run.origins) if origin is not None and origin in outer.globs)
    return SimpleCommand(run.words, (), (), outer.unread, globs, run.more or outer.more, outer.stdin)
