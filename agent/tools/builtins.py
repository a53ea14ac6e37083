"""The built-in tools: `read_file`, `list_dir` and `grep`, confined to the workspace root.

Paths are opened through `workspace`, which refuses `..`, absolute paths outside the root,
symlinks that lead out, FIFOs, devices and sockets, and checks what it opened rather than a
name. All the filesystem work runs in a worker thread, so the event loop never waits on the
disk and a tool's timeout or cancel is obeyed at once: the await is abandoned and the thread
is told to stop, which it does at its next chunk, line or file. Every read is bounded: read_file
reads at most READ_SCAN_BYTES of a file, grep GREP_FILE_BYTES of each and GREP_TOTAL_BYTES in
all, and grep's regular expressions are RE2's, which match in linear time.
"""

from __future__ import annotations

import asyncio
import fnmatch
import heapq
import os
import re
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Concatenate, ParamSpec, Protocol

import re2

from hotloop.agent.tools.registry import Tool, ToolContext, ToolError
from hotloop.agent.tools.workspace import Opened, open_dir, open_file, open_path, walk

MiB = 1024 * 1024
CHUNK = 64 * 1024  # bytes per read() call
BINARY_PROBE = 8192  # a NUL byte in a file's first this many bytes makes it binary
READ_LINES = 2_000
READ_SCAN_BYTES = 64 * MiB  # read_file reads no further into a file, to skip to `offset` or count its lines
READ_TEXT_BYTES = 1 * MiB  # the most text one read_file returns; a longer line is cut
LIST_ENTRIES = 500
GREP_MATCHES = 200
GREP_FILE_BYTES = 2 * MiB  # searched of each file
GREP_TOTAL_BYTES = 64 * MiB  # searched in all, per call
GREP_LINE_CHARS = 300  # of a matching line, shown
# RE2 is linear in the text, times the size of the compiled program: past ~60,000 instructions its
# DFA cache thrashes and a search crawls at seconds a megabyte, so bigger patterns are refused.
GREP_PROGRAM_SIZE = 50_000
SKIPPED_DIRS = frozenset(
    {".git", ".hg", ".svn", "node_modules", "__pycache__", ".venv", "venv", ".mypy_cache", ".pytest_cache",
     ".ruff_cache", ".tox"}
)  # fmt: skip
RE2_SYNTAX = (
    "grep uses RE2 syntax, which has no backreferences such as \\1 and no lookaround such as (?=…), (?!…), "
    "(?<=…) or (?<!…); write Python's \\Z as \\z"
)
# Patterns that anchor to the text's ends (\A, \z) or turn multi-line mode off: their match over a whole
# file says nothing about each line, so every line is tried on its own.
_TEXT_ANCHORED = re.compile(r"\\[Az]|\(\?[a-zA-Z]*-[a-zA-Z]*m")

P = ParamSpec("P")


class _Abandoned(Exception):
    """The awaiting side gave up (a timeout or a cancel): the thread stops, nobody reads its result."""


async def _in_thread(work: Callable[Concatenate[threading.Event, P], str], *args: P.args, **kwargs: P.kwargs) -> str:
    """`work(stop, …)` in a worker thread; a timeout or cancel abandons the await and sets `stop`."""
    stop = threading.Event()
    try:
        return await asyncio.to_thread(work, stop, *args, **kwargs)
    finally:
        stop.set()


def read_at_most(fd: int, budget: int, stop: threading.Event | None = None) -> bytes:
    """Up to `budget` bytes from `fd`, a chunk at a time; `stop`, once set, abandons the read."""
    chunks, left = [], budget
    while left > 0:
        if stop is not None and stop.is_set():
            raise _Abandoned
        chunk = os.read(fd, min(CHUNK, left))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _is_binary(head: bytes) -> bool:
    return b"\0" in head[:BINARY_PROBE]


def _optional_int(args: dict[str, Any], name: str, default: int, minimum: int) -> int:
    value = args.get(name, default)
    if value is None:
        return default
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ToolError(f"{name} must be an integer ≥ {minimum}")
    return value


