"""`hotloop watch` in a terminal or a pipe: the pass-through, with a command run through it or until Ctrl-C.

With a command (`--run`), the command runs with `ANTHROPIC_BASE_URL` and `OPENAI_BASE_URL`
pointed at the pass-through; when it ends, the table of its requests and a summary are printed
and its exit status is hotloop's. Without one, the address and how to point each agent at it
are printed, then a line per request as it finishes. `--json` writes the events as JSON lines to
stdout instead (a command's own stdout then goes to stderr, so stdout stays JSON).
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from hotloop import InputError
from hotloop.agent.events import AgentEvent, Notice
from hotloop.core.telemetry import Telemetry, start_telemetry
from hotloop.headless.watch_table import HEADING, JsonLines, WatchTable
from hotloop.watch.conversation import ConversationInfo, Sink
from hotloop.watch.proxy import Upstream, Watch

if TYPE_CHECKING:
    from hotloop.config import Config


def recipes(url: str) -> list[str]:
    """How to point each kind of agent at the pass-through at `url`."""
    return [
        f"  Claude Code:    ANTHROPIC_BASE_URL={url} claude",
        f'  Codex:          ~/.codex/config.toml: [model_providers.hotloop] base_url = "{url}/v1", '
        'wire_api = "responses" (and model_provider = "hotloop"; --port keeps the address)',
        f"  OpenAI SDK:     OPENAI_BASE_URL={url}/v1",
        f"  Anthropic SDK:  ANTHROPIC_BASE_URL={url}",
    ]


async def watch(
    upstream: Upstream,
    *,
    folder: Path,
    port: int = 0,
    json_lines: bool = False,
    command: Sequence[str] = (),
    secrets: Sequence[str] = (),
    out: TextIO | None = None,
    err: TextIO | None = None,
    config: Config | None = None,
    otel: bool = False,
) -> int:
    """`config` and `otel` say where spans go, if anywhere (`[telemetry]`, the OTLP variables, `--otel`)."""
    out, err = out or sys.stdout, err or sys.stderr
    lines: list[str] = []

    def line(text: str) -> None:
        if command:
            lines.append(text)  # the command's own output has the terminal until it ends
        else:
            print(text, file=out, flush=True)

    keepalive = config.keepalive if config is not None else None
    watched = Watch(
        upstream,
        lambda conversation, event: None,
        folder=folder,
        workspace=Path.cwd(),
        secrets=secrets,
        keepalive=keepalive,
    )
    table = WatchTable(watched.conversations, line)
    sink: Sink = JsonLines(out) if json_lines else table

    def warned(event: AgentEvent) -> None:  # an export that failed: one line, as a session's notice
        if isinstance(event, Notice):
            print(f"{event.level}: {event.message}", file=err, flush=True)

    telemetry = start_telemetry(config, otel, warned, lambda: None) if config is not None else None
    watched.sink = with_spans(sink, telemetry, watched.conversations) if telemetry is not None else sink
    try:
        url = await watched.start(port=port)
    except OSError as error:
        raise InputError(f"cannot listen on 127.0.0.1:{port}: {error.strerror}") from None
    print(f"hotloop watch: listening on {url} → {upstream}", file=err, flush=True)
    status = 0
    try:
        if command:
            status = await _run(command, url, err if json_lines else None)
        else:
            print("\n".join(["point an agent here:", *recipes(url), "Ctrl-C stops"]), file=err, flush=True)
            if not json_lines:
                print(HEADING, file=out, flush=True)
            await asyncio.Event().wait()
    finally:
        await watched.aclose()
        if telemetry is not None:
            await telemetry.close()
        if not json_lines:
            if command:
                print("\n".join([HEADING, *lines]), file=out)
            print("\n".join(table.summary()), file=out, flush=True)
    return status


def with_spans(sink: Sink, telemetry: Telemetry, conversations: Mapping[str, ConversationInfo]) -> Sink:
    """`sink`, and each watched conversation's events as spans of its own, as a session's are (`--otel`)."""

    def both(conversation: str, event: AgentEvent) -> None:
        sink(conversation, event)
        if (info := conversations.get(conversation)) is not None:
            telemetry.stream(conversation, info.pricer).observe(event)

    return both


_GRACE = 10.0  # seconds a stopped command has to finish before it is killed


async def _run(command: Sequence[str], url: str, stdout: TextIO | None) -> int:
    """Run `command` against the pass-through at `url`; its exit status (128 + N if signal N ended it)."""
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "OPENAI_BASE_URL": f"{url}/v1"}
    try:
        process = await asyncio.create_subprocess_exec(*command, env=env, stdout=stdout)
    except OSError as error:
        raise InputError(f"cannot run {command[0]}: {error.strerror}") from None
    try:
        status = await process.wait()
    except asyncio.CancelledError:  # hotloop stopped (SIGTERM, SIGHUP): the command doesn't outlive its pass-through
        if process.returncode is None:
            process.terminate()
            # Its last words come before the table, which follows on the same terminal.
            try:
                await asyncio.wait_for(process.wait(), _GRACE)
            except TimeoutError:
                process.kill()
                await process.wait()
        raise
    return 128 - status if status < 0 else status
