"""The `hotloop` command line: a module per command group, each adding its parser and the function that runs it.

Imports are deferred into the commands, so `hotloop --version` stays fast: a command's module loads
nothing heavy until it runs. Every user error ends as one line on stderr and a non-zero exit: 2 for
bad input or configuration, 1 for a run that failed, 130 for an interrupt.

It is the top layer: it may import every other, and it alone serves the simulator (`hotloop sim serve`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence

from hotloop import InputError, __version__
from hotloop.cli.acp import add_acp
from hotloop.cli.app import open_app
from hotloop.cli.arguments import OptionalCommand
from hotloop.cli.bench import add_bench
from hotloop.cli.config import add_config
from hotloop.cli.import_command import add_import
from hotloop.cli.mcp import add_mcp
from hotloop.cli.recipes import add_recipes
from hotloop.cli.run import add_run
from hotloop.cli.session_options import add_session_options
from hotloop.cli.sessions import add_replay, add_sessions
from hotloop.cli.sim import add_sim
from hotloop.cli.watch import add_watch
from hotloop.cli.whatif import add_whatif


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="hotloop",
        description="A terminal agent console that shows where every turn's time and tokens go. "
        "With no command, it opens the app.",
        formatter_class=OptionalCommand,
    )
    parser.add_argument("--version", action="version", version=f"hotloop {__version__}")
    # The app's options. Separate dests: a subcommand's own defaults would overwrite these.
    add_session_options(parser, prefix="app_")
    parser.set_defaults(handler=open_app)  # each command sets its own
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in (add_run, add_bench, add_replay, add_sim, add_recipes, add_config, add_mcp, add_sessions, add_watch):
        add(commands)
    add_import(commands)
    add_acp(commands)
    add_whatif(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    from hotloop.providers.errors import ProviderError

    try:
        return handler(args)
    except InputError as error:
        _fail(str(error))
        return 2
    except ProviderError as error:
        _fail(str(error))
        return 1
    except KeyboardInterrupt:
        _fail("interrupted")
        return 130
    except BrokenPipeError:
        # The reader stopped reading (`hotloop run … | head`): end quietly, as SIGPIPE would, with no
        # traceback; stdout goes to /dev/null so the interpreter's last flush finds nowhere to fail.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141


def _fail(message: str) -> None:
    from hotloop.agent.text import inert

    print(f"hotloop: {inert(message)}", file=sys.stderr)
