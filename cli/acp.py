"""`hotloop acp`: hotloop as an Agent Client Protocol agent on stdin and stdout, for editors and Toad.

The session options are the app's and `hotloop run`'s (provider, model, tier, `--allow`, `--read-only`, …),
applied to every session the client opens; the workspace is the client's `cwd`.
"""

from __future__ import annotations

import argparse

from hotloop.cli.arguments import UsageError
from hotloop.cli.session_options import add_session_options, session_options


def add_acp(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    acp = commands.add_parser(
        "acp", help="serve the Agent Client Protocol on stdio: hotloop as the agent of Zed, Toad and other clients"
    )
    add_session_options(acp, prefix="")
    acp.set_defaults(handler=_acp)


def _acp(args: argparse.Namespace) -> int:
    import asyncio
    import sys

    from hotloop.acp_server.agent import serve
    from hotloop.acp_server.stdio import protocol_out

    if args.resume is not None:
        raise UsageError("hotloop acp starts the sessions its client asks for: --resume and -c don't apply")
    options = session_options(args, "")
    try:
        out = protocol_out()
    except OSError as error:
        print(f"hotloop acp: stdout can't carry the protocol: {error.strerror}", file=sys.stderr)
        return 1
    return asyncio.run(serve(options, out))