async def read_file(args: dict[str, Any], ctx: ToolContext) -> str:
    offset = _optional_int(args, "offset", 1, 1)
    limit = _optional_int(args, "limit", READ_LINES, 1)
    return await _in_thread(_read_file, ctx.workspace, args.get("path"), offset, limit)


def _read_file(stop: threading.Event, workspace: Path, raw: object, offset: int, limit: int) -> str:
    with open_file(workspace, raw) as file:
        head = read_at_most(file.fd, CHUNK, stop)
        if _is_binary(head):
            raise ToolError(f"{file.path} is a binary file ({file.size:,} bytes)")
        page = _Page(offset, limit)
        page.feed(head)
        complete = _feed(file.fd, page, READ_SCAN_BYTES - len(head), stop)
    return page.render(file, complete)


def _feed(fd: int, page: _Page, budget: int, stop: threading.Event) -> bool:
    """Feed the rest of the file to `page` chunk by chunk; False if `budget` ran out before its end."""
    while budget > 0:
        if stop.is_set():
            raise _Abandoned
        chunk = os.read(fd, min(CHUNK, budget))
        if not chunk:
            return True
        page.feed(chunk)
        budget -= len(chunk)
    return os.read(fd, 1) == b""


class _Page:
    """Lines `offset`… of a file fed in chunks, and its line count, keeping only the lines asked for."""

    def __init__(self, offset: int, limit: int) -> None:
        self.first, self.last = offset, offset + limit - 1
        self.line = 1  # the number of the line the next byte belongs to
        self.end = offset - 1  # the last line kept, whole or in part
        self.kept: list[bytes] = []
        self.room = READ_TEXT_BYTES
        self.cut = False  # line `end` was cut: the page is full
        self.ends_line = True  # the last byte fed ended a line (or none was fed)

    def feed(self, chunk: bytes) -> None:
        if not chunk:
            return
        self.ends_line = chunk.endswith(b"\n")
        if self.line < self.first:
            chunk = self._skip(chunk)
        if self.line <= self.last:
            chunk = self._keep(chunk)
        self.line += chunk.count(b"\n")

    def _skip(self, chunk: bytes) -> bytes:
        """What of `chunk` is at or past line `first`; counts the lines before it."""
        wanted = self.first - self.line
        if chunk.count(b"\n") < wanted:
            self.line += chunk.count(b"\n")
            return b""
        self.line = self.first
        return chunk.split(b"\n", wanted)[-1]

    def _keep(self, chunk: bytes) -> bytes:
        """Keep what of `chunk` is in lines `first`…`last`; what comes after them is returned."""
        *complete, rest = chunk.split(b"\n", self.last - self.line + 1)
        for piece in complete:
            self._add(piece + b"\n")
            self.line += 1
        if self.line > self.last:
            return rest
        self._add(rest)  # the start of a line that goes on in the next chunk
        return b""

    def _add(self, piece: bytes) -> None:
        if self.cut or not piece:
            return
        if len(piece) > self.room:
            piece, self.cut = piece[: self.room], True
        self.kept.append(piece)
        self.room -= len(piece)
        self.end = self.line

    def render(self, file: Opened, complete: bool) -> str:
        total = self.line - 1 + (0 if self.ends_line else 1)  # lines so far
        if self.first > max(total, 1):
            if complete:
                raise ToolError(f"{file.path} has {total} lines; offset {self.first} is past the end")
            raise ToolError(
                f"offset {self.first} is past the first {READ_SCAN_BYTES // MiB} MiB of {file.path} "
                f"({total:,} lines), the most read_file reads; use grep to find the lines you want"
            )
        text = b"".join(self.kept).decode("utf-8", errors="replace")
        if self.first == 1 and self.end == total and complete and not self.cut:
            return text
        of = str(total) if complete else f"{total:,}+ (counted in the first {READ_SCAN_BYTES // MiB} MiB)"
        cut = f"; line {self.end} is cut at {READ_TEXT_BYTES // MiB} MiB" if self.cut else ""
        return f"{text}\n[lines {self.first}-{self.end} of {of}{cut}; pass offset and limit to read more]"


async def list_dir(args: dict[str, Any], ctx: ToolContext) -> str:
    return await _in_thread(_list_dir, ctx.workspace, args.get("path") or ".")


