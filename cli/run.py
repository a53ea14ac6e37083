"""`hotloop run`: prompts run headless, the answer streamed to stdout."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from hotloop.cli.arguments import UsageError
from hotloop.cli.session_options import add_session_options, session_options

if TYPE_CHECKING:
    from hotloop.core.slash import Slash


def add_run(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    run = commands.add_parser("run", help="run prompts headless, streaming the answer to stdout")
    run.add_argument(
        "prompts",
        nargs="*",
        metavar="PROMPT",
        help="consecutive user turns (default: read stdin); /provider, /model or /tier between them switches, "
        "/compact compacts",
    )
    run.add_argument("--json", action="store_true", help="print every event as a JSON line instead of text")
    add_session_options(run, prefix="")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from hotloop.cli.stops import Stopped, run_stoppable
    from hotloop.headless.run import run

    prompts = _prompts(args.prompts)
    try:
        return run_stoppable(run(session_options(args, ""), prompts, json_lines=args.json))
    except Stopped as stop:  # as Ctrl-C: the turn cancelled, its partial answer kept and the log closed
        print(f"hotloop: stopped by {stop.name}", file=sys.stderr)
        return 128 + stop.signum


def _prompts(given: list[str]) -> list[str | Slash]:
    """The turns to run: the arguments (where /model, /tier and /provider switch between turns), or stdin."""
    from hotloop.core.slash import BETWEEN_PROMPTS, Slash, SlashError, parse

    if not given:
        if sys.stdin.isatty():
            raise UsageError('give a prompt, e.g. hotloop run "list the files here", or pipe one on stdin')
        given = [sys.stdin.read()]
        if not given[0].strip():
            raise UsageError("the prompt on stdin is empty")
        return list(given)
    prompts: list[str | Slash] = []
    for text in given:
        if not text.strip():
            raise UsageError("a prompt is empty")
        try:
            slash = parse(text)
        except SlashError as error:
            raise UsageError(str(error)) from None
        if slash is not None and slash.name not in BETWEEN_PROMPTS:
            raise UsageError(
                f"{slash.name} works in the app; between prompts, hotloop run takes {', '.join(BETWEEN_PROMPTS)}"
            )
        prompts.append(slash or text)
    if all(isinstance(prompt, Slash) for prompt in prompts):
        raise UsageError("give a prompt to run, not only commands")
    return prompts
