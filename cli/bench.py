"""`hotloop bench`: N agent sessions at once against one provider, level by level, and `bench compare`."""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import TYPE_CHECKING

from hotloop.cli.arguments import UsageError

if TYPE_CHECKING:
    from hotloop.config import Choice
    from hotloop.headless.bench_trace import Trace
    from hotloop.headless.fleet_mix import Part
    from hotloop.headless.fleet_slo import Slo


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
    bench.add_argument(
        "--trace",
        nargs="+",
        metavar="SESSION",
        help="replay recorded sessions (ids, unique prefixes or session files) as the agents, by their request "
        "shapes; --agents N replays each N times, each copy on a prefix of its own",
    )
    bench.add_argument(
        "--mix",
        metavar="PARTS",
        help="a weighted mix of workloads, e.g. builtin=3,scenario:my-task.json=1,trace:SESSION=2: each level's "
        "agents split by weight",
    )
    bench.add_argument(
        "--time-scale",
        type=_seconds,
        default=1.0,
        metavar="X",
        help="with --trace or a mix's traces: the recorded tool and think times times X (default 1; 0 for none)",
    )
    bench.add_argument(
        "--slo-ttft", type=_seconds, default=None, metavar="S", help="with --trace: goodput's TTFT limit (default 2)"
    )
    bench.add_argument(
        "--slo-step",
        type=_seconds,
        default=None,
        metavar="S",
        help="with --trace: goodput's limit on a request's answer, tools excluded (default 30)",
    )
    bench.add_argument(
        "--slo",
        type=_slo,
        metavar="LIMITS",
        help="goodput's limits, e.g. ttft=2s,step=10s,job=60s (default ttft=2s,step=30s; with --trace, ttft and step)",
    )
    bench.add_argument(
        "--sweep",
        action="store_true",
        help="climb from the first --agents level (to the last, if two) to the highest load meeting every SLO",
    )
    bench.add_argument(
        "--workers",
        type=_workers,
        default=1,
        metavar="N",
        help="run the agents in N Ray worker processes (pip install 'hotloop[fleet]'; default 1: this process)",
    )
    bench.add_argument(
        "--ray-address", metavar="ADDR", help="with --workers: a running Ray cluster (default: start a local one)"
    )
    bench.add_argument("--json", action="store_true", help="print the results as JSON instead of the table")
    bench.add_argument(
        "--otel",
        action="store_true",
        help="export each agent's spans over OTLP (as [telemetry] or the local collector)",
    )
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


def _workers(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number of workers, 1 or more") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be a number of workers, 1 or more")
    return value


def _slo(text: str) -> Slo:
    from hotloop.headless.fleet_slo import Slo

    try:
        return Slo.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError("must be a number, 0 or more") from None
    if not 0 <= value < math.inf:  # NaN fails too; infinite waits would never end
        raise argparse.ArgumentTypeError("must be a number, 0 or more")
    return value


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
            table = comparison(first, second)
        except ValueError as error:
            raise UsageError(str(error)) from None
        Console().print(table)
        return 0
    choice = Choice(args.provider, args.model, args.base_url, args.tier)
    if args.trace:
        return _trace(args, choice)
    if args.mix is not None and args.scenario is not None:
        raise UsageError("--mix and --scenario are two workloads: name the scenario in the mix (scenario:FILE=1)")
    try:
        bench.Scenario.load(args.scenario)
        mix = _mix(args.mix) if args.mix is not None else None
    except ValueError as error:
        raise UsageError(str(error)) from None
    fleet = bench.FleetOptions(args.workers, args.ray_address, args.slo, args.sweep, mix, args.time_scale)
    try:
        return asyncio.run(bench.bench(choice, args.agents, args.scenario, args.json, otel=args.otel, fleet=fleet))
    except RuntimeError as error:  # the Ray cluster couldn't place the workers
        raise UsageError(str(error)) from None


def _trace_of(reference: str) -> Trace:
    """A recorded session by id, unique prefix or file, as a trace to replay; a UsageError if it has nothing to."""
    from hotloop import paths
    from hotloop.headless import bench_trace
    from hotloop.sessions.store import SessionError, find_session

    try:
        path = Path(reference) if Path(reference).is_file() else find_session(paths.sessions_dir(), reference)
        trace = bench_trace.Trace.load(path)
    except SessionError as error:
        raise UsageError(str(error)) from None
    if not trace.steps:
        raise UsageError(f"session {reference} has no step with its usage recorded: nothing to replay")
    return trace


def _mix(text: str) -> list[Part]:
    """`--mix` as its parts: the built-in task, scenario files and recorded sessions, each with its weight."""
    from hotloop.headless.bench import Scenario
    from hotloop.headless.fleet_mix import Part, parse_mix

    parts = []
    for kind, reference, weight in parse_mix(text):
        if kind == "trace" and reference is not None:
            trace = _trace_of(reference)
            parts.append(Part(f"trace {trace.name}", weight, trace=trace))
        else:
            path = Path(reference) if reference is not None else None
            parts.append(Part(path.name if path else "built-in", weight, Scenario.load(path)))
    return parts


def _trace(args: argparse.Namespace, choice: Choice) -> int:
    import asyncio

    from hotloop.headless import bench_trace

    if args.scenario is not None:
        raise UsageError("--trace and --scenario are two workloads: give one")
    if args.workers > 1 or args.sweep:
        raise UsageError(
            "--trace runs in this process: for --workers or --sweep, replay it in a mix (--mix trace:ID=1)"
        )
    if args.slo is not None and args.slo.job is not None:
        raise UsageError("--trace judges each request (ttft, step), not a job: leave job out of --slo")
    traces = [_trace_of(reference) for reference in args.trace]
    slo = args.slo
    options = bench_trace.TraceOptions(
        args.time_scale,
        slo.ttft if slo is not None else bench_trace.SLO_TTFT if args.slo_ttft is None else args.slo_ttft,
        slo.step if slo is not None else bench_trace.SLO_STEP if args.slo_step is None else args.slo_step,
    )
    return asyncio.run(bench_trace.bench_trace(choice, args.agents, traces, options, args.json))
