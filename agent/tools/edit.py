"""The tools that change files: `edit_file` (replace an exact string) and `write_file` (create or overwrite).

Paths are confined to the workspace as the read tools' are (`workspace.open_target`: `..`, absolute
paths outside and symlinks that lead out are refused, each folder opened by descriptor), and hotloop's
own files (its config, hooks, data folder and session logs) are refused wherever they sit: a model
that could rewrite them could add a hook the next run executes, or rewrite the log of the session
it runs in. Approval rules match the path a write really reaches (`reached`), symlinks followed. A write is
atomic: a new file beside the old, synced, renamed over it, with the old file's mode. Each call's
preview is the unified diff it would apply, computed from the file as it is, without writing; a call
that would fail fails in its preview with the same message.

Writes from this process take turns, so two edits of one file in the same step both land: the second
reads what the first wrote. The work runs in a worker thread; a cancel abandons the await, but a write
once begun completes, so the file is either as before or wholly changed, never torn.
"""

from __future__ import annotations

import asyncio
import difflib
import os
import re
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any, Protocol

from hotloop.agent.tools.registry import Tool, ToolContext, ToolError, cap_output
from hotloop.agent.tools.workspace import (
    Missing,
    Target,
    WorkspaceError,
    named_path,
    open_existing,
    open_path,
    open_target,
    real_root,
    replace_file,
)

MAX_FILE_BYTES = 16 * 1024 * 1024  # the largest file edit_file reads, or write_file replaces
BINARY_PROBE = 8192  # a NUL byte in a file's first this many bytes makes it binary, as for read_file
RESULT_DIFF_LIMIT = 8_000  # characters of the diff a result carries back to the model
MINUS = "\u2212"

_WRITES = threading.Lock()  # one read-change-write at a time, so that parallel edits of one file all land


@dataclass(frozen=True)
class Change:
    """A file's text before (None: the file is new) and after a call."""

    path: str  # where the file really is, relative to the workspace root
    before: str | None
    after: str

    def diff(self) -> str:
        """The change as a unified diff with a/ and b/ labels; empty if nothing changes."""
        lines = difflib.unified_diff(
            (self.before or "").splitlines(keepends=True),
            self.after.splitlines(keepends=True),
            "/dev/null" if self.before is None else f"a/{self.path}",
            f"b/{self.path}",
        )
        return "".join(line if line.endswith("\n") else f"{line}\n\\ No newline at end of file\n" for line in lines)


def is_diff(preview: str) -> bool:
    """Whether a call's preview is a change's unified diff (else it is a command line)."""
    return preview.startswith("--- ")


def change_summary(path: str, diff: str) -> str:
    """One line for a change, e.g. `edit README.md +3 −1`; a diff from /dev/null is a `create`."""
    verb = "create" if diff.startswith("--- /dev/null\n") else "edit"
    added, removed = _counts(diff)
    return f"{verb} {path} +{added} {MINUS}{removed}"


def _counts(diff: str) -> tuple[int, int]:
    """Lines added and removed by a unified diff of one file."""
    lines = diff.splitlines()[2:]  # after the ---/+++ header, a line's first character says what it is
    return sum(line.startswith("+") for line in lines), sum(line.startswith("-") for line in lines)


def _result(change: Change) -> str:
    """What the model reads after a change: a line of counts, then the diff (capped) unless the file is new."""
    diff = change.diff()
    if not diff:
        return f"{change.path} unchanged: it already has this content"
    added, removed = _counts(diff)
    if change.before is None:
        return f"created {change.path}: +{added} {MINUS}0"
    return f"edited {change.path}: +{added} {MINUS}{removed}\n{cap_output(diff, RESULT_DIFF_LIMIT)}"


def _string(args: dict[str, Any], name: str) -> str:
    value = args.get(name)
    if not isinstance(value, str):
        raise ToolError(f"{name} must be a string")
    return value


