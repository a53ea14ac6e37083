"""The tools a request offers, by what they do: which reads a file, lists a folder, searches, edits, writes or runs
a command, and the arguments each wants, read from its name, description and JSON schema.

The planner plans in hotloop's words (`read_file {path}`, `list_dir {path}`, `grep {pattern}`, `edit_file`,
`write_file`, `run_shell {command}`); `Toolbox.call` turns each call into the offered tool's: Claude Code's `Read`
with an absolute `file_path`, Codex's `exec_command` with `cmd`, opencode's `read` with an absolute `filePath`, a
`shell` that takes an argv array. A tool of hotloop's own name is taken as it is, so hotloop gets the calls it
always got; any other plays a part only when its schema requires the argument the job takes (a path, a pattern, a
command): one that requires nothing says nothing of which argument is which, and is called when the task names it,
as before. An agent whose only tool for looking is a shell reads, lists and searches with it (`cat`, `ls`, `grep`),
as a model would; hotloop's `run_shell` is not used so, since hotloop offers its own tools for looking and its shell
asks for an approval a look shouldn't.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any

from hotloop.sim.template import Call

ROLES = ("read_file", "list_dir", "grep", "edit_file", "write_file", "run_shell")
LOOKING = ("read_file", "list_dir", "grep")  # roles a shell can stand in for
_WORDS = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")
_PATHS = ("path", "file_path", "filepath", "file", "filename", "file_name", "target_file", "absolute_path")
_DIRS = ("path", "dir", "directory", "dir_path", "folder", "target_directory")
_PATTERNS = ("pattern", "regex", "query", "search", "glob")
_COMMANDS = ("command", "cmd", "script", "commands")
# opencode spells them in camelCase (`oldString`): names are compared lowercased.
_OLD = ("old_string", "old_str", "old_text", "old", "oldstring")
_NEW = ("new_string", "new_str", "new_text", "new", "newstring")
_CONTENTS = ("content", "contents", "file_text", "text")
_NOT_FILES = {"image", "images", "media", "notebook", "mcp", "resource", "stdin", "web", "url", "tool", "tools"}


@dataclass(frozen=True)
class Offered:
    """A tool as the request offers it: its name, what it says it does, its JSON schema."""

    name: str
    description: str
    schema: dict[str, Any]

    @property
    def properties(self) -> dict[str, Any]:
        found = self.schema.get("properties")
        return found if isinstance(found, dict) else {}

    @property
    def required(self) -> list[str]:
        found = self.schema.get("required")
        return [name for name in found if name in self.properties] if isinstance(found, list) else []

    @property
    def words(self) -> set[str]:
        return {word.lower() for word in _WORDS.findall(self.name)}

    def needs(self, names: tuple[str, ...], kinds: tuple[str, ...] = ("string",)) -> bool:
        """Whether one of `names` is a required property: a schema that says which argument is which."""
        return self.prop(names, kinds) in self.required

    def prop(self, names: tuple[str, ...], kinds: tuple[str, ...] = ("string",)) -> str | None:
        """The first of `names` the schema has with one of `kinds`, a required one first."""
        ordered = [*self.required, *(name for name in self.properties if name not in self.required)]
        for name in ordered:
            if name.lower() in names and _kind(self.properties[name]) in (*kinds, None):
                return name
        return None


def offered(tools: list[dict[str, Any]]) -> list[Offered]:
    """The request's tools that take JSON arguments: OpenAI's nested or flat function tools, Anthropic's."""
    found = []
    for tool in tools:
        # OpenAI Chat nests under "function" with "parameters"; Responses is flat; Anthropic has "input_schema".
        spec = tool.get("function", tool)
        if not isinstance(spec, dict) or tool.get("type") not in (None, "function", "custom"):
            continue  # a server tool or a namespace: nothing the planner calls
        schema = spec.get("parameters", spec.get("input_schema", {}))
        if isinstance(spec.get("name"), str) and isinstance(schema, dict):
            found.append(Offered(spec["name"], str(spec.get("description") or ""), schema))
    return found


