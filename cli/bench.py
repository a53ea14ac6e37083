"""`hotloop bench`: N agent sessions at once against one provider, level by level, and `bench compare`."""

from __future__ import annotations

import argparse
from pathlib import Path

from hotloop.cli.arguments import UsageError


def add_bench(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = commands.add_parser(
        "bench", help="N agent sessions at once against one provider, at each concurrency of a ramp"
    )
    bench.add_argument(
        "--agents",
        type=_ramp,
        default=[1, 4, 16],
        metavar="N,N,…",
        help="agents at once, level by level (default 1,4,16)",
    )
    bench.add_argument(
        "--scenario", type=Path, metavar="FILE", help="a bench task as JSON (default: the built-in research task)"
    )
    bench.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    bench.add_argument("--provider", metavar="NAME", help="a configured provider (default: the config's)")
    bench.add_argument("--model", metavar="MODEL")
    bench.add_argument("--tier", metavar="TIER", help="fast, balanced or strong")
    bench.add_argument("--base-url", metavar="URL", help="another server for the provider's protocol")
    bench_commands = bench.add_subparsers(dest="bench_command", metavar="COMMAND")
    compare = bench_commands.add_parser("compare", help="two saved bench results side by side")
    compare.add_argument("first", metavar="A", help="a saved result: its path, file name or a unique prefix")
    compare.add_argument("second", metavar="B")
    bench.set_defaults(handler=_bench)


def _ramp(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("must be numbers of agents, e.g. 1,8,32") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("every level must be at least 1 agent")
    return levels


def _bench(args: argparse.Namespace) -> int:
    import asyncio

    from hotloop import paths
    from hotloop.config import Choice
    from hotloop.headless import bench

    if args.bench_command == "compare":
        from rich.console import Console

        from hotloop.headless.bench_view import comparison

        folder = paths.data_dir() / "bench"
        try:
            first, second = bench.load(args.first, folder), bench.load(args.second, folder)
        except ValueError as error:
            raise UsageError(str(error)) from None
        Console().print(comparison(first, second))
        return 0
    try:
        bench.Scenario.load(args.scenario)
    except ValueError as error:
        raise UsageError(str(error)) from None
    choice = Choice(args.provider, args.model, args.base_url, args.tier)
    return asyncio.run(bench.bench(choice, args.agents, args.scenario, args.json))