def _current(target: Target) -> tuple[str, os.stat_result] | None:
    """The file's text and status, or None if it doesn't exist; a ToolError if it isn't UTF-8 text."""
    opened = open_existing(target)
    if opened is None:
        return None
    with opened:
        if opened.size > MAX_FILE_BYTES:
            raise ToolError(
                f"{opened.path} is too large to change ({opened.size:,} bytes; the most is {MAX_FILE_BYTES:,})"
            )
        data = _read_all(opened.fd, MAX_FILE_BYTES + 1)  # one byte more tells a file that grew since
        status = os.fstat(opened.fd)
    if len(data) > MAX_FILE_BYTES:
        raise ToolError(f"{opened.path} is too large to change (over {MAX_FILE_BYTES:,} bytes)")
    if b"\0" in data[:BINARY_PROBE]:
        raise ToolError(f"{opened.path} is a binary file ({len(data):,} bytes); only text files can be changed")
    try:
        return data.decode("utf-8"), status
    except UnicodeDecodeError:
        raise ToolError(f"{opened.path} is not UTF-8 text; only UTF-8 files can be changed") from None


def _read_all(fd: int, limit: int) -> bytes:
    chunks: list[bytes] = []
    while limit > 0 and (chunk := os.read(fd, limit)):
        chunks.append(chunk)
        limit -= len(chunk)
    return b"".join(chunks)


@dataclass(frozen=True)
class _Edit:
    old: str
    new: str
    replace_all: bool

    @classmethod
    def of(cls, args: dict[str, Any]) -> _Edit:
        old, new = _string(args, "old_string"), _string(args, "new_string")
        replace_all = args.get("replace_all", False)
        if not isinstance(replace_all, bool):
            raise ToolError("replace_all must be true or false")
        if not old:
            raise ToolError("old_string must not be empty; to create a file or replace all of it, use write_file")
        if old == new:
            raise ToolError("old_string and new_string are the same; there is nothing to change")
        return cls(old, new, replace_all)

    def applied(self, path: str, text: str) -> str:
        old, new = self.old, self.new
        if "\r\n" in text and "\r" not in old and old not in text:
            # The model writes LF: in a CRLF file, its lines are matched, and written back, with CRLF.
            old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = text.count(old)
        if count == 0:
            raise ToolError(f"old_string not found in {path}; {_near_miss(old, text)}")
        if count > 1 and not self.replace_all:
            raise ToolError(
                f"old_string found {count} times in {path}; give more surrounding context to make it unique, "
                "or set replace_all to change every one"
            )
        return text.replace(old, new)


def _near_miss(old: str, text: str) -> str:
    """What to tell the model about a failed match: where the text matches but for whitespace, if it does."""
    words = old.split()
    # Literal words joined by \s+ match in one way only: linear, whatever the text.
    found = re.search(r"\s+".join(map(re.escape, words)), text) if words else None
    if found:
        line = text.count("\n", 0, found.start()) + 1
        return (
            f"the text at line {line} matches but for whitespace (indentation, tabs or line endings): "
            "copy it exactly as read_file shows it"
        )
    return "it must match exactly, whitespace included; read the file again, it may have changed"


# hotloop's own folders (the config's, the data's) and what each is, for the refusal.
Protected = Mapping[Path, str]


def _refuse_own(workspace: Path, path: str, protected: Protected) -> None:
    """A ToolError if `path` (below the workspace root, symlinks resolved) is in one of hotloop's own folders."""
    where = real_root(workspace) / path
    for folder, what in protected.items():
        own = Path(os.path.realpath(folder))
        if where == own or where.is_relative_to(own):
            raise ToolError(f"refused {path}: it is in hotloop's {what} ({own}); no tool may write there")


def reached(workspace: Path, args: dict[str, Any]) -> tuple[str, str]:
    """Where a write to `args["path"]` lands and the path it names, below the root: symlinks followed, missing
    folders taken as named (nothing after a missing folder can be a symlink)."""
    raw = args.get("path")
    named = named_path(workspace, raw)
    try:
        with open_target(workspace, raw) as target:
            return target.path, named
    except Missing:
        parts = named.split("/")
        for kept in range(len(parts) - 1, -1, -1):
            try:
                with open_path(workspace, "/".join(parts[:kept]) or ".", "directory") as folder:
                    return "/".join([*([] if folder.path == "." else [folder.path]), *parts[kept:]]), named
            except Missing:
                continue
        raise


