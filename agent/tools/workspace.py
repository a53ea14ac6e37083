"""Open paths inside the workspace so that what is read is what was checked.

A path is opened one component at a time, each relative to the descriptor of the folder before
it and with O_NOFOLLOW, starting from a descriptor of the workspace root: the kernel never
follows a symlink for us. A symlink met on the way is read and resolved here; one that leads
out of the root is refused, one that stays inside keeps working. Swapping a component for a
symlink after it was looked at cannot redirect the open: the open itself refuses symlinks.

Only regular files and folders are opened, with O_NONBLOCK so that not even an open can wait
on a FIFO; FIFOs, devices and sockets are refused with a message the model can read.

Writing goes the same way: `open_target` opens the folder a file is in (making missing folders
one at a time, each inside the one opened before it) and `replace_file` writes a new file beside
the old one and renames it over it, both by the folder's descriptor, never by a name from the root.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
import threading
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path, PurePosixPath
from typing import Literal

from hotloop.agent.tools.registry import ToolError

Want = Literal["file", "directory", "file or directory"]

MAX_SYMLINKS = 40  # symlinks resolved for one path, as Linux allows for one lookup
MAX_DEPTH = 64  # folders a walk goes down below its top; each level holds a descriptor
_OPEN = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "FIFO",
    stat.S_IFCHR: "character device",
    stat.S_IFBLK: "block device",
    stat.S_IFSOCK: "socket",
}
_REGULAR = {"file": "regular file", "directory": "directory", "file or directory": "regular file or directory"}


class WorkspaceError(ToolError):
    """A path the tools refuse or cannot open; the message says which and why."""


class Missing(WorkspaceError):
    """The path, or a folder on its way, does not exist."""


class _Outside(Exception):
    """A symlink led out of the workspace."""


class _Special(Exception):
    """The path is a FIFO, a device or a socket; the argument says which."""


@dataclass
class Opened:
    """An open regular file or folder inside the workspace; a `with` block closes it."""

    fd: int
    path: str  # where it really is, relative to the workspace root ("." for the root itself)
    is_dir: bool
    size: int

    def __enter__(self) -> Opened:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.fd)


def open_file(workspace: Path, raw: object) -> Opened:
    """The regular file `raw` names, open for reading."""
    opened = open_path(workspace, raw, "file")
    if opened.is_dir:
        os.close(opened.fd)
        raise WorkspaceError(f"{opened.path} is a directory; use list_dir")
    return opened


def open_dir(workspace: Path, raw: object) -> Opened:
    """The folder `raw` names, open for listing."""
    opened = open_path(workspace, raw, "directory")
    if not opened.is_dir:
        os.close(opened.fd)
        raise WorkspaceError(f"{opened.path} is a file; use read_file")
    return opened


def open_path(workspace: Path, raw: object, want: Want = "file or directory") -> Opened:
    """The regular file or folder `raw` names inside `workspace`, open; `want` words the errors."""
    parts = _parts(workspace, raw)
    with _refusals(raw, "/".join(parts) or ".", want):
        root = _open_root(workspace)
        try:
            return _resolve(root, parts, workspace)
        finally:
            os.close(root)


@contextmanager
def _refusals(raw: object, shown: str, want: Want) -> Iterator[None]:
    """The failures of resolving `raw` as WorkspaceErrors the model can read."""
    try:
        yield
    except _Outside:
        raise WorkspaceError(f"refused {raw!r}: it leads outside the workspace through a symlink") from None
    except _Special as special:
        raise WorkspaceError(f"refused {raw!r}: it is a {special}, not a {_REGULAR[want]}") from None
    except FileNotFoundError:
        raise Missing(f"no such {want}: {shown}") from None
    except NotADirectoryError:
        raise WorkspaceError(f"no such {want}: {shown}") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise WorkspaceError(f"refused {raw!r}: too many levels of symbolic links") from None
        raise WorkspaceError(f"cannot open {shown}: {error.strerror}") from None


@dataclass
class Target:
    """Where a file is to be written: its folder, open, and its name there; a `with` block closes the folder."""

    folder: Opened
    name: str

    @property
    def path(self) -> str:
        """Where the file really is, relative to the workspace root."""
        return _join(self.folder.path, self.name)

    def __enter__(self) -> Target:
        return self

    def __exit__(self, *exc: object) -> None:
        os.close(self.folder.fd)


def open_target(workspace: Path, raw: object, *, make_dirs: bool = False) -> Target:
    """The folder of the file `raw` names, open, and the file's name in it; the file itself may not exist.

    A symlink in the file's place is followed, if it stays inside, so that a write replaces what it
    points to and the link stays. With `make_dirs`, missing folders on the way are made.
    """
    parts = _parts(workspace, raw)
    with _refusals(raw, "/".join(parts) or ".", "file"):
        root = _open_root(workspace)
        try:
            for _ in range(MAX_SYMLINKS + 1):
                if not parts or parts[-1] == "..":
                    raise WorkspaceError(f"refused {raw!r}: it names a directory, not a file")
                folder = _resolve(root, parts[:-1], workspace, make_dirs=make_dirs)
                try:
                    if not folder.is_dir:
                        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
                    link = _link_at(folder.fd, parts[-1])
                except BaseException:
                    os.close(folder.fd)
                    raise
                if link is None:
                    return Target(folder, parts[-1])
                os.close(folder.fd)
                if os.path.isabs(link):
                    rest = _below_root(workspace, link)
                    if rest is None:
                        raise _Outside
                    parts = rest
                else:
                    parts = [*_split(folder.path), *PurePosixPath(link).parts]
            raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
        finally:
            os.close(root)


def _link_at(folder: int, name: str) -> str | None:
    """The target of `name` in `folder` if it is a symlink; None if it isn't one, or doesn't exist."""
    try:
        mode = os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        return None
    return os.readlink(name, dir_fd=folder) if stat.S_ISLNK(mode) else None


def open_existing(target: Target) -> Opened | None:
    """The regular file at `target`, open for reading; None if there is none yet."""
    with _refusals(target.path, target.path, "file"):
        try:
            mode = os.stat(target.name, dir_fd=target.folder.fd, follow_symlinks=False).st_mode
        except FileNotFoundError:
            return None
        fd = None if stat.S_ISLNK(mode) else _open_at(target.folder.fd, target.name, mode, [])
        if fd is None:
            raise WorkspaceError(f"{target.path} changed while being opened (it is a symlink now); try again")
        opened = _checked(fd, target.path)
    if opened.is_dir:
        os.close(opened.fd)
        raise WorkspaceError(f"{target.path} is a directory, not a file")
    return opened


def replace_file(target: Target, data: bytes, old: os.stat_result | None) -> None:
    """Put `data` at `target` in one step: written to a new file beside it, synced, and renamed over it.

    A reader sees the old file or the new one, never part of one; a failure leaves the old file and
    no temporary one. The new file gets the old one's mode and, where allowed, its owner; without
    an old file, 0o666 less the umask, as any new file.
    """
    folder = target.folder.fd
    temporary = f".hotloop-{secrets.token_hex(8)}.tmp"
    fd = os.open(
        temporary,
        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
        0o600 if old is not None else 0o666,
        dir_fd=folder,
    )
    try:
        try:
            if old is not None:
                os.fchmod(fd, stat.S_IMODE(old.st_mode))  # before any byte is written: a private file stays private
                with suppress(PermissionError):  # only root may give a file away
                    os.fchown(fd, old.st_uid, old.st_gid)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temporary, target.name, src_dir_fd=folder, dst_dir_fd=folder)
    except BaseException:
        with suppress(OSError):
            os.unlink(temporary, dir_fd=folder)
        raise
    os.fsync(folder)  # the rename itself survives a crash


def walk(
    workspace: Path,
    top: Opened,
    stop: threading.Event,
    *,
    skip: Callable[[str], bool],
    wanted: Callable[[str], bool],
) -> Generator[Opened, None, None]:
    """The regular files below the folder `top` whose name is `wanted`, each open; the caller closes them.

    Folders come in name order, each one's files before its subfolders; `skip`ped folders, symlinked
    folders and folders deeper than MAX_DEPTH are not entered. A symlinked file is resolved as
    `open_path` does and left out if it leads outside. The walk ends early once `stop` is set.
    """
    root = _open_root(workspace)
    try:
        yield from _Walk(workspace, root, stop, skip, wanted).files(top.fd, top.path, 0)
    finally:
        os.close(root)


@dataclass
class _Walk:
    workspace: Path
    root: int
    stop: threading.Event
    skip: Callable[[str], bool]
    wanted: Callable[[str], bool]

    def files(self, fd: int, path: str, depth: int) -> Iterator[Opened]:
        with os.scandir(fd) as listing:
            entries = sorted(listing, key=lambda entry: entry.name)
        folders = []
        for entry in entries:
            if self.stop.is_set():
                return
            if entry.is_dir(follow_symlinks=False):
                folders.append(entry.name)
            elif self.wanted(entry.name) and (file := self._open(fd, path, entry)) is not None:
                yield file
        for name in folders:
            if self.stop.is_set() or depth >= MAX_DEPTH or self.skip(name):
                continue
            try:
                folder = os.open(name, _OPEN | os.O_DIRECTORY, dir_fd=fd)
            except OSError:
                continue  # gone, unreadable, or swapped for a symlink since the listing
            try:
                yield from self.files(folder, _join(path, name), depth + 1)
            finally:
                os.close(folder)

    def _open(self, fd: int, path: str, entry: os.DirEntry[str]) -> Opened | None:
        """The entry as an open regular file; None for anything else, or anything that leads out."""
        try:
            if entry.is_symlink():
                # Shown by the link's name, as a reader of the listing would call it.
                opened = replace(
                    _resolve(self.root, [*_split(path), entry.name], self.workspace), path=_join(path, entry.name)
                )
            elif entry.is_file(follow_symlinks=False):
                opened = _checked(os.open(entry.name, _OPEN, dir_fd=fd), _join(path, entry.name))
            else:
                return None
        except (_Outside, _Special, OSError):
            return None
        if opened.is_dir:
            os.close(opened.fd)
            return None
        return opened


def _resolve(root: int, parts: list[str], workspace: Path, *, make_dirs: bool = False) -> Opened:
    """Open `parts` below the `root` descriptor, resolving symlinks here so that none leads out.

    With `make_dirs`, a missing component is made a folder (only the folders of a file are resolved so).
    """
    fds, names = [os.dup(root)], list[str]()  # fds[i + 1] is names[i], opened in fds[i]
    pending, links = parts[::-1], 0
    try:
        while pending:
            name = pending.pop()
            if name == "..":
                if not names:
                    raise _Outside
                os.close(fds.pop())
                names.pop()
                continue
            mode = _mode(fds[-1], name, make_dirs)
            if stat.S_ISLNK(mode):
                links = _another_link(links)
                _follow(os.readlink(name, dir_fd=fds[-1]), workspace, fds, names, pending)
                continue
            fd = _open_at(fds[-1], name, mode, pending)
            if fd is None:  # it became a symlink since the stat: look again
                links = _another_link(links)
                pending.append(name)
                continue
            fds.append(fd)
            names.append(name)
        return _checked(fds.pop(), "/".join(names) or ".")
    finally:
        for fd in fds:
            os.close(fd)


def _mode(folder: int, name: str, make_dirs: bool) -> int:
    """The mode of `name` in `folder`, not following a symlink; with `make_dirs`, made a folder if missing."""
    try:
        return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode
    except FileNotFoundError:
        if not make_dirs:
            raise
    with suppress(FileExistsError):  # made by someone else meanwhile: whatever it is, it is looked at as found
        os.mkdir(name, dir_fd=folder)
    return os.stat(name, dir_fd=folder, follow_symlinks=False).st_mode


def _another_link(links: int) -> int:
    if links >= MAX_SYMLINKS:
        raise OSError(errno.ELOOP, os.strerror(errno.ELOOP))
    return links + 1


def _open_at(folder: int, name: str, mode: int, pending: list[str]) -> int | None:
    """`name` in `folder`, opened without following a symlink; None if it is a symlink by now."""
    if pending and not stat.S_ISDIR(mode):
        raise NotADirectoryError(errno.ENOTDIR, os.strerror(errno.ENOTDIR))
    if stat.S_IFMT(mode) in _KINDS:
        raise _Special(_KINDS[stat.S_IFMT(mode)])  # refused unopened: opening a device can have effects
    try:
        return os.open(name, _OPEN | (os.O_DIRECTORY if pending else 0), dir_fd=folder)
    except OSError as error:
        # O_NOFOLLOW met a symlink: ELOOP, or ENOTDIR with O_DIRECTORY.
        if error.errno in (errno.ELOOP, errno.ENOTDIR):
            return None
        raise


def _follow(target: str, workspace: Path, fds: list[int], names: list[str], pending: list[str]) -> None:
    """Go on along a symlink's target: from the root if it is absolute (and inside), else from here."""
    if os.path.isabs(target):
        rest = _below_root(workspace, target)
        if rest is None:
            raise _Outside
        while names:
            os.close(fds.pop())
            names.pop()
        pending.extend(reversed(rest))
    else:
        pending.extend(reversed(PurePosixPath(target).parts))


