"""`hotloop mcp import`: the MCP servers of a Claude Code or Claude Desktop config, as `[mcp.NAME]` tables.

Claude Code keeps servers in `.mcp.json` and `~/.claude.json` (`mcpServers`, and each project's
under `projects.<path>.mcpServers`); Claude Desktop in `claude_desktop_config.json`. Their files
hold secrets as literals; hotloop's never does. A header becomes `headers_env` naming a variable to
export, and an environment value that may be a secret (its name says so by `secret_policy`'s rule,
the one run_shell and the session log follow) or uses `${VAR}` (which hotloop doesn't expand) is
left for the user to export, its name in the server's `pass_env` (a stdio server sees only an
allowlist of hotloop's environment besides). Each such step is a note for the user, which never
repeats the value.
"""

from __future__ import annotations

import json
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec

from hotloop import InputError
from hotloop.agent.tools.mcp_config import ENV_NAME, INVALID_NAME_CHARS, McpServer
from hotloop.nesting import TooDeep, decoded
from hotloop.secret_policy import is_secret_name
from hotloop.struct_errors import explained

WHOLE_REFERENCE = re.compile(r"\$\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(:-[^}]*)?\}")
# A `${VAR}` template the shell can take as it is, inside double quotes.
SHELL_SAFE = re.compile(r'[^"`\\]*')
KNOWN_KEYS = {"type", "command", "args", "env", "url", "headers"}
HTTP_TYPES = {"http", "streamable-http", "streamableHttp", "sse"}


@dataclass
class Imported:
    """The servers found, in the file's order, and what the user must do or know."""

    servers: list[McpServer] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    projects: dict[str, str] = field(default_factory=dict)  # a server's name → the Claude Code project it is from


def imported(path: Path, taken: set[str] | frozenset[str] = frozenset()) -> Imported:
    """The MCP servers of the Claude config at `path`; a name in `taken` (already configured) is skipped."""
    result = Imported()
    seen: dict[str, Any] = {}
    for project, name, entry in _entries(_read(path), path):
        where = f"{name!r} in {path}" + (f" (project {project})" if project else "")
        base = INVALID_NAME_CHARS.sub("_", name) or "mcp"
        if base in taken:
            result.notes.append(f"skipped {where}: [mcp.{base}] is in your config already")
            continue
        if seen.get(base) == entry:
            continue  # the same server, configured in more than one project
        unique, n = base, 2
        while unique in seen or unique in taken:
            unique, n = f"{base}{n}", n + 1
        seen[unique] = entry
        server = _server(unique, entry, where, result.notes)
        if server is not None:
            result.servers.append(server)
            if project:
                result.projects[unique] = project
    return result


def to_toml(result: Imported) -> str:
    """The servers as `[mcp.NAME]` tables, ready for hotloop's config file."""
    tables = []
    for server in result.servers:
        lines = [f"# from project {_string(result.projects[server.name])}"] if server.name in result.projects else []
        lines.append(f"[mcp.{server.name}]")
        if server.command is not None:
            lines.append(f"command = {_string(server.command)}")
            if server.args:
                lines.append(f"args = [{', '.join(map(_string, server.args))}]")
            if server.env:
                lines.append(f"env = {_inline(server.env)}")
            if server.pass_env:
                lines.append(f"pass_env = [{', '.join(map(_string, server.pass_env))}]")
        if server.url is not None:
            lines.append(f"url = {_string(server.url)}")
            if server.headers_env:
                lines.append(f"headers_env = {_inline(server.headers_env)}")
        tables.append("\n".join(lines) + "\n")
    return "\n".join(tables)


def append_to(config: Path, tables: str) -> None:
    """Add `tables` at the end of the config file (made if missing), once the whole still reads as TOML."""
    try:
        existing = config.read_text(encoding="utf-8")
    except FileNotFoundError:
        existing = ""
    except (OSError, UnicodeDecodeError) as error:
        raise InputError(f"cannot read config {config}: {error}") from None
    separator = "" if not existing or existing.endswith("\n\n") else "\n" if existing.endswith("\n") else "\n\n"
    try:
        decoded(tomllib.loads, existing + separator + tables, "toml")
    except (tomllib.TOMLDecodeError, TooDeep) as error:
        raise InputError(f"config {config} would not read back with the servers added: {error}") from None
    config.parent.mkdir(parents=True, exist_ok=True)
    with config.open("a", encoding="utf-8") as file:
        file.write(separator + tables)


