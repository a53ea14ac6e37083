"""The built-in tools: `read_file`, `list_dir` and `grep`, confined to the workspace root.

Paths are resolved to real paths before use. `..`, absolute paths outside the root and
symlinks that lead out are refused with an error result the model can read. The work runs
in a thread so that concurrent tools and the token stream never wait on the disk.
"""

from __future__ import annotations

import asyncio
import fnmatch
import os
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from hotloop.agent.tools.registry import Tool, ToolContext, ToolError

READ_LINES = 2_000
INLINE_READ_BYTES = 256 * 1024
LIST_ENTRIES = 500
GREP_MATCHES = 200
GREP_FILE_BYTES = 2_000_000
SKIPPED_DIRS = frozenset(
    {
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        "__pycache__",
        ".venv",
        "venv",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
    }
)


def resolve(workspace: Path, raw: Any) -> Path:
    """The real path `raw` names inside `workspace`, or a ToolError saying why it is refused."""
    if not isinstance(raw, str) or not raw.strip() or "\0" in raw:
        raise ToolError("path must be a non-empty string")
    given = Path(raw)
    if ".." in given.parts:
        raise ToolError(f"refused {raw!r}: '..' is not allowed in paths")
    root = real_root(workspace)
    lexical = Path(os.path.normpath(given if given.is_absolute() else root / given))
    real = Path(os.path.realpath(lexical))
    if real.is_relative_to(root):
        return real
    if lexical.is_relative_to(root):
        raise ToolError(f"refused {raw!r}: it leads outside the workspace through a symlink")
    raise ToolError(f"refused {raw!r}: it is outside the workspace ({root})")


@lru_cache(maxsize=16)
def real_root(workspace: Path) -> Path:
    return Path(os.path.realpath(workspace))


def _display(workspace: Path, path: Path) -> str:
    relative = path.relative_to(real_root(workspace))
    return str(relative) if relative.parts else "."


