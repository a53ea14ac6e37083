"""`hotloop sim serve`: the simulator over HTTP, for any OpenAI or Anthropic client.

Its flags are the config's `[sim]` settings (plus `--no-latency`, the server's address, replicas, processes
and faults), turned into the simulator's config by the one function the runtime uses too.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from hotloop.cli.arguments import UsageError, non_negative, positive_int
from hotloop.sim import defaults  # constants only: --version stays fast

if TYPE_CHECKING:
    from collections.abc import Callable

    from hotloop.config import SimSettings
    from hotloop.sim.engine import SimConfig


def add_sim(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    sim = commands.add_parser("sim", help="the embedded vLLM-like simulator")
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    serve = sim_commands.add_parser("serve", help="serve the simulator over HTTP to any OpenAI or Anthropic client")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--ttft-ms", type=non_negative, metavar="MS", help="fixed time to first token")
    serve.add_argument(
        "--prefill-us-per-token", type=non_negative, metavar="US", help="prefill time per uncached prompt token"
    )
    serve.add_argument("--decode-ms-per-token", type=non_negative, metavar="MS", help="time per output token")
    serve.add_argument("--no-latency", action="store_true", help="answer as fast as possible")
    serve.add_argument("--scenario", type=Path, metavar="FILE", help="follow a JSON list of steps")
    for flag, default, meaning in (
        ("--cache-blocks", defaults.CACHE_BLOCKS, "prefix-cache capacity in 16-token blocks"),
        ("--cache-min-tokens", defaults.CACHE_MIN_TOKENS, "shortest prompt prefix the Anthropic API caches"),
        (
            "--max-model-len",
            defaults.MAX_MODEL_LEN,
            "tokens a request may hold, prompt and answer, as vLLM's --max-model-len",
        ),
    ):
        serve.add_argument(
            flag, type=positive_int, default=default, metavar="N", help=f"{meaning} (default %(default)s)"
        )
    serve.add_argument(
        "--no-prompt-tokens-details",
        action="store_true",
        help="leave cached-token counts out of usage, like vLLM without --enable-prompt-tokens-details",
    )
    serve.add_argument(
        "--max-running",
        type=positive_int,
        metavar="N",
        help="run at most N requests at once and queue the rest (vLLM's --max-num-seqs)",
    )
    serve.add_argument(
        "--scheduling-policy",
        choices=defaults.POLICIES,
        default=defaults.SCHEDULING_POLICY,
        help="admit queued requests in arrival order, or by their priority field (default %(default)s)",
    )
    serve.add_argument(
        "--batch-slowdown",
        type=non_negative,
        default=defaults.BATCH_SLOWDOWN,
        metavar="X",
        help="continuous batching: each other request decoding at once adds X to a token's time (default "
        "%(default)s: 1.6× at 32 at once; 0: off)",
    )
    serve.add_argument(
        "--replicas",
        type=positive_int,
        default=1,
        metavar="K",
        help="serve K replicas, each with its own cache and batch, behind one router (default %(default)s)",
    )
    serve.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        metavar="P",
        help="serve from P processes on one port, each a whole simulator, for more streams than one core holds "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--router",
        choices=defaults.ROUTERS,
        default=defaults.ROUTERS[0],
        help="how the router picks a replica: in turn, by the session key, or by the longest cached prefix "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--affinity-header",
        default=defaults.AFFINITY_HEADER,
        metavar="NAME",
        help="the header the affinity router reads the session key from (default %(default)s)",
    )
    serve.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="FAULT",
        help="misbehave on every request, for manual checks (repeatable): drop:N, status:CODE[:retry-after=S]"
        "[:times=N], stall:S[:after=N], invalid-utf8, huge-argument:N, duplicate-ids, usage:FIELD=N, cut-arguments:N",
    )
    sim.set_defaults(handler=_serve)


def sim_settings(args: argparse.Namespace) -> SimSettings:
    """The `[sim]` settings the flags give; `--no-latency` makes 0 of each latency figure not given."""
    from hotloop.config import SimSettings

    def figure(given: float | None) -> float | None:
        return 0.0 if given is None and args.no_latency else given

    return SimSettings(
        ttft_ms=figure(args.ttft_ms),
        prefill_us_per_token=figure(args.prefill_us_per_token),
        decode_ms_per_token=figure(args.decode_ms_per_token),
        scenario=args.scenario,
        cache_blocks=args.cache_blocks,
        cache_min_tokens=args.cache_min_tokens,
        max_model_len=args.max_model_len,
        max_running=args.max_running,
        scheduling_policy=args.scheduling_policy,
        prompt_tokens_details=not args.no_prompt_tokens_details,
        batch_slowdown=args.batch_slowdown,
    )


def _serve(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib
    from dataclasses import replace

    from hotloop.core.runtime import simulator_config
    from hotloop.sim.embedded import Served, start
    from hotloop.sim.fleet import Fleet
    from hotloop.sim.scenario import ScenarioError, parse_faults
    from hotloop.sim.server import SimServer

    config = simulator_config(sim_settings(args))
    try:
        config = replace(config, faults=parse_faults(args.fault))
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port: give 0 to 65535 (0 picks a free one)")

    if args.processes > 1 and args.replicas > 1:
        raise UsageError("--processes and --replicas: give one (a router's replicas share one process)")

    served: Served = SimServer(config)
    fleet = ""
    if args.replicas > 1:
        served = Fleet(config, args.replicas, args.router, args.affinity_header)
        keyed = f" on {args.affinity_header}" if args.router == "affinity" else ""
        fleet = f"; {args.replicas} replicas behind the {args.router} router{keyed}"
    elif args.processes > 1:
        fleet = f"; {args.processes} processes, connections spread by the kernel"

    def announce(port: int) -> None:
        print(
            f"hotloop sim: OpenAI Chat Completions and Responses on http://{args.host}:{port}/v1 and Anthropic "
            f"Messages on http://{args.host}:{port} (models: {', '.join(config.models)}{fleet}"
            f"{'; faults: ' + ', '.join(args.fault) if args.fault else ''}); Ctrl-C stops",
            flush=True,
        )

    if args.processes > 1:
        return _serve_processes(config, args, announce)

    async def serve() -> None:
        try:
            runner, port = await start(served, args.host, args.port)
        except OSError as error:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
        announce(port)
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def _serve_processes(config: SimConfig, args: argparse.Namespace, announce: Callable[[int], None]) -> int:
    import sys

    from hotloop.sim import processes

    try:
        processes.serve(config, args.host, args.port, args.processes, announce)
    except OSError as error:
        raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
    except processes.ReplicaStopped as stopped:
        print(f"hotloop sim: {stopped}; the others were stopped", file=sys.stderr)
        return 1
    return 0