def _edit(workspace: Path, args: dict[str, Any], protected: Protected, *, write: bool) -> Change:
    edit = _Edit.of(args)
    with open_target(workspace, args.get("path")) as target:
        _refuse_own(workspace, target.path, protected)
        current = _current(target)
        if current is None:
            raise ToolError(f"no such file: {target.path}; to create it, use write_file")
        text, status = current
        change = Change(target.path, text, edit.applied(target.path, text))
        if write:
            replace_file(target, change.after.encode(), status)
    return change


def _write(workspace: Path, args: dict[str, Any], protected: Protected, *, write: bool) -> Change:
    content = _string(args, "content")
    try:
        target = open_target(workspace, args.get("path"), make_dirs=write)
    except Missing:
        if write:
            raise
        path = reached(workspace, args)[0]  # a folder on the way is missing: the write would make it
        _refuse_own(workspace, path, protected)
        return Change(path, None, content)
    with target:
        _refuse_own(workspace, target.path, protected)
        current = _current(target)
        before, status = current if current is not None else (None, None)
        change = Change(target.path, before, content)
        if write and before != content:
            replace_file(target, content.encode(), status)
    return change


class _Plan(Protocol):
    def __call__(self, workspace: Path, args: dict[str, Any], protected: Protected, *, write: bool) -> Change: ...


@dataclass(frozen=True)
class _FileTool:
    """A write tool's handler and preview, with the folders it must never write."""

    plan: _Plan
    protected: Protected

    def _written(self, workspace: Path, args: dict[str, Any]) -> str:
        try:
            with _WRITES:
                return _result(self.plan(workspace, args, self.protected, write=True))
        except OSError as error:  # the disk is full, the folder read-only: the old file is still there, whole
            raise ToolError(f"cannot write {args.get('path')!r}: {error.strerror or error}") from None

    async def run(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return await asyncio.to_thread(self._written, ctx.workspace, args)

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        change = await asyncio.to_thread(partial(self.plan, write=False), ctx.workspace, args, self.protected)
        return change.diff() or f"no change: {change.path} already has this content"


def _target(args: dict[str, Any], workspace: Path) -> tuple[str, str]:
    try:
        return reached(workspace, args)
    except WorkspaceError:
        return named_path(workspace, args.get("path")), named_path(workspace, args.get("path"))


def edit_tools(protected: Protected | None = None) -> list[Tool]:
    """`edit_file` and `write_file`: they change the workspace, so they run only once approved.

    `protected`: hotloop's own folders, each with what it is, refused to both.
    """
    edit, write = _FileTool(_edit, protected or {}), _FileTool(_write, protected or {})
    return [
        Tool(
            name="edit_file",
            description=(
                "Replace an exact string in a text file in the workspace. old_string must match the file's text "
                "exactly, whitespace included, and only once unless replace_all is set; read the file first. "
                "Returns the diff."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root."},
                    "old_string": {"type": "string", "description": "The exact text to replace."},
                    "new_string": {"type": "string", "description": "The text to put in its place."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence (default false)."},
                },
                "required": ["path", "old_string", "new_string"],
            },
            handler=edit.run,
            side_effects=True,
            preview=edit.preview,
            target=_target,
        ),
        Tool(
            name="write_file",
            description=(
                "Create a text file in the workspace, or overwrite one, with the given content; missing folders "
                "are made. To change part of a file, use edit_file."
            ),
            parameters={
                "type": "object",
                "properties": {
                    "path": {"type": "string", "description": "File path relative to the workspace root."},
                    "content": {"type": "string", "description": "The file's whole new content."},
                },
                "required": ["path", "content"],
            },
            handler=write.run,
            side_effects=True,
            preview=write.preview,
            target=_target,
        ),
    ]