def _read(path: Path) -> Any:
    try:
        return decoded(json.loads, path.expanduser().read_text(encoding="utf-8"))
    except OSError as error:
        raise InputError(f"cannot read {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise InputError(f"{path} is not UTF-8 text") from None
    except json.JSONDecodeError as error:
        raise InputError(f"{path} is not JSON: {error}") from None


def _entries(data: Any, path: Path) -> list[tuple[str, str, Any]]:
    """(project, name, entry) for each server: the file's own `mcpServers`, then each project's."""
    if not isinstance(data, dict):
        raise InputError(f"{path} is not a Claude config: its top level is not an object")
    tables = [("", data.get("mcpServers"))]
    projects = data.get("projects")
    if isinstance(projects, dict):
        tables += [(project, value.get("mcpServers")) for project, value in projects.items() if isinstance(value, dict)]
    found = [
        (project, name, entry) for project, table in tables if isinstance(table, dict) for name, entry in table.items()
    ]
    if not found:
        raise InputError(f"{path} configures no MCP servers (no mcpServers in it)")
    return found


def _server(name: str, entry: Any, where: str, notes: list[str]) -> McpServer | None:
    """The server `entry` describes, or None (said in a note) if hotloop can't take it."""
    if not isinstance(entry, dict):
        notes.append(f"skipped {where}: not an object")
        return None
    if ignored := sorted(set(entry) - KNOWN_KEYS):
        notes.append(f"[mcp.{name}] ignores {', '.join(ignored)} (no such setting in hotloop)")
    kind = entry.get("type") or ("stdio" if "command" in entry else "http")
    if kind == "stdio":
        env, passed = _env(name, entry, notes)
        passed = [variable for variable in passed if re.fullmatch(ENV_NAME, variable)]  # a config's names are upper
        given = {"command": entry.get("command"), "args": entry.get("args", []), "env": env, "pass_env": passed}
    elif kind in HTTP_TYPES:
        if kind == "sse":
            notes.append(f"[mcp.{name}] was an SSE server; hotloop speaks streamable HTTP (its URL often ends in /mcp)")
        given = {"url": entry.get("url"), "headers_env": _headers_env(name, entry, notes)}
    else:
        notes.append(f"skipped {where}: hotloop doesn't speak its transport {kind!r}")
        return None
    if any("${" in part for part in [entry.get("command") or "", *_strings(entry.get("args")), entry.get("url") or ""]):
        notes.append(f"[mcp.{name}] uses ${{VAR}} in its command, args or url, which hotloop doesn't expand: edit it")
    table = {"name": name, **given}
    try:
        return msgspec.convert(table, McpServer)
    except msgspec.ValidationError as error:
        notes.append(f"skipped {where}: {explained(error, table, McpServer)}")
        return None


def _env(name: str, entry: dict[str, Any], notes: list[str]) -> tuple[Any, list[str]]:
    """The literal, harmless part of a stdio server's `env`, and the names of the rest, which the user exports and
    `pass_env` hands the server."""
    env = entry.get("env", {})
    if not isinstance(env, dict):
        return env, []  # McpServer says what is wrong with it
    kept, passed = {}, []
    for key, value in env.items():
        reference = WHOLE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
        if reference and reference["name"] == key:
            passed.append(key)  # from the environment, as it is
            continue
        if isinstance(value, str) and "${" in value:
            notes.append(f"[mcp.{name}] needs {key}: {_export(key, value)}")
            passed.append(key)
        elif is_secret_name(key):
            notes.append(f"[mcp.{name}] needs {key}: export it (its value was not copied: it may be a secret)")
            passed.append(key)
        else:
            kept[key] = value
    return kept, passed


def _headers_env(name: str, entry: dict[str, Any], notes: list[str]) -> Any:
    """Each header as the variable to export its value in."""
    headers = entry.get("headers", {})
    if not isinstance(headers, dict):
        return headers  # McpServer says what is wrong with it
    named = {}
    for header, value in headers.items():
        reference = WHOLE_REFERENCE.fullmatch(value) if isinstance(value, str) else None
        if reference and re.fullmatch(ENV_NAME, reference["name"]):
            named[header] = reference["name"]
            continue
        variable = re.sub(r"[^A-Z0-9]+", "_", f"{name}_{header}".upper()).strip("_")
        if isinstance(value, str) and "${" in value:
            notes.append(f"[mcp.{name}] sends {header} from {variable}: {_export(variable, value)}")
        else:
            notes.append(
                f"[mcp.{name}] sends {header} from {variable}: export it with the value the file gives it "
                "(not copied: headers hold secrets)"
            )
        named[header] = variable
    return named


def _export(variable: str, template: str) -> str:
    """How to set `variable` to a `${VAR}` template: the shell reads the same syntax."""
    if SHELL_SAFE.fullmatch(template):
        return f'export {variable}="{template}"'
    return f"export {variable} as the file's ${{…}} template says"


def _strings(value: Any) -> list[str]:
    return [part for part in value if isinstance(part, str)] if isinstance(value, list) else []


def _string(value: str) -> str:
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _inline(table: dict[str, str]) -> str:
    keys = [key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key) for key in table]
    return "{ " + ", ".join(f"{key} = {_string(value)}" for key, value in zip(keys, table.values(), strict=True)) + " }"
