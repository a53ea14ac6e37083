"""The `hotloop` command line.

Imports are deferred into the commands, so `hotloop --version` stays fast. Every user error
ends as one line on stderr and a non-zero exit: 2 for bad input or configuration, 1 for a
run that failed, 130 for an interrupt.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from hotloop import InputError, __version__

if TYPE_CHECKING:
    from hotloop.core.session import SessionOptions
    from hotloop.core.slash import Slash


_LATEST = "the session last used in this folder, else the latest anywhere"


class UsageError(InputError):
    """Bad command-line input; the message is shown as one line."""


def build_parser() -> argparse.ArgumentParser:
    from hotloop.providers.sim import defaults as sim_defaults  # constants only: --version stays fast

    parser = argparse.ArgumentParser(
        prog="hotloop", description="A terminal agent console that shows where every turn's time and tokens go."
    )
    parser.add_argument("--version", action="version", version=f"hotloop {__version__}")
    # The app's options. Separate dests: a subcommand's own defaults would overwrite these.
    _session_options(parser, prefix="app_")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="run prompts headless, streaming the answer to stdout")
    run.add_argument(
        "prompts",
        nargs="*",
        metavar="PROMPT",
        help="consecutive user turns (default: read stdin); /provider, /model or /tier between them switches, "
        "/compact compacts",
    )
    run.add_argument("--json", action="store_true", help="print every event as a JSON line instead of text")
    _session_options(run, prefix="")

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

    replay = commands.add_parser("replay", help="redraw a saved session as it happened (never calls a provider)")
    replay.add_argument(
        "session", nargs="?", metavar="SESSION", help=f"a session id or its prefix (default: {_LATEST})"
    )
    replay.add_argument(
        "--speed", type=_non_negative, default=1.0, metavar="N", help="pace × N (default 1; 0 draws it all at once)"
    )
    replay.add_argument("--headless", action="store_true", help="print the replay to stdout, as hotloop run would have")

    sim = commands.add_parser("sim", help="the embedded vLLM-like simulator")
    sim_commands = sim.add_subparsers(dest="sim_command", metavar="COMMAND", required=True)
    serve = sim_commands.add_parser("serve", help="serve the simulator over HTTP to any OpenAI or Anthropic client")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--ttft-ms", type=_non_negative, metavar="MS", help="fixed time to first token")
    serve.add_argument(
        "--prefill-us-per-token", type=_non_negative, metavar="US", help="prefill time per uncached prompt token"
    )
    serve.add_argument("--decode-ms-per-token", type=_non_negative, metavar="MS", help="time per output token")
    serve.add_argument("--no-latency", action="store_true", help="answer as fast as possible")
    serve.add_argument("--scenario", type=Path, metavar="FILE", help="follow a JSON list of steps")
    serve.add_argument(
        "--cache-blocks",
        type=_positive_int,
        default=sim_defaults.CACHE_BLOCKS,
        metavar="N",
        help="prefix-cache capacity in 16-token blocks (default %(default)s)",
    )
    serve.add_argument(
        "--cache-min-tokens",
        type=_positive_int,
        default=sim_defaults.CACHE_MIN_TOKENS,
        metavar="N",
        help="shortest prompt prefix the Anthropic API caches (default %(default)s)",
    )
    serve.add_argument(
        "--max-model-len",
        type=_positive_int,
        default=sim_defaults.MAX_MODEL_LEN,
        metavar="N",
        help="tokens a request may hold, prompt and answer, as vLLM's --max-model-len (default %(default)s)",
    )
    serve.add_argument(
        "--no-prompt-tokens-details",
        action="store_true",
        help="leave cached-token counts out of usage, like vLLM without --enable-prompt-tokens-details",
    )
    serve.add_argument(
        "--max-running",
        type=_positive_int,
        metavar="N",
        help="run at most N requests at once and queue the rest (vLLM's --max-num-seqs)",
    )
    serve.add_argument(
        "--scheduling-policy",
        choices=sim_defaults.POLICIES,
        default=sim_defaults.SCHEDULING_POLICY,
        help="admit queued requests in arrival order, or by their priority field (default %(default)s)",
    )
    serve.add_argument(
        "--batch-slowdown",
        type=_non_negative,
        default=sim_defaults.BATCH_SLOWDOWN,
        metavar="X",
        help="continuous batching: each other request decoding at once adds X to a token's time (default "
        "%(default)s: 1.6× at 32 at once; 0: off)",
    )
    serve.add_argument(
        "--replicas",
        type=_positive_int,
        default=1,
        metavar="K",
        help="serve K replicas, each with its own cache and batch, behind one router (default %(default)s)",
    )
    serve.add_argument(
        "--router",
        choices=sim_defaults.ROUTERS,
        default=sim_defaults.ROUTERS[0],
        help="how the router picks a replica: in turn, by the session key, or by the longest cached prefix "
        "(default %(default)s)",
    )
    serve.add_argument(
        "--affinity-header",
        default=sim_defaults.AFFINITY_HEADER,
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

    _recipe_parsers(commands)

    config = commands.add_parser("config", help="where the config file is, and what it says")
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    config_commands.add_parser("path", help="print the config file's path")
    config_commands.add_parser("show", help="print the effective configuration (keys masked)")

    mcp = commands.add_parser("mcp", help="MCP servers")
    mcp_commands = mcp.add_subparsers(dest="mcp_command", metavar="COMMAND", required=True)
    mcp_import = mcp_commands.add_parser(
        "import", help="print a Claude Code or Claude Desktop config's MCP servers as [mcp.NAME] tables"
    )
    mcp_import.add_argument(
        "file", type=Path, metavar="FILE", help=".mcp.json, ~/.claude.json or claude_desktop_config.json"
    )
    mcp_import.add_argument("--write", action="store_true", help="also append them to hotloop's config file")

    sessions = commands.add_parser("sessions", help="saved sessions")
    session_commands = sessions.add_subparsers(dest="sessions_command", metavar="COMMAND", required=True)
    listing = session_commands.add_parser("list", help="list sessions, newest first")
    listing.add_argument("--limit", type=_positive_int, default=50, metavar="N")
    listing.add_argument("--search", metavar="TEXT", help="only sessions whose prompts, id or model contain TEXT")
    show = session_commands.add_parser("show", help="print a session's conversation")
    show.add_argument("session", nargs="?", metavar="ID", help=f"a session id or a unique prefix (default: {_LATEST})")
    show.add_argument("--waterfall", action="store_true", help="where each turn's time went: model and tool bars")
    export = session_commands.add_parser("export", help="write a session as Markdown, JSON or HTML")
    export.add_argument(
        "session", nargs="?", metavar="ID", help=f"a session id or a unique prefix (default: {_LATEST})"
    )
    export.add_argument("--format", choices=("md", "json", "html"), default="md")
    export.add_argument("-o", "--output", type=Path, metavar="FILE", help="write here instead of stdout")
    fork = session_commands.add_parser("fork", help="start a new session holding a session's turns up to one")
    fork.add_argument("session", metavar="ID", help="a session id or a unique prefix")
    fork.add_argument("--turn", type=_positive_int, metavar="N", help="the last turn the fork keeps (default: all)")
    delete = session_commands.add_parser("delete", help="delete a session's log (asks first)")
    delete.add_argument("session", metavar="ID", help="a session id or a unique prefix")
    delete.add_argument("-y", "--yes", action="store_true", help="don't ask (needed when stdin is not a terminal)")
    return parser


def _recipe_parsers(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """`hotloop recipe SERVER MODEL`, and `hotloop vllm recipe MODEL`, its older spelling for vLLM."""
    from hotloop.core import recipes  # constants only

    recipe = commands.add_parser(
        "recipe", help="print a launch command suited to agents for a self-hosted server, each flag explained"
    )
    servers = recipe.add_subparsers(dest="server", metavar="SERVER", required=True)
    _vllm_recipe(servers.add_parser("vllm", help="vLLM: prefix caching, tool parsing, priority scheduling"))
    llama = servers.add_parser("llama.cpp", help="llama-server: --jinja for tools, --metrics, slots and context")
    llama.add_argument("model", metavar="MODEL", help="a .gguf file, or a Hugging Face repo (user/model[:quant])")
    _context_option(llama, recipes.CONTEXT)
    llama.add_argument(
        "--slots",
        type=_positive_int,
        default=recipes.SLOTS,
        metavar="N",
        help="requests served at once (default %(default)s)",
    )
    sglang = servers.add_parser("sglang", help="SGLang: tool parsing, metrics and cached-token counts")
    sglang.add_argument("model", metavar="MODEL", help="a Hugging Face model id, e.g. Qwen/Qwen2.5-Coder-32B-Instruct")
    sglang.add_argument("--gpus", type=_positive_int, default=1, metavar="N", help="GPUs to split the model across")
    ollama = servers.add_parser("ollama", help="Ollama: a context long enough for an agent's prompt")
    ollama.add_argument("model", metavar="MODEL", help="an Ollama model, e.g. qwen2.5-coder:7b")
    _context_option(ollama, recipes.CONTEXT)
    vllm = commands.add_parser("vllm", help="self-hosting with vLLM")
    vllm_commands = vllm.add_subparsers(dest="vllm_command", metavar="COMMAND", required=True)
    _vllm_recipe(vllm_commands.add_parser("recipe", help="the same as hotloop recipe vllm"))


def _vllm_recipe(recipe: argparse.ArgumentParser) -> None:
    recipe.add_argument("model", metavar="MODEL", help="a Hugging Face model id, e.g. Qwen/Qwen2.5-Coder-32B-Instruct")
    recipe.add_argument("--gpus", type=_positive_int, default=1, metavar="N", help="GPUs to split the model across")
    recipe.add_argument("--spec", choices=("ngram", "eagle3"), help="add speculative decoding")
    recipe.set_defaults(server="vllm")


def _context_option(recipe: argparse.ArgumentParser, default: int) -> None:
    recipe.add_argument(
        "--context", type=_positive_int, default=default, metavar="N", help="context in tokens (default %(default)s)"
    )


def _session_options(parser: argparse.ArgumentParser, prefix: str) -> None:
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
        type=_positive_int,
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
        help=f"continue {_LATEST}",
    )


def _options(args: argparse.Namespace, prefix: str) -> SessionOptions:
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
    )


def _rule(text: str) -> str:
    """`run_shell:pytest *`: a tool's name, then what its commands, path or arguments must match."""
    from hotloop.agent.rules import check_rule

    try:
        return check_rule(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def _timeout(text: str) -> tuple[float, float]:
    """`--timeout 30` (first byte and idle alike) or `--timeout 120,30`."""
    first, _, idle = text.partition(",")
    try:
        figures = float(first), float(idle or first)
    except ValueError:
        raise argparse.ArgumentTypeError("must be seconds, or two of them: FIRST_BYTE,IDLE") from None
    if min(figures) <= 0:
        raise argparse.ArgumentTypeError("must be positive")
    return figures


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def _ramp(text: str) -> list[int]:
    try:
        levels = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("must be numbers of agents, e.g. 1,8,32") from None
    if not levels or min(levels) < 1:
        raise argparse.ArgumentTypeError("every level must be at least 1 agent")
    return levels


def _non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from hotloop.providers.errors import ProviderError

    try:
        return _dispatch(args)
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


def _dispatch(args: argparse.Namespace) -> int:
    if args.command is None:
        return _app(args)
    if args.command == "run":
        return _run(args)
    if args.command == "sim":
        return _sim_serve(args)
    if args.command == "config":
        return _config(args)
    if args.command == "mcp":
        return _mcp_import(args)
    if args.command == "bench":
        return _bench(args)
    if args.command in ("recipe", "vllm"):
        from hotloop.core import recipes

        options = {name: value for name, value in vars(args).items() if name in recipes.OPTIONS}
        print(recipes.recipe(args.server, args.model, **options))
        return 0
    from hotloop.headless import session_commands

    if args.command == "replay":
        session = session_commands.replay_session(args.session)
        if args.headless:
            return session_commands.print_replay(session, args.speed)
        from hotloop.tui.replay_app import ReplayApp

        ReplayApp(session, args.speed).run()
        return 0
    return session_commands.run(args)


def _app(args: argparse.Namespace) -> int:
    """Open the TUI; a bad config, provider, tier or missing key fails here, before the screen takes over."""
    from hotloop.config import load_config
    from hotloop.headless.session_commands import say_saved
    from hotloop.tui.app import HotloopApp

    options = _options(args, "app_")
    app = HotloopApp(load_config(), options)
    app.run()
    say_saved(app.session.logs.last, options.workspace)
    return 0


def _session_to_resume(reference: str | None) -> Path | None:
    """The log of the session to continue (`""`: the one written to last here), checked before the screen takes over."""
    if reference is None:
        return None
    from hotloop.headless.session_commands import pick_session, say_note
    from hotloop.sessions.log import SessionInUse, is_in_use
    from hotloop.sessions.store import read_header, session_id_of

    pick = pick_session(reference or None, "continuing")
    read_header(pick.path)
    if is_in_use(pick.path):
        raise SessionInUse(f"session {session_id_of(pick.path)} is open in another hotloop process")
    say_note(pick)
    return pick.path


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


def _run(args: argparse.Namespace) -> int:
    import asyncio

    from hotloop.headless.run import run

    prompts = _prompts(args.prompts)
    return asyncio.run(run(_options(args, ""), prompts, json_lines=args.json))


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


def _read_system_file(path: Path | None) -> str | None:
    if path is None:
        return None
    try:
        return path.read_text(encoding="utf-8")
    except OSError as error:
        raise UsageError(f"cannot read --system file {path}: {error.strerror}") from None
    except UnicodeDecodeError:
        raise UsageError(f"--system file {path} is not UTF-8 text") from None


def _sim_serve(args: argparse.Namespace) -> int:
    import asyncio
    import contextlib

    from hotloop.providers.sim.engine import NO_LATENCY, SimConfig
    from hotloop.providers.sim.fleet import Fleet
    from hotloop.providers.sim.model import ScenarioError, load_scenario, parse_faults
    from hotloop.providers.sim.server import Served, SimServer, start

    try:
        scenario = load_scenario(args.scenario) if args.scenario else ()
        faults = parse_faults(args.fault)
    except ScenarioError as error:
        raise UsageError(str(error)) from None
    if not 0 <= args.port <= 65535:
        raise UsageError(f"--port {args.port} is not a port: give 0 to 65535 (0 picks a free one)")
    config = SimConfig(
        cache_blocks=args.cache_blocks,
        scenario=scenario,
        cache_min_tokens=args.cache_min_tokens,
        max_model_len=args.max_model_len,
        prompt_tokens_details=not args.no_prompt_tokens_details,
        max_running=args.max_running,
        scheduling=args.scheduling_policy,
        faults=faults,
        batch_slowdown=args.batch_slowdown,
    )
    if args.no_latency:
        config = config.with_latency(NO_LATENCY.ttft, NO_LATENCY.prefill_per_token, NO_LATENCY.decode_per_token)
    config = config.with_latency(
        ttft=args.ttft_ms / 1000 if args.ttft_ms is not None else None,
        prefill_per_token=args.prefill_us_per_token / 1e6 if args.prefill_us_per_token is not None else None,
        decode_per_token=args.decode_ms_per_token / 1000 if args.decode_ms_per_token is not None else None,
    )

    served: Served = SimServer(config)
    fleet = ""
    if args.replicas > 1:
        served = Fleet(config, args.replicas, args.router, args.affinity_header)
        keyed = f" on {args.affinity_header}" if args.router == "affinity" else ""
        fleet = f"; {args.replicas} replicas behind the {args.router} router{keyed}"

    async def serve() -> None:
        try:
            runner, port = await start(served, args.host, args.port)
        except OSError as error:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {error.strerror}") from None
        print(
            f"hotloop sim: OpenAI Chat Completions and Responses on http://{args.host}:{port}/v1 and Anthropic "
            f"Messages on http://{args.host}:{port} (models: {', '.join(config.models)}{fleet}"
            f"{'; faults: ' + ', '.join(args.fault) if args.fault else ''}); Ctrl-C stops",
            flush=True,
        )
        try:
            await asyncio.Event().wait()
        finally:
            await runner.cleanup()

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve())
    return 0


def _mcp_import(args: argparse.Namespace) -> int:
    from hotloop.agent.text import inert
    from hotloop.agent.tools.mcp_import import append_to, imported, to_toml
    from hotloop.config import load_config

    config = load_config()
    result = imported(args.file, taken={server.name for server in config.mcp})
    tables = to_toml(result)
    print(tables, end="")
    for note in result.notes:
        print(f"hotloop: {inert(note)}", file=sys.stderr)
    if args.write and result.servers:
        append_to(config.path, tables)
        print(f"hotloop: added {len(result.servers)} MCP server(s) to {config.path}", file=sys.stderr)
    return 0


def _config(args: argparse.Namespace) -> int:
    from hotloop import paths
    from hotloop.config import load_config

    if args.config_command == "path":
        print(paths.config_file())
        return 0
    config = load_config()
    print(f"# {config.path}{'' if config.loaded else ' (not found: defaults)'}")
    print(config.to_toml(), end="")
    for warning in config.warnings:
        print(f"hotloop: warning: {warning}", file=sys.stderr)
    return 0
