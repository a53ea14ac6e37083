"""Stdout for the protocol alone: anything else that writes to it (a library's print, a child process that
inherits it) would break the JSON-RPC stream, so the protocol writes to a copy of the descriptor, and
descriptor 1 and `sys.stdout` go to stderr, where an editor keeps an agent's log.
"""

from __future__ import annotations

import asyncio
import os
import sys

BUFFER_LIMIT = 50 * 1024 * 1024  # bytes of one incoming message (a prompt with embedded files): the SDK's default


async def protocol_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """The client's messages from stdin, and a writer to the real stdout; everything else on stdout goes to stderr."""
    loop = asyncio.get_running_loop()
    sys.stdout.flush()
    protocol_out = os.fdopen(os.dup(sys.stdout.fileno()), "wb", buffering=0)
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    sys.stdout = sys.stderr
    reader = asyncio.StreamReader(limit=BUFFER_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, protocol_out)
    writer = asyncio.StreamWriter(transport, protocol, None, loop)
    return reader, writer