class Toolbox:
    """The offered tool for each of hotloop's roles, and the calls in the offered tools' terms."""

    def __init__(self, tools: list[dict[str, Any]], cwd: str | None = None) -> None:
        self.tools = offered(tools)
        self.cwd = cwd
        self.roles: dict[str, Offered] = {}
        for role in ROLES:
            tool = next((tool for tool in self.tools if tool.name == role), None) or next(
                (tool for tool in self.tools if tool not in self.roles.values() and _DOES[role](tool)), None
            )
            # opencode lists a folder by reading it (its glob needs ripgrep); its read says it takes a directory.
            reader = self.roles.get("read_file")
            if role == "list_dir" and reader is not None and reader.name != "read_file" and _reads_folders(reader):
                tool = next((tool for tool in self.tools if tool.name == role), reader)
            if tool is not None:
                self.roles[role] = tool
        shell = self.roles.get("run_shell")
        self.by_shell = {
            role for role in LOOKING if role not in self.roles and shell is not None and shell.name != "run_shell"
        }

    @property
    def available(self) -> set[str]:
        """The roles some offered tool plays."""
        return set(self.roles) | self.by_shell

    @property
    def unbound(self) -> dict[str, dict[str, Any]]:
        """The offered tools that play no role, by name: the planner calls them when the task names them."""
        bound = {tool.name for tool in self.roles.values()}
        return {tool.name: tool.schema for tool in self.tools if tool.name not in bound}

    def call(self, call: Call) -> Call:
        """`call`, made in hotloop's words, as the offered tool takes it."""
        tool = self.roles.get(call.name)
        if (tool is not None and tool.name == call.name) or call.name not in ROLES:
            return call
        arguments = json.loads(call.arguments)
        if tool is None:
            tool, arguments = self.roles["run_shell"], {"command": _shell_line(call.name, arguments)}
            return Call(call.id, tool.name, json.dumps(_shell_arguments(tool, arguments["command"])))
        return Call(call.id, tool.name, json.dumps(self._arguments(call.name, tool, arguments)))

    def _arguments(self, role: str, tool: Offered, given: dict[str, Any]) -> dict[str, Any]:
        if role == "run_shell":
            return _shell_arguments(tool, given["command"])
        arguments = _filled(tool)
        pattern = tool.prop(_PATTERNS)
        if role == "list_dir" and pattern in tool.required:  # a glob tool: everything in the folder
            arguments[pattern] = "*"
            folder, where = str(given.get("path", ".")), tool.prop(_DIRS)
            if where is not None and folder not in ("", ".", "./"):
                arguments[where] = self._absolute(folder) if _wants_absolute(tool, where) else folder
            return arguments
        renames = {
            "path": (tool.prop(_DIRS) or tool.prop(_PATHS)) if role == "list_dir" else tool.prop(_PATHS),
            "pattern": tool.prop(_PATTERNS),
            "old_string": tool.prop(_OLD),
            "new_string": tool.prop(_NEW),
            "content": tool.prop(_CONTENTS),
            "replace_all": tool.prop(("replace_all", "replaceall"), ("boolean",)),
        }
        for key, value in given.items():
            name = renames.get(key)
            if name is not None:
                arguments[name] = self._absolute(value) if key == "path" and _wants_absolute(tool, name) else value
        return arguments

    def _absolute(self, path: str) -> str:
        if self.cwd is None or PurePosixPath(path).is_absolute():
            return path
        joined = PurePosixPath(self.cwd) / path
        return str(joined.parent if joined.name == "." else joined)


def _kind(schema: Any) -> str | None:
    kind = schema.get("type") if isinstance(schema, dict) else None
    return kind if isinstance(kind, str) else None


def _wants_absolute(tool: Offered, name: str) -> bool:
    described = tool.properties[name].get("description", "") if isinstance(tool.properties[name], dict) else ""
    return "absolute" in f"{described}".lower()


def _filled(tool: Offered) -> dict[str, Any]:
    """A value of its type for each required property, for the planner's own to overwrite."""
    defaults = {"string": "", "integer": 0, "number": 0, "boolean": False, "array": [], "object": {}}
    return {name: defaults.get(_kind(tool.properties[name]) or "string", "") for name in tool.required}


def _shell_arguments(tool: Offered, command: str) -> dict[str, Any]:
    arguments = _filled(tool)
    name = tool.prop(_COMMANDS, ("string", "array")) or "command"
    arguments[name] = ["bash", "-lc", command] if _kind(tool.properties.get(name)) == "array" else command
    return arguments


def _shell_line(role: str, arguments: dict[str, Any]) -> str:
    """The command line a shell reads, lists or searches with."""
    if role == "read_file":
        return f"cat -- {shlex.quote(str(arguments['path']))}"
    if role == "list_dir":
        folder = str(arguments.get("path", "."))
        return "ls -la" if folder in ("", ".", "./") else f"ls -la -- {shlex.quote(folder)}"
    return f"grep -rn -- {shlex.quote(str(arguments['pattern']))} ."


def _describes(tool: Offered, pattern: str) -> bool:
    return re.search(pattern, tool.description, re.IGNORECASE) is not None


def _reads(tool: Offered) -> bool:
    words = tool.words
    if words & _NOT_FILES or not tool.needs(_PATHS):
        return False
    return "read" in words or bool(words & {"view", "cat", "open", "show"} and "file" in words)


def _reads_folders(tool: Offered) -> bool:
    path = tool.properties.get(tool.prop(_PATHS) or "")
    described = path.get("description", "") if isinstance(path, dict) else ""
    return re.search(r"\b(director(?:y|ies)|folders?)\b", f"{described}", re.IGNORECASE) is not None


def _lists(tool: Offered) -> bool:
    words = tool.words
    if words & _NOT_FILES or (tool.prop(_DIRS) is None and tool.prop(_PATTERNS) is None):
        return False
    return bool(words & {"ls", "glob", "tree", "dir", "directory", "folder"}) or (
        "list" in words and _describes(tool, r"\b(files?|director(?:y|ies)|folders?)\b")
    )


def _searches(tool: Offered) -> bool:
    words = tool.words
    if words & _NOT_FILES or not tool.needs(_PATTERNS):
        return False
    return bool(words & {"grep", "rg", "search", "find"})


def _edits(tool: Offered) -> bool:
    return tool.needs(_PATHS) and tool.needs(_OLD) and tool.needs(_NEW)


def _writes(tool: Offered) -> bool:
    words = tool.words
    return bool(words & {"write", "create"}) and tool.needs(_PATHS) and tool.needs(_CONTENTS)


def _runs(tool: Offered) -> bool:
    words = tool.words
    return bool(words & {"bash", "shell", "exec", "terminal", "command", "run"}) and tool.needs(
        _COMMANDS, ("string", "array")
    )


_DOES = {
    "read_file": _reads,
    "list_dir": _lists,
    "grep": _searches,
    "edit_file": _edits,
    "write_file": _writes,
    "run_shell": _runs,
}