def _list_dir(stop: threading.Event, workspace: Path, raw: object) -> str:
    with open_dir(workspace, raw) as directory, os.scandir(directory.fd) as listing:
        entries, total = _first_entries(listing, stop)
        lines = [_entry_line(entry) for entry in entries]
    if total > LIST_ENTRIES:
        lines.append(f"[{total - LIST_ENTRIES:,} more entries not shown]")
    return "\n".join(lines) if lines else f"{directory.path} is empty"


def _first_entries(listing: Iterable[os.DirEntry[str]], stop: threading.Event) -> tuple[list[os.DirEntry[str]], int]:
    """The LIST_ENTRIES entries that sort first (folders, then files, by name) and how many there are."""
    total = 0

    def counted() -> Iterator[os.DirEntry[str]]:
        nonlocal total
        for entry in listing:
            if stop.is_set():
                raise _Abandoned
            total += 1
            yield entry

    # A heap of LIST_ENTRIES, not a sorted list of them all: a folder of millions stays cheap.
    first = heapq.nsmallest(LIST_ENTRIES, counted(), key=lambda e: (not e.is_dir(follow_symlinks=False), e.name))
    return first, total


def _entry_line(entry: os.DirEntry[str]) -> str:
    if entry.is_symlink():
        return f"{entry.name}@"
    if entry.is_dir(follow_symlinks=False):
        return f"{entry.name}/"
    try:
        return f"{entry.name}  {entry.stat(follow_symlinks=False).st_size:,} B"
    except OSError:
        return entry.name


async def grep(args: dict[str, Any], ctx: ToolContext) -> str:
    pattern = args.get("pattern")
    if not isinstance(pattern, str) or not pattern:
        raise ToolError("pattern must be a non-empty string")
    glob = args.get("glob")
    if glob is not None and not isinstance(glob, str):
        raise ToolError("glob must be a string such as '*.py'")
    ignore_case = args.get("ignore_case") is True
    return await _in_thread(_grep, ctx.workspace, args.get("path") or ".", pattern, ignore_case, glob)


class _Match(Protocol):
    def start(self) -> int: ...


class _Regex(Protocol):
    def search(self, text: bytes, pos: int = ...) -> _Match | None: ...


@dataclass(frozen=True)
class _Pattern:
    text: str
    line: _Regex  # matches within one line: `^` and `$` are the line's ends
    finder: _Regex | None  # the same over a whole file, to jump to the lines worth trying; None: try each


def _compile(pattern: str, ignore_case: bool) -> _Pattern:
    options = re2.Options()
    options.case_sensitive = not ignore_case
    options.log_errors = False  # RE2 would write its errors to the terminal the TUI draws on
    try:
        line = re2.compile(pattern, options)
    except re2.error as error:
        reason = error.args[0].decode() if error.args and isinstance(error.args[0], bytes) else str(error)
        raise ToolError(f"invalid regular expression {pattern!r}: {reason} ({RE2_SYNTAX})") from None
    if line.programsize > GREP_PROGRAM_SIZE:
        raise ToolError(
            f"regular expression {pattern!r} is too large: RE2 compiles it to {line.programsize:,} instructions, "
            f"grep allows {GREP_PROGRAM_SIZE:,}; use smaller repetition counts"
        )
    finder = None if _TEXT_ANCHORED.search(pattern) else re2.compile(f"(?m:{pattern})", options)
    return _Pattern(pattern, line, finder)


def _grep(
    stop: threading.Event, workspace: Path, raw: object, pattern: str, ignore_case: bool, glob: str | None
) -> str:
    compiled = _compile(pattern, ignore_case)
    hits = _Hits()
    try:
        with open_path(workspace, raw) as top:
            if top.is_dir:
                _search_tree(workspace, top, compiled, glob, hits, stop)
            elif glob is None or fnmatch.fnmatch(PurePosixPath(top.path).name, glob):
                _search_file(top, compiled, hits, stop)
    finally:
        re2.purge()  # re2.compile keeps 128 patterns, each with a DFA cache of up to 8 MiB: not ours
    return hits.report(pattern)


