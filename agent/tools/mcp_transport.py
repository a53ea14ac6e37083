"""How the bridge reaches an MCP server: a child process over stdio, or a URL over streamable HTTP.

Both go through the official SDK's transports. A `Trace` keeps what went wrong beneath the SDK's
own error (the child's last stderr line, the last HTTP error status), so that `describe` can say
in one line why a server won't start or stopped. Header values come from the environment and are
secrets: no line says them, even one an HTTP library wrote.

An answer the SDK can't read on stdio (JSON nested deeper than its parser goes, or no JSON-RPC at all)
reaches it as an exception, which it drops: the request would wait for its timeout (two minutes for a
tool). `answering` reads the id from such a line without parsing it, and answers that request with the
error in one line, so the call fails at once and the server stays. Over HTTP the SDK answers it
itself, quoting pydantic's lines: those become the same one line.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from dataclasses import dataclass
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any, Self

from hotloop.agent.tools.mcp_config import McpServer
from hotloop.nesting import LIMIT, where_too_deep

if TYPE_CHECKING:
    import httpx2
    from mcp.client import Transport
    from mcp.client._transport import TransportStreams
    from mcp.shared._stream_protocols import ReadStream
    from mcp.shared.message import SessionMessage

# The SDK's own defaults: a server may hold a response stream open for minutes.
CONNECT_TIMEOUT = 30.0
READ_TIMEOUT = 300.0


class StartError(Exception):
    """A server that can't be started as configured; the message is the whole line."""


@dataclass
class Trace:
    """What a transport saw go wrong, beneath the SDK's error."""

    errlog: IO[str] | None = None  # a stdio server's stderr
    status: str = ""  # the error the last message posted got, such as "401 Unauthorized"
    secrets: tuple[str, ...] = ()  # the header values sent


async def opened(server: McpServer, environment: dict[str, str], stack: AsyncExitStack, trace: Trace) -> Transport:
    """The SDK transport for `server`; what it needs open (a stderr file, an HTTP client) closes with `stack`."""
    if server.url is None:
        from mcp import StdioServerParameters
        from mcp.client.stdio import stdio_client

        assert server.command is not None  # McpServer holds a command or a url
        stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115 (the stack closes it)
        trace.errlog = stack.enter_context(stderr)
        params = StdioServerParameters(command=server.command, args=list(server.args), env=environment)
        return answering(stdio_client(params, errlog=trace.errlog))

    import httpx2
    from mcp.client.streamable_http import streamable_http_client

    headers = _header_values(server)
    trace.secrets = tuple(headers.values())

    async def note(response: httpx2.Response) -> None:
        # Messages go by POST; a GET or DELETE a server doesn't offer (405) is no failure.
        if response.request.method == "POST":
            failed = response.status_code >= 400
            trace.status = f"{response.status_code} {response.reason_phrase}".strip() if failed else ""

    http = httpx2.AsyncClient(
        headers=headers,
        timeout=httpx2.Timeout(CONNECT_TIMEOUT, read=READ_TIMEOUT),
        event_hooks={"response": [note]},
    )
    await stack.enter_async_context(http)
    return answering(streamable_http_client(server.url, http_client=http))


@asynccontextmanager
async def answering(transport: Transport) -> AsyncIterator[TransportStreams]:
    """`transport`, with each answer it can't read turned into the error answer to its request."""
    async with transport as (read, write):
        yield _Answering(read), write


class _Answering:
    """A transport's read stream, on which an unreadable answer becomes a JSON-RPC error to its request."""

    def __init__(self, stream: ReadStream[SessionMessage | Exception]) -> None:
        self._stream = stream

    @property
    def last_context(self) -> object:  # the SDK's dispatcher reads the sender's context here
        return getattr(self._stream, "last_context", None)

    async def receive(self) -> SessionMessage | Exception:
        return _answered(await self._stream.receive())

    async def aclose(self) -> None:
        await self._stream.aclose()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> SessionMessage | Exception:
        return _answered(await self._stream.__anext__())

    async def __aenter__(self) -> Self:
        await self._stream.__aenter__()
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool | None:
        return await self._stream.__aexit__(kind, error, traceback)


