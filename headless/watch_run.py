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
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from hotloop import InputError
from hotloop.headless.watch_table import HEADING, JsonLines, WatchTable
from hotloop.watch.proxy import Upstream, Watch


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
) -> int:
    out, err = out or sys.stdout, err or sys.stderr
    lines: list[str] = []

    def line(text: str) -> None:
        if command:
            lines.append(text)  # the command's own output has the terminal until it ends
        else:
            print(text, file=out, flush=True)

    watched = Watch(upstream, lambda conversation, event: None, folder=folder, workspace=Path.cwd(), secrets=secrets)
    table = WatchTable(watched.conversations, line)
    watched.sink = JsonLines(out, list(secrets)) if json_lines else table
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
        if not json_lines:
            if command:
                print("\n".join([HEADING, *lines]), file=out)
            print("\n".join(table.summary()), file=out, flush=True)
    return status


async def _run(command: Sequence[str], url: str, stdout: TextIO | None) -> int:
    """Run `command` against the pass-through at `url`; its exit status (128 + N if signal N ended it)."""
    env = {**os.environ, "ANTHROPIC_BASE_URL": url, "OPENAI_BASE_URL": f"{url}/v1"}
    try:
        process = await asyncio.create_subprocess_exec(*command, env=env, stdout=stdout)
    except OSError as error:
        raise InputError(f"cannot run {command[0]}: {error.strerror}") from None
    status = await process.wait()
    return 128 - status if status < 0 else status