def _search_tree(
    workspace: Path, top: Opened, pattern: _Pattern, glob: str | None, hits: _Hits, stop: threading.Event
) -> None:
    def wanted(name: str) -> bool:
        return glob is None or fnmatch.fnmatch(name, glob)

    with closing(walk(workspace, top, stop, skip=SKIPPED_DIRS.__contains__, wanted=wanted)) as files:
        for file in files:
            with file:
                if not _search_file(file, pattern, hits, stop):
                    return


@dataclass
class _Hits:
    """grep's matching lines so far, and which of its caps cut the search."""

    lines: list[str] = field(default_factory=list)
    room: int = GREP_TOTAL_BYTES  # bytes left to search
    spent: bool = False  # GREP_TOTAL_BYTES ran out before the search did
    cut_files: list[str] = field(default_factory=list)  # searched only in their first GREP_FILE_BYTES

    def add(self, path: str, number: int, line: bytes) -> bool:
        """Keep a match; False once GREP_MATCHES are kept."""
        text = line.decode("utf-8", errors="replace").rstrip()
        if len(text) > GREP_LINE_CHARS:
            text = f"{text[:GREP_LINE_CHARS]} […{len(text) - GREP_LINE_CHARS:,} more characters]"
        self.lines.append(f"{path}:{number}: {text}")
        return len(self.lines) < GREP_MATCHES

    def report(self, pattern: str) -> str:
        notes = []
        if self.cut_files:
            more = len(self.cut_files) - 5
            shown = ", ".join(self.cut_files[:5]) + (f" and {more} more" if more > 0 else "")
            notes.append(f"[searched only the first {GREP_FILE_BYTES // MiB} MiB of {shown}]")
        if self.spent:
            notes.append(f"[stopped after searching {GREP_TOTAL_BYTES // MiB} MiB; narrow the path or glob]")
        if len(self.lines) >= GREP_MATCHES:
            notes.append(f"[stopped at {GREP_MATCHES} matches; narrow the pattern or path]")
        return "\n".join([*(self.lines or [f"no matches for {pattern!r}"]), *notes])


def _search_file(file: Opened, pattern: _Pattern, hits: _Hits, stop: threading.Event) -> bool:
    """Add the file's matching lines to `hits`; False once a cap says to stop."""
    if hits.room <= 0:
        hits.spent = True
        return False
    head = read_at_most(file.fd, min(BINARY_PROBE, hits.room), stop)
    if _is_binary(head):
        hits.room -= len(head)
        return True
    data = head + read_at_most(file.fd, min(GREP_FILE_BYTES, hits.room) - len(head), stop)
    hits.room -= len(data)
    if len(data) < file.size:
        if len(data) == GREP_FILE_BYTES:
            hits.cut_files.append(file.path)
        else:
            hits.spent = True
    # CRLF as LF: `$` then ends such lines too, as it did when lines were split on any line break.
    for number, line in _matching_lines(data.replace(b"\r\n", b"\n"), pattern, stop):
        if not hits.add(file.path, number, line):
            return False
    return not hits.spent


def _matching_lines(data: bytes, pattern: _Pattern, stop: threading.Event) -> Iterator[tuple[int, bytes]]:
    """The lines of `data` that match, with their numbers from 1.

    Searching the whole text for the pattern in multi-line mode finds, from any line on, a match
    starting no later than the next line that matches on its own; so only the line it starts in
    is tried, and the search goes on from the line after.
    """
    number, start = 1, 0
    while start < len(data):
        if stop.is_set():
            raise _Abandoned
        begin = start
        if pattern.finder is not None:
            found = pattern.finder.search(data, start)
            if found is None:
                return
            begin = max(start, data.rfind(b"\n", start, found.start()) + 1)
            number += data.count(b"\n", start, begin)
        end = data.find(b"\n", begin)
        end = len(data) if end < 0 else end
        line = data[begin:end]
        if pattern.line.search(line) is not None:
            yield number, line
        number, start = number + 1, end + 1


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
                    "pattern": {
                        "type": "string",
                        "description": "Regular expression in RE2 syntax (no backreferences or lookaround).",
                    },
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