def _answered(item: SessionMessage | Exception) -> SessionMessage | Exception:
    """`item`, or for a line the SDK couldn't read that answers a request of ours, an error answer to it."""
    from mcp.shared.message import SessionMessage
    from mcp_types import PARSE_ERROR, JSONRPCError
    from pydantic import ValidationError

    if isinstance(item, SessionMessage):
        error = item.message
        # Over HTTP the SDK answers such a request itself, with pydantic's lines and the input quoted: one line instead.
        if isinstance(error, JSONRPCError) and error.error.code == PARSE_ERROR and _RECURSION in error.error.message:
            return _refusal(error.id, f"JSON nested deeper than {LIMIT} levels")
        return item
    if not isinstance(item, ValidationError):
        return item
    given: Any = next((e.get("input") for e in item.errors() if isinstance(e.get("input"), str | bytes)), None)
    if given is None:
        return item
    line = given if isinstance(given, str) else given.decode("utf-8", "replace")
    request = _answer_id(line)
    if request is None:
        return item
    deep = where_too_deep(line) is not None
    return _refusal(request, f"JSON nested deeper than {LIMIT} levels" if deep else "not JSON-RPC hotloop can read")


_RECURSION = "recursion limit exceeded"  # pydantic's words for JSON nested past its parser's limit (200)


def _refusal(request: int | str | None, problem: str) -> SessionMessage:
    from mcp.shared.message import SessionMessage
    from mcp_types import PARSE_ERROR, ErrorData, JSONRPCError

    message = f"the server's answer is {problem}"
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=request, error=ErrorData(code=PARSE_ERROR, message=message)))


# A JSON string, a bracket or punctuation, or a bare scalar (a number, true, false, null).
_TOKEN = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}:,]|[^\s\[\]{}:,"]+', re.DOTALL)


def _answer_id(line: str) -> int | str | None:
    """The top-level `id` of a response (a message with no `method`), read token by token: it can't be parsed."""
    depth, last, key = 0, "", None
    values: dict[str, str] = {}
    for token in _TOKEN.finditer(line):
        text = token.group()
        if text in ("{", "["):
            depth += 1
        elif text in ("}", "]"):
            depth -= 1
        elif depth == 1:
            if text == ":":
                key = last
                values[key] = ""
            elif text == ",":
                key = None
            elif key is not None:
                values[key], key = text, None
            last = text
    if '"method"' in values or not values.get('"id"'):
        return None  # a request or notification from the server answers nothing of ours
    try:
        value = json.loads(values['"id"'])
    except ValueError:
        return None
    return value if isinstance(value, int | str) and not isinstance(value, bool) else None


def _header_values(server: McpServer) -> dict[str, str]:
    """Each header of `headers_env` with the value of the variable it names; an unset one can't start."""
    values = {}
    for header, variable in server.headers_env.items():
        value = os.environ.get(variable)
        if not value:
            raise StartError(f"environment variable {variable} is not set (headers_env gives {header} its value)")
        values[header] = value
    return values


def describe(error: BaseException, server: McpServer, trace: Trace, started: bool = True) -> str:
    """Why a server failed, in one line; one that exited before it `started` may lack a variable it needs."""
    leaf = _leaf(error)
    if isinstance(leaf, StartError):
        return str(leaf)
    if server.url is not None:
        return _redacted(_http_reason(leaf, server, trace), trace.secrets)
    if isinstance(leaf, FileNotFoundError):
        return f"command not found: {server.command}"
    if isinstance(leaf, PermissionError):
        return f"command not executable: {server.command}"
    reason = str(leaf) or type(leaf).__name__
    hint = ""
    if "Connection closed" in reason:
        reason = "the server exited"
        if not started and not server.pass_env:
            # It sees only an allowlist of the environment: a token it read from there is missing now.
            hint = "; it sees only PATH, HOME and the like of your environment: name what it needs in pass_env"
    stderr = _last_line(trace.errlog)
    return (f"{reason} (stderr: {stderr[:200]})" if stderr else reason) + hint


def _http_reason(leaf: BaseException, server: McpServer, trace: Trace) -> str:
    import httpx2

    if trace.status:
        if trace.status.startswith(("401", "403")):
            named = ", ".join(server.headers_env.values())
            advice = f"check {named}" if named else "it may want a token: give it one with headers_env"
            return f"the server answered HTTP {trace.status} ({advice})"
        return f"the server answered HTTP {trace.status}"
    if isinstance(leaf, httpx2.TimeoutException):
        return f"no answer from {server.url} (timed out)"
    if isinstance(leaf, httpx2.TransportError):
        return f"cannot reach {server.url} ({str(leaf) or type(leaf).__name__})"
    reason = str(leaf) or type(leaf).__name__
    return "the server closed the connection" if "Connection closed" in reason else reason


def _redacted(line: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        line = line.replace(secret, "••••")
    return " ".join(line.split())  # one line, whatever a library's message held


def _last_line(errlog: IO[str] | None) -> str:
    if errlog is None:
        return ""
    errlog.flush()
    errlog.seek(0)
    lines = [line.strip() for line in errlog.read().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error