def _optional_int(args: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ToolError(f"{name} must be an integer ≥ {minimum}")
    return value


def _is_binary(head: bytes) -> bool:
    return b"\0" in head


async def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    path = resolve(ctx.workspace, args.get("path"))
    offset = _optional_int(args, "offset", 1, 1)
    limit = _optional_int(args, "limit", READ_LINES, 1)
    # A thread hand-off costs ~200 µs; reading a small file costs less than that.
    if _size(path) <= INLINE_READ_BYTES:
        return _read_file(ctx.workspace, path, offset, limit)
    return await asyncio.to_thread(_read_file, ctx.workspace, path, offset, limit)


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0  # the read reports the problem


def _read_file(workspace: Path, path: Path, offset: int, limit: int) -> str:
    shown = _display(workspace, path)
    if path.is_dir():
        raise ToolError(f"{shown} is a directory; use list_dir")
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise ToolError(f"no such file: {shown}") from None
    except OSError as error:
        raise ToolError(f"cannot read {shown}: {error.strerror}") from None
    if _is_binary(data[:8192]):
        raise ToolError(f"{shown} is a binary file ({len(data):,} bytes)")
    lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
    if offset > max(len(lines), 1):
        raise ToolError(f"{shown} has {len(lines)} lines; offset {offset} is past the end")
    chosen = lines[offset - 1 : offset - 1 + limit]
    text = "".join(chosen)
    if offset > 1 or len(chosen) < len(lines):
        end = offset + len(chosen) - 1
        text += f"\n[lines {offset}-{end} of {len(lines)}; pass offset and limit to read more]"
    return text


async def list_dir(args: dict[str, Any], ctx: ToolContext) -> str:
    path = resolve(ctx.workspace, args.get("path") or ".")
    return await asyncio.to_thread(_list_dir, ctx.workspace, path)


def _list_dir(workspace: Path, path: Path) -> str:
    shown = _display(workspace, path)
    try:
        entries = sorted(os.scandir(path), key=lambda e: (not e.is_dir(), e.name))
    except FileNotFoundError:
        raise ToolError(f"no such directory: {shown}") from None
    except NotADirectoryError:
        raise ToolError(f"{shown} is a file; use read_file") from None
    except OSError as error:
        raise ToolError(f"cannot list {shown}: {error.strerror}") from None
    lines = [_entry_line(entry) for entry in entries[:LIST_ENTRIES]]
    if len(entries) > LIST_ENTRIES:
        lines.append(f"[{len(entries) - LIST_ENTRIES:,} more entries not shown]")
    return "\n".join(lines) if lines else f"{shown} is empty"


def _entry_line(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"{entry.name}@"
    if entry.is_dir():
        return f"{entry.name}/"
    try:
        return f"{entry.name}  {entry.stat().st_size:,} B"
    except OSError:
        return entry.name


async def grep(args: dict[str, Any], ctx: ToolContext) -> str:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("pattern must be a non-empty string")
    flags = re.IGNORECASE if args.get("ignore_case") is True else 0
    try:
        regex = re.compile(pattern, flags)
    except re.error as error:
        raise ToolError(f"invalid regular expression {pattern!r}: {error}") from None
    root = resolve(ctx.workspace, args.get("path") or ".")
    glob = args.get("glob")
    if glob is not None and not isinstance(glob, str):
        raise ToolError("glob must be a string such as '*.py'")
    return await asyncio.to_thread(_grep, ctx.workspace, root, regex, glob)


def _grep(workspace: Path, root: Path, regex: re.Pattern[str], glob: str | None) -> str:
    matches: list[str] = []
    files = [root] if root.is_file() else _walk(workspace, root)
    for path in files:
        if glob and not fnmatch.fnmatch(path.name, glob):
            continue
        for number, line in _lines_of(path):
            if regex.search(line):
                matches.append(f"{_display(workspace, path)}:{number}: {line.rstrip()[:300]}")
                if len(matches) >= GREP_MATCHES:
                    return "\n".join(matches) + f"\n[stopped at {GREP_MATCHES} matches; narrow the pattern or path]"
    return "\n".join(matches) if matches else f"no matches for {regex.pattern!r}"


def _walk(workspace: Path, root: Path) -> list[Path]:
    inside = real_root(workspace)
    found = []
    for directory, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in sorted(files):
            path = Path(directory, name)
            # A symlink may point out of the workspace; its target is not ours to read.
            if Path(os.path.realpath(path)).is_relative_to(inside):
                found.append(path)
    return found


def _lines_of(path: Path) -> list[tuple[int, str]]:
    try:
        if path.stat().st_size > GREP_FILE_BYTES:
            return []
        data = path.read_bytes()
    except OSError:
        return []
    if _is_binary(data[:8192]):
        return []
    return list(enumerate(data.decode("utf-8", errors="replace").splitlines(), 1))


def builtin_tools() -> list[Tool]:
    return [
        Tool(
            name="read_file",
            description="Read a text file in the workspace. Long files come back in pages of lines.",
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root."},
                    "offset": {"type": "integer", "description": "First line to read, from 1."},
                    "limit": {"type": "integer", "description": f"Number of lines to read (default {READ_LINES})."},
                },
                "required": ["path"],
            },
            handler=read_file,
            read_only=True,
            prefetch=True,
        ),
        Tool(
            name="list_dir",
            description="List a directory in the workspace: folders first (with a trailing /), then files with sizes.",
            parameters={
                "type": "object",
                "properties": {"path": {"type": "string", "description": "Directory relative to the workspace root."}},
            },
            handler=list_dir,
            read_only=True,
            prefetch=True,
        ),
        Tool(
            name="grep",
            description="Search files in the workspace for a regular expression; prints path:line: text.",
            parameters={
                "type": "object",
                "properties": {
                    "pattern": {"type": "string", "description": "Python regular expression."},
                    "path": {"type": "string", "description": "File or directory to search (default: the workspace)."},
                    "glob": {"type": "string", "description": "Only files whose name matches, e.g. '*.py'."},
                    "ignore_case": {"type": "boolean"},
                },
                "required": ["pattern"],
            },
            handler=grep,
            read_only=True,
            prefetch=True,
        ),
    ]
