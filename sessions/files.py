"""Files read back from disk that anyone could have put there: an import's source, a log in the sessions folder.

What isn't a regular file (a FIFO, a device, a socket, or a link to one: `/dev/zero`) is refused before it is
opened, told by `stat`, which follows a link and opens nothing: a FIFO would hold the reader forever, a device
could feed it without end. The file is looked at again once open, non-blocking, in case the path changed meanwhile.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a folder",
}


class NotAFile(Exception):
    """A path refused without being read; `str(error)` says why, in a few words."""


def refusal(status: os.stat_result, limit: int | None = None) -> str | None:
    """Why a file with this `stat` isn't read, if it isn't: its type, or a size past `limit` bytes."""
    if not stat.S_ISREG(status.st_mode):
        return f"{_KINDS.get(stat.S_IFMT(status.st_mode), 'not a regular file')}, not a file"
    if limit is not None and status.st_size > limit:
        return f"{status.st_size / 2**30:,.1f} GB, past the {limit / 2**30:g} GB limit"
    return None


def check_file(path: Path, limit: int | None = None) -> None:
    """NotAFile if `path` (what a link leads to) isn't a regular file within `limit`; OSError if it can't be seen."""
    reason = refusal(path.stat(), limit)
    if reason is not None:
        raise NotAFile(reason)


@contextmanager
def open_file(path: Path, limit: int | None = None) -> Iterator[BinaryIO]:
    """`path` open for reading, once `check_file` passed on the path and again on what was opened."""
    check_file(path, limit)
    # Non-blocking: a FIFO put at the path since the look can't hold the open, and the second look refuses it.
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    try:
        reason = refusal(os.fstat(fd), limit)
        if reason is not None:
            raise NotAFile(reason)
        os.set_blocking(fd, True)
        file = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    with file:
        yield file
