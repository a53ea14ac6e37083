"""`hotloop watch`: the measuring pass-through for any agent (`watch/`), headless (`headless/watch_run.py`).

The upstream is the provider's own API by default (api.anthropic.com for Messages, api.openai.com
for the OpenAI protocols), any server (`--upstream URL`), a configured provider (`--provider`,
at its base URL and price), or the embedded simulator (`--upstream sim`), which the CLI starts:
the watch layer never imports it.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from hotloop.cli.arguments import UsageError

if TYPE_CHECKING:
    from hotloop.config import Config
    from hotloop.watch.proxy import Upstream


def add_watch(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    watch = commands.add_parser(
        "watch",
        help="measure any agent's requests: a pass-through with the ledger, the explainer and the logs",
        description="Point an agent at the address this prints (ANTHROPIC_BASE_URL=URL, OPENAI_BASE_URL=URL/v1). "
        "In a terminal, without --run or --json, the app opens on the traffic (F1 there: recipes for Claude Code "
        "and Codex); piped, a line per request until Ctrl-C. Each conversation is saved as a session.",
    )
    where = watch.add_mutually_exclusive_group()
    where.add_argument(
        "--upstream",
        metavar="URL|sim",
        help="forward to this server, or to the embedded simulator (default: the provider's own API by path)",
    )
    where.add_argument("--provider", metavar="NAME", help="forward to a configured provider's server")
    watch.add_argument("--port", type=int, default=0, metavar="N", help="listen on this port (default: a free one)")
    watch.add_argument("--json", action="store_true", help="stream every event as a JSON line, with its conversation")
    watch.add_argument(
        "--otel",
        action="store_true",
        help="export each conversation's spans over OTLP ([telemetry] otlp_endpoint, OTEL_EXPORTER_OTLP_ENDPOINT, "
        "else http://localhost:4318)",
    )
    watch.add_argument(
        "--keepalive",
        nargs="?",
        const="adaptive",
        metavar="MODE",
        help="ping each conversation's prompt cache in its pauses so the next request reads it: adaptive (the "
        "default, learned from the pauses) or every-Nm ([keepalive] in the config; `hotloop whatif` prices it first)",
    )
    watch.add_argument(
        "--run",
        nargs=argparse.REMAINDER,
        metavar="CMD",
        help="run CMD with ANTHROPIC_BASE_URL and OPENAI_BASE_URL pointed here, then print its requests; exits "
        "with its status",
    )
    watch.set_defaults(handler=_watch)


def _watch(args: argparse.Namespace) -> int:
    from hotloop import paths
    from hotloop.cli.stops import Stopped, run_stoppable
    from hotloop.config import load_config
    from hotloop.headless.watch_run import watch

    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port: give 0 to 65535 (0 picks a free one)")
    if args.run is not None and not args.run:
        raise UsageError("--run needs a command, e.g. hotloop watch --run claude -p 'list the files'")
    config = _with_keepalive(load_config(), args.keepalive)
    simulator = None
    if args.upstream == "sim":
        from hotloop.core.runtime import simulator_config
        from hotloop.sim.embedded import EmbeddedSimulator

        simulator = EmbeddedSimulator(simulator_config(config.sim)).start()
    try:
        upstream = _upstream(args, config, simulator.url if simulator is not None else None)
        if args.run is None and not args.json and sys.stdout.isatty():
            return _in_the_app(upstream, config, args.port, args.otel)
        running = watch(
            upstream,
            folder=paths.sessions_dir(),
            port=args.port,
            json_lines=args.json,
            command=args.run or (),
            secrets=config.secrets(),
            config=config,
            otel=args.otel,
        )
        try:
            return run_stoppable(running)
        except Stopped as stop:
            # Ctrl-C, or a service manager's SIGTERM or SIGHUP, is how a watch without a command ends.
            print(f"hotloop watch: stopped by {stop.name}; every finished request is saved", file=sys.stderr)
            return 128 + stop.signum if args.run else 0
    finally:
        if simulator is not None:
            simulator.stop()


def _in_the_app(upstream: Upstream, config: Config, port: int, otel: bool) -> int:
    """The watched traffic in the terminal app, until it is quit."""
    from hotloop import paths
    from hotloop.tui.watch_app import WatchApp
    from hotloop.watch import Watch

    watched = Watch(
        upstream,
        lambda _conversation, _event: None,
        folder=paths.sessions_dir(),
        workspace=Path.cwd(),
        secrets=config.secrets(),
        keepalive=config.keepalive,
    )
    WatchApp(watched, "127.0.0.1", port, config, otel).run()
    return 0


def _with_keepalive(config: Config, mode: str | None) -> Config:
    """The config with `--keepalive MODE` in place of `[keepalive] mode`, checked as the file's would be."""
    if mode is None:
        return config
    import msgspec

    from hotloop.config import KeepaliveSettings

    try:
        settings = msgspec.convert({**msgspec.to_builtins(config.keepalive), "mode": mode}, KeepaliveSettings)
    except msgspec.ValidationError:
        raise UsageError(f"--keepalive {mode} is not a mode: give adaptive, every-Nm (every-4.5m) or off") from None
    return msgspec.structs.replace(config, keepalive=settings)


def _upstream(args: argparse.Namespace, config: Config, simulator: str | None) -> Upstream:
    from hotloop.watch.proxy import HOSTED, upstream_at

    if simulator is not None:
        return upstream_at(simulator, "sim")
    if args.upstream:
        if not args.upstream.startswith(("http://", "https://")):
            raise UsageError(f"--upstream {args.upstream} is not a URL: give http(s)://HOST[:PORT] or sim")
        return upstream_at(args.upstream, "upstream")
    if args.provider:
        if args.provider not in config.providers:
            raise UsageError(
                f"no provider {args.provider!r} in the config (have: {', '.join(sorted(config.providers))})"
            )
        settings = config.providers[args.provider]
        if settings.is_simulator:
            raise UsageError(f"{args.provider} is the simulator: use --upstream sim")
        return upstream_at(settings.server, settings.name, settings.cost_per_hour)
    return HOSTED
