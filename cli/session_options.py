"""The options of a session, the same for the app and `hotloop run`, checked before anything starts."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hotloop.cli.arguments import LATEST, UsageError, positive_int

if TYPE_CHECKING:
    from hotloop.core.session import SessionOptions
    from hotloop.providers.transport import RequestTimeout


def add_session_options(parser: argparse.ArgumentParser, prefix: str) -> None:
    """The options of a session, the same for the app and `hotloop run`; dests start with `prefix`."""
    parser.add_argument(
        "--provider", dest=f"{prefix}provider", metavar="NAME", help="a configured provider: sim (default), openai, …"
    )
    parser.add_argument("--model", dest=f"{prefix}model", metavar="MODEL")
    parser.add_argument(
        "--tier",
        dest=f"{prefix}tier",
        metavar="TIER",
        help="fast, balanced or strong (a provider and model from the config), or auto (the fast tier picks per turn)",
    )
    parser.add_argument(
        "--base-url",
        dest=f"{prefix}base_url",
        metavar="URL",
        help="another server for the provider's protocol, e.g. http://localhost:8000/v1 (openai) or a gateway",
    )
    parser.add_argument(
        "--system", dest=f"{prefix}system", type=Path, metavar="FILE", help="add this file's text to the system prompt"
    )
    parser.add_argument(
        "--mcp",
        dest=f"{prefix}mcp",
        action="append",
        default=[],
        metavar="CMD",
        help='an MCP stdio server, e.g. "npx -y pkg" (repeatable)',
    )
    parser.add_argument(
        "--max-steps",
        dest=f"{prefix}max_steps",
        type=positive_int,
        metavar="N",
        help="stop a turn after N model requests",
    )
    parser.add_argument(
        "--timeout",
        dest=f"{prefix}timeout",
        type=_timeout,
        metavar="S[,IDLE]",
        help="seconds a request may wait for its first byte, then between chunks (one figure: both)",
    )
    acting = parser.add_mutually_exclusive_group()
    acting.add_argument(
        "--yes", "-y", dest=f"{prefix}yes", action="store_true", help="allow every call that edits, writes or runs"
    )
    acting.add_argument(
        "--read-only",
        dest=f"{prefix}read_only",
        action="store_true",
        help="offer the model no tool that edits, writes or runs",
    )
    parser.add_argument(
        "--allow",
        dest=f"{prefix}allow",
        action="append",
        default=[],
        type=_rule,
        metavar="RULE",
        help="allow calls like this without asking: TOOL or TOOL:PATTERN, e.g. 'run_shell:pytest *' (repeatable)",
    )
    parser.add_argument(
        "--otel",
        dest=f"{prefix}otel",
        action="store_true",
        help="export OpenTelemetry spans over OTLP/HTTP: to [telemetry] otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT, "
        "else http://localhost:4318",
    )
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--resume", dest=f"{prefix}resume", metavar="ID", help="continue a saved session (an id or a unique prefix)"
    )
    group.add_argument(
        "-c",
        "--continue",
        dest=f"{prefix}resume",
        action="store_const",
        const="",
        help=f"continue {LATEST}",
    )


def session_options(args: argparse.Namespace, prefix: str) -> SessionOptions:
    """The session the command line asks for; a bad --mcp, --system or session fails here, before anything starts."""
    from hotloop.core.session import SessionOptions

    def given(name: str) -> Any:
        return getattr(args, prefix + name)

    for line in given("mcp"):
        try:
            if not shlex.split(line):
                raise ValueError("no command")
        except ValueError as error:
            raise UsageError(f"--mcp {line!r} is not a command line: {error}") from None
    return SessionOptions(
        provider=given("provider"),
        model=given("model"),
        base_url=given("base_url"),
        tier=given("tier"),
        system=_read_system_file(given("system")),
        mcp=tuple(given("mcp")),
        max_steps=given("max_steps"),
        timeout=given("timeout"),
        resume=_session_to_resume(given("resume")),
        yes=given("yes"),
        allow=tuple(given("allow")),
        read_only=given("read_only"),
        otel=given("otel"),
    )


def _rule(text: str) -> str:
    """`run_shell:pytest *`: a tool's name, then what its commands, path or arguments must match."""
    from hotloop.agent.rules import check_rule

    try:
        return check_rule(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _timeout(text: str) -> RequestTimeout:
    """`--timeout 30` (first byte and idle alike) or `--timeout 120,30`."""
    from hotloop.providers.transport import RequestTimeout

    first, _, idle = text.partition(",")
    try:
        figures = float(first), float(idle or first)
    except ValueError:
        raise argparse.ArgumentTypeError("must be seconds, or two of them: FIRST_BYTE,IDLE") from None
    if min(figures) <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return RequestTimeout(*figures)


def _read_system_file(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read --system file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--system file {path} is not UTF-8 text") from None


def _session_to_resume(reference: str | None) -> Path | None:
    """The log of the session to continue (`""`: the one written to last here), checked before the screen takes over."""
    if reference is None:
        return None
    from hotloop.cli.session_commands import pick_session, say_note
    from hotloop.sessions.log import SessionInUse, is_in_use
    from hotloop.sessions.store import read_header, session_id_of

    pick = pick_session(reference or None, "continuing")
    read_header(pick.path)
    if is_in_use(pick.path):
        raise SessionInUse(f"session {session_id_of(pick.path)} is open in another hotloop process")
    say_note(pick)
    return pick.path