def _checked(fd: int, path: str) -> Opened:
    """An open descriptor as Opened, if it is a regular file or a folder (a swap may have made it neither)."""
    info = os.fstat(fd)
    if stat.S_ISREG(info.st_mode) or stat.S_ISDIR(info.st_mode):
        return Opened(fd, path, stat.S_ISDIR(info.st_mode), info.st_size)
    os.close(fd)
    raise _Special(_KINDS.get(stat.S_IFMT(info.st_mode), "special file"))


def named_path(workspace: Path, raw: object) -> str:
    """`raw` as a path below the workspace root, as named: no symlink followed."""
    return "/".join(_parts(workspace, raw)) or "."


def _parts(workspace: Path, raw: object) -> list[str]:
    """The components of `raw` below the workspace root, or a WorkspaceError saying why it is refused."""
    if not isinstance(raw, str) or not raw.strip() or "\0" in raw:
        raise WorkspaceError("path must be a non-empty string")
    given = PurePosixPath(raw)
    if ".." in given.parts:
        raise WorkspaceError(f"refused {raw!r}: '..' is not allowed in paths")
    if not given.is_absolute():
        return list(given.parts)
    rest = _below_root(workspace, raw)
    if rest is None:
        raise WorkspaceError(f"refused {raw!r}: it is outside the workspace ({real_root(workspace)})")
    return rest


def _below_root(workspace: Path, absolute: str) -> list[str] | None:
    """The components of an absolute path below the workspace root, by its real or its given name; else None."""
    path = PurePosixPath(absolute)
    for root in (PurePosixPath(real_root(workspace)), PurePosixPath(os.path.abspath(workspace))):
        if path.is_relative_to(root):
            return list(path.relative_to(root).parts)
    return None


@lru_cache(maxsize=16)
def real_root(workspace: Path) -> Path:
    return Path(os.path.realpath(workspace))


def _open_root(workspace: Path) -> int:
    return os.open(real_root(workspace), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _join(folder: str, name: str) -> str:
    return name if folder == "." else f"{folder}/{name}"


def _split(path: str) -> list[str]:
    return [] if path == "." else path.split("/")
