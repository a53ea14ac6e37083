"""The protocol's stdio, as the SDK's message transport: lines from stdin checked one by one, replies to stdout.

Stdout is the protocol's alone: anything else that writes to it (a library's print, a child process that
inherits it) would break the JSON-RPC stream, so the protocol writes to a copy of the descriptor, and
descriptor 1 and `sys.stdout` go to stderr, where an editor keeps an agent's log.

Each line is checked (`messages.py`) before the SDK's receive loop sees it: one that is no message ACP can
take gets its JSON-RPC error here, and the next line is read. Stdin and stdout are read and written by a
thread each, blocking, so that any kind of file works (a pipe, a socket, a regular file, /dev/null, a
terminal: asyncio's pipe transports take only some) and a client that stops reading never blocks the loop.
When stdin ends, the turns in flight are cancelled and the requests already read are answered (for END_GRACE
seconds at most) before the SDK closes the connection: piped lines and a closed stdin lose no answer.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import json
import logging
import os
import select
import sys
import threading
from collections import Counter
from collections.abc import Callable

from hotloop.acp_server.messages import INTERNAL_ERROR, INVALID_REQUEST, Id, Message, Refused, checked
from hotloop.agent.text import inert

BUFFER_LIMIT = 50 * 1024 * 1024  # bytes of one incoming message (a prompt with embedded files): the SDK's default
CHUNK = 64 * 1024  # bytes read from stdin at a time
BIG_LINE = 1024 * 1024  # bytes of a line decoded in a thread rather than on the event loop
READ_AHEAD = 16  # chunks read ahead of the agent: a client that floods waits on its pipe, not on our memory
END_GRACE = 5.0  # seconds the requests in flight get to be answered once stdin has ended
LOG_LINE = 500  # characters of one line of the agent's log
TOO_LONG = Refused(INVALID_REQUEST, f"a message longer than {BUFFER_LIMIT // 2**20} MB: skipped to its end")


class Stdio:
    """The SDK's `Transport` on stdin and `out`, the protocol's stdout; `ended` is called once stdin has ended."""

    def __init__(self, out: int, ended: Callable[[], None]) -> None:
        self.loop = asyncio.get_running_loop()
        self.out = out  # `protocol_out()`'s
        self.ended = ended
        self.chunks: asyncio.Queue[bytes] = asyncio.Queue(READ_AHEAD)
        self.writes: asyncio.Queue[tuple[bytes, asyncio.Future[None]] | None] = asyncio.Queue()
        self.buffer = bytearray()
        self.searched = 0  # bytes of the buffer known to hold no newline
        self.skipping = False  # in a line longer than BUFFER_LIMIT, dropped as it comes
        self.at_end = False
        self.open: Counter[Id] = Counter()  # ids of requests read and not yet answered
        self.answered = asyncio.Event()
        threading.Thread(target=self._read, name="acp-stdin", daemon=True).start()
        threading.Thread(target=self._write, name="acp-stdout", daemon=True).start()

    # -- the Transport -------------------------------------------------------------------

    async def receive(self) -> Message | None:
        """The next message the SDK can take; None once stdin has ended and what was asked is answered."""
        while True:
            line = await self._line()
            if line is None:
                await self._drain()
                return None
            if isinstance(line, Refused):
                found: Message | Refused = line
            elif len(line) > BIG_LINE:  # a prompt with files: decoded off the loop, which goes on sending updates
                found = await asyncio.to_thread(checked, line)
            else:
                found = checked(line)
            if isinstance(found, Refused):
                print(found.line(), file=sys.stderr, flush=True)
                if (reply := found.reply()) is not None:
                    with contextlib.suppress(OSError):  # the client stopped reading: the next line may still come
                        await self._put(_encoded(reply))
                continue
            if "method" in found and "id" in found:
                self.open[found["id"]] += 1
            return found

    async def send(self, message: Message) -> None:
        try:
            await self._put(_encoded(message))
        finally:
            if "method" not in message and self.open[message.get("id")] > 0:
                self.open[message.get("id")] -= 1
                self.answered.set()

    async def close(self) -> None:
        self.writes.put_nowait(None)  # the writer ends after what is queued; a client not reading can't hold us

    # -- reading -------------------------------------------------------------------------

    async def _line(self) -> bytes | Refused | None:
        """The next non-blank line (TOO_LONG for one past BUFFER_LIMIT); None at the end of stdin."""
        while True:
            end = self.buffer.find(b"\n", self.searched)
            if end < 0 and self.at_end and (self.buffer or self.skipping):
                end = len(self.buffer)  # a last line without its newline
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 1]
                self.searched, skipped, self.skipping = 0, self.skipping, False
                if skipped:
                    return TOO_LONG
                if line.strip():
                    return line
                continue
            if self.at_end:
                return None
            self.searched = len(self.buffer)
            if len(self.buffer) > BUFFER_LIMIT:
                self.buffer.clear()
                self.searched, self.skipping = 0, True
            chunk = await self.chunks.get()
            self.at_end = not chunk
            self.buffer += chunk

    def _read(self) -> None:
        """The stdin thread: chunks into the queue, then b"" at the end (or when stdin can't be read)."""
        chunk = b"."
        while chunk:
            try:
                chunk = os.read(0, CHUNK)
            except BlockingIOError:  # a client's non-blocking pipe
                select.select([0], [], [])
                continue
            except OSError:  # closed, or no file at all
                chunk = b""
            try:
                asyncio.run_coroutine_threadsafe(self.chunks.put(chunk), self.loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):  # the loop is closing: so is the agent
                return

    async def _drain(self) -> None:
        """Stdin ended: turns in flight cancelled, then the requests already read answered, for END_GRACE at most."""
        self.ended()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(END_GRACE):
                while any(count > 0 for count in self.open.values()):
                    self.answered.clear()
                    await self.answered.wait()

    # -- writing -------------------------------------------------------------------------

    async def _put(self, data: bytes) -> None:
        written: asyncio.Future[None] = self.loop.create_future()
        self.writes.put_nowait((data, written))
        await written

    def _write(self) -> None:
        """The stdout thread: each message written whole, in order; its future says when, or why not."""
        while True:
            try:
                item = asyncio.run_coroutine_threadsafe(self.writes.get(), self.loop).result()
            except (RuntimeError, concurrent.futures.CancelledError):
                return
            if item is None:
                return
            data, written = item
            error: OSError | None = None
            try:
                _write_all(self.out, data)
            except OSError as failed:  # the client closed its end
                error = failed
            with contextlib.suppress(RuntimeError):
                self.loop.call_soon_threadsafe(_settle, written, error)


def _settle(written: asyncio.Future[None], error: OSError | None) -> None:
    if written.done():
        return
    if error is not None:
        written.set_exception(error)
    else:
        written.set_result(None)


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            select.select([], [fd], [])


def _encoded(message: Message) -> bytes:
    """One line of JSON; an answer that can't be written as JSON (too deep, NaN) becomes an internal error."""
    try:
        text = json.dumps(message, separators=(",", ":"), allow_nan=False)
    except (ValueError, TypeError, RecursionError) as error:
        if "method" in message or "id" not in message:
            raise
        data = {"message": f"the answer couldn't be written as JSON: {type(error).__name__}"}
        failed = {"code": INTERNAL_ERROR, "message": "Internal error", "data": data}
        text = json.dumps({"jsonrpc": "2.0", "id": message["id"], "error": failed})
    return (text + "\n").encode()


def protocol_out() -> int:
    """A copy of stdout for the protocol; descriptor 1 and `sys.stdout` then point at stderr. An OSError if stdout
    is closed. Called before the event loop exists, which would otherwise take a closed descriptor 0 or 1."""
    try:
        os.fstat(0)
    except OSError:  # a closed stdin reads as an empty one, and no other file gets its number
        os.open(os.devnull, os.O_RDONLY)
    os.fstat(1)
    if sys.stdout is not None:
        sys.stdout.flush()
    out = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return out


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        said = record.getMessage()
        if record.exc_info and record.exc_info[1] is not None:
            error = record.exc_info[1]
            said = f"{said}: {type(error).__name__}: {error}"
        return "hotloop: " + inert(" ".join(said.split()))[:LOG_LINE]


def one_line_logs() -> None:
    """What the SDK and asyncio log (a handler that failed, a warning) as one line each, never a traceback."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    logging.basicConfig(handlers=[handler], level=logging.WARNING, force=True)
    logging.captureWarnings(True)
