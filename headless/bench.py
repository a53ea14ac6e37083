"""`hotloop bench`: N agent sessions at once against one provider, at each concurrency of a ramp.

Each agent is hotloop's own `Agent`, with its own session key (so a router can keep it on one
replica), the scenario's system prompt and tools, and its own history. The tools sleep for
fixed times: the bench loads the LLM server only. The prompts ask for the tool calls by name,
so every server gets the same requests and is asked for the same work: the simulator, embedded
or served, makes the calls from the prompts alone, and a model that makes fewer is named below
the table. Every figure comes from the agents' own events (`StepFinished`, `TurnFinished`,
`ToolFinished`), as the transcript's do.
"""

from __future__ import annotations

import asyncio
import json
import statistics
import time
import uuid
from collections import Counter
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import msgspec

from hotloop.agent.events import AgentEvent, Notice, StepFinished, ToolFinished, TurnFinished
from hotloop.agent.figures import model_writing
from hotloop.agent.tools.registry import Tool, ToolContext, ToolRegistry
from hotloop.config import Choice
from hotloop.nesting import decoded
from hotloop.providers.events import CUT_SHORT
from hotloop.struct_errors import explained

if TYPE_CHECKING:
    from rich.console import Console

    from hotloop.core.runtime import Runtime
    from hotloop.core.telemetry import Telemetry
    from hotloop.headless.fleet_mix import Part
    from hotloop.headless.fleet_slo import Slo
    from hotloop.providers.base import Provider

# The built-in task: a research question in two turns, whose prompts ask for the calls: three searches and two
# fetches, then an answer; one more search, then a table. Five steps, six calls.
RULES = "\n".join(
    f"- Rule {n}: cite the file and line of every claim, and prefer primary sources over summaries." for n in range(60)
)
BUILTIN = {
    "system": f"You are a research agent. Use the tools, then answer in Markdown.\n\n{RULES}",
    "prompts": [
        'Use the search tool for "prefix cache eviction 0", "prefix cache eviction 1" and "prefix cache eviction 2" '
        '(three calls at once), then use the fetch tool on "https://docs.example/cache/0" and '
        '"https://docs.example/cache/1" (two calls at once), then answer: how does a prefix cache evict blocks '
        "shared between requests?",
        'Use the search tool for "lru cache comparison", then compare a prefix cache with a plain LRU cache in a '
        "short table.",
    ],
    "tools": {"search": 0.3, "fetch": 0.2},
    "expect": {"steps": 5, "tool_calls": 6},
}


class Expected(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """What one agent's turns take, all together, when the model makes the calls its prompts ask for."""

    steps: Annotated[int, msgspec.Meta(ge=1)]
    tool_calls: Annotated[int, msgspec.Meta(ge=0)]


class Scenario(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    """A bench task: the system prompt, the turns' prompts (which ask for the tool calls by name), each tool's
    fixed latency in seconds, and what the task takes when the model does as asked."""

    system: str
    prompts: list[str]
    tools: dict[str, float]
    expect: Expected | None = None
    max_tokens: Annotated[int, msgspec.Meta(ge=1)] | None = None  # the answers' cap, if not the provider's

    @classmethod
    def load(cls, path: Path | None) -> Scenario:
        if path is None:
            return msgspec.convert(BUILTIN, cls)
        try:
            given = decoded(msgspec.json.decode, path.read_bytes())
        except (OSError, msgspec.DecodeError) as error:
            raise ValueError(f"bench scenario {path}: {error}") from None
        try:
            return msgspec.convert(given, cls)
        except msgspec.ValidationError as error:
            raise ValueError(f"bench scenario {path}: {explained(error, given, cls)}") from None

    def task(self) -> dict[str, Any]:
        """What one agent is asked for, as the result records it."""
        expect = self.expect
        return {
            "turns": len(self.prompts),
            "steps": expect.steps if expect else None,
            "tool_calls": expect.tool_calls if expect else None,
        }


def tools_of(scenario: Scenario) -> ToolRegistry:
    schema = {"type": "object", "properties": {"query": {"type": "string"}, "url": {"type": "string"}}}

    def sleeper(seconds: float) -> Callable[[dict[str, Any], ToolContext], Any]:
        async def run(args: dict[str, Any], ctx: ToolContext) -> str:
            await asyncio.sleep(seconds)
            return f"result for {json.dumps(args)}: " + "a relevant passage about caches and eviction. " * 8

        return run

    return ToolRegistry(
        [
            Tool(name, f"{name.title()} (takes {s:g} s).", schema, sleeper(s), read_only=True)
            for name, s in scenario.tools.items()
        ]
    )


ARRIVALS_S = 1.0  # a level's agents arrive evenly over its first second


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0–100) by linear interpolation; None without values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100
    low = int(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def spread(values: Sequence[float]) -> dict[str, float | None]:
    return {"p50": percentile(values, 50), "p95": percentile(values, 95), "p99": percentile(values, 99)}


@dataclass
class Level:
    """One concurrency level's events, by agent, its wall time (first agent's start to last agent's end), and its
    ramp: from its first agent's start to its last's."""

    agents: int
    events: list[list[AgentEvent]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    wall: float = 0.0
    ramp: float = 0.0

    def figures(self) -> dict[str, Any]:
        steps = [e for agent in self.events for e in agent if isinstance(e, StepFinished)]
        turns = [e for agent in self.events for e in agent if isinstance(e, TurnFinished)]
        calls = Counter(e.name for agent in self.events for e in agent if isinstance(e, ToolFinished))
        usage = [s.usage for s in steps if s.usage is not None and s.usage.prompt_total is not None]
        prompt = sum(u.prompt_total or 0 for u in usage)
        # A server that leaves the figure out of a total miss (vLLM, the simulator) read nothing.
        read = sum(u.cache_read or 0 for u in usage)
        output = sum(u.output or 0 for u in usage)
        per_agent = [rate for agent in self.events if (rate := decode_rate(agent)) is not None]
        return {
            "agents": self.agents,
            "turns": len(turns),
            "steps": len(steps),
            "steps_per_turn": len(steps) / len(turns) if turns else None,
            "tool_calls": dict(sorted(calls.items())),
            # Steps the output cap or the context window ended: their work is cut short.
            "cut_off": sum(s.finish_reason in CUT_SHORT for s in steps),
            "ttft_s": spread([s.ttft for s in steps if s.ttft is not None]),
            "step_s": spread([s.wall for s in steps]),
            "turn_s": spread([t.wall for t in turns]),
            "output_tok_s_per_agent": statistics.median(per_agent) if per_agent else None,
            "output_tok_s_total": output / self.wall if self.wall else None,
            "cache_hit": read / prompt if prompt else None,
            "prompt_tokens": prompt,
            "uncached_prefill_tokens": prompt - read,
            "errors": len(self.errors) + sum(t.reason == "error" for t in turns),
            # What failed, most frequent first: the agents' error lines, and any agent that raised.
            "error_messages": dict(
                Counter(
                    [e.message for agent in self.events for e in agent if isinstance(e, Notice) and e.level == "error"]
                    + self.errors
                ).most_common()
            ),
            "wall_s": self.wall,
            "ramp_s": self.ramp,
        }


def decode_rate(events: list[AgentEvent]) -> float | None:
    """An agent's output tokens over the time its model spent decoding them: TTFT excluded, as a decode rate is.

    A step's decode time is its output at the server's own decode rate when it reports one (llama.cpp's
    `predicted_per_second`), else the time from its first byte to its end.
    """
    tokens = decoding = 0.0
    for step in events:
        if not isinstance(step, StepFinished) or step.usage is None or not step.usage.output:
            continue
        by_server = step.decode_tps if step.figures_by else None
        seconds = step.usage.output / by_server if by_server else model_writing(step)
        if seconds:
            tokens, decoding = tokens + step.usage.output, decoding + seconds
    return tokens / decoding if decoding > 0 else None


async def run_level(
    runtime: Runtime,
    provider: Provider,
    scenario: Scenario,
    agents: int,
    on_event: Callable[[AgentEvent], None],
    telemetry: Telemetry | None = None,
    first: int = 0,
) -> Level:
    """`agents` sessions at once, each the scenario's turns in order, each agent as the config says; with
    `telemetry`, each agent's events are spans of their own, its key their conversation. Agents are numbered from
    `first + 1` (a worker's share of a level), so no two agents of a level send the same prompts."""
    level = Level(agents)
    registry = tools_of(scenario)
    options = runtime.config.agent_options()

    async def one(n: int) -> None:
        events: list[AgentEvent] = []
        level.events.append(events)
        key = f"bench-{uuid.uuid4().hex[:12]}"
        spans = telemetry.stream(key, runtime.config.pricer) if telemetry is not None else None

        def emit(event: AgentEvent) -> None:
            events.append(event)
            on_event(event)
            if spans is not None:
                spans.observe(event)

        # The config's options, all of them: the bench measures agents as the app runs them.
        agent = runtime.agent(
            provider,
            emit=emit,
            workspace=Path.cwd(),
            tools=registry,
            options=replace(options, max_tokens=scenario.max_tokens),
            system=scenario.system,
            cache_key=key,
        )
        try:
            for prompt in scenario.prompts:
                await agent.run_turn(f"{prompt} (agent {first + n + 1})")
        except Exception as error:  # one agent's failure is a figure of the level, not the end of the bench
            level.errors.append(f"agent {first + n + 1}: {error}")

    started = time.perf_counter()
    level.ramp = await staggered(one, agents)
    level.wall = time.perf_counter() - started
    return level


def warm_up() -> None:
    """What an agent's first step loads, loaded before the first level (in a thread, off the loop): the agent's
    modules and the price table, ~0.2 s the level's first tick would otherwise spend."""
    import hotloop.agent.loop  # noqa: F401
    from hotloop.agent import pricing

    pricing.warm()


async def staggered(start: Callable[[int], Coroutine[Any, Any, None]], count: int, over: float = ARRIVALS_S) -> float:
    """`start(0)` … `start(count - 1)` run at once, arriving evenly over `over` seconds, as agents do; the seconds
    from the first's start to the last's (the level's ramp).

    An agent's start (its build and first request) is a millisecond or more of CPU: begun in one turn, a level's
    agents held the loop for all of them. A loop behind the schedule begins every agent due at once, so a slow
    client's ramp isn't stretched a loop turn an agent (which took 84 s to begin 1,000).
    """
    loop = asyncio.get_running_loop()
    tasks: list[asyncio.Task[None]] = []
    begun = loop.time()
    try:
        for n in range(count):
            if (wait := begun + n * over / count - loop.time()) > 0:
                await asyncio.sleep(wait)
            tasks.append(asyncio.create_task(start(n)))
        await asyncio.sleep(0)  # the last one's start
        ramp = loop.time() - begun
        await asyncio.gather(*tasks)
    except BaseException:  # a level cancelled while its agents start: none is left running
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        raise
    return ramp


@dataclass(frozen=True)
class FleetOptions:
    """Where the agents run (`--workers`, `--ray-address`), what they do (`--mix`) and what a level is judged by
    (`--slo`, `--sweep`)."""

    workers: int = 1
    ray_address: str | None = None
    slo: Slo | None = None
    sweep: bool = False
    mix: list[Part] | None = None  # `--mix`: in place of the scenario
    time_scale: float = 1.0  # a mix's traces' tool and think times, times this


def results(provider: Provider, scenario: str, task: dict[str, Any]) -> dict[str, Any]:
    """A run's result, before its levels."""
    return {
        "provider": provider.name,
        "model": provider.model,
        "server": provider.base_url,
        "scenario": scenario,
        "task": task,
        "started": time.time(),
        "levels": [],
    }


def save(result: dict[str, Any], folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%S", time.localtime(result["started"]))
    taken = len(list(folder.glob(f"{stamp}_{result['provider']}*.json")))  # runs begun in that second: not overwritten
    path = folder / f"{stamp}_{result['provider']}{f'_{taken + 1}' if taken else ''}.json"
    path.write_text(json.dumps(result, indent=1) + "\n")
    return path


def load(name: str, folder: Path) -> dict[str, Any]:
    """A saved result by path, file name or unique prefix of its name."""
    path = Path(name)
    if not path.is_file():
        exact = folder / f"{name}.json"  # a whole name is that run, though it begins another's (`…_sim_2`)
        found = [exact] if exact.is_file() else sorted(folder.glob(f"{name}*.json")) if folder.is_dir() else []
        if len(found) != 1:
            many = f"{len(found)} saved results start with {name!r}" if found else f"no saved bench result {name!r}"
            raise ValueError(f"{many} (in {folder})")
        path = found[0]
    try:
        loaded: dict[str, Any] = decoded(json.loads, path.read_text())
    except (OSError, ValueError) as error:
        raise ValueError(f"cannot read bench result {path}: {error}") from None
    return loaded


async def bench(
    choice: Choice,
    ramp: list[int],
    scenario_path: Path | None,
    json_out: bool,
    out: Console | None = None,
    otel: bool = False,
    fleet: FleetOptions | None = None,
) -> int:
    """Run the ramp (or the sweep), in this process or on workers; print the table and chart (or JSON) to `out`
    (stdout), save the result; 0 if no level had an error. Spans go where the config says, or with `otel` to the
    local collector (`--otel`)."""
    from rich.console import Console
    from rich.live import Live

    from hotloop.config import load_config, resolve
    from hotloop.core.runtime import Runtime
    from hotloop.core.telemetry import start_telemetry
    from hotloop.headless.bench_trace import calibrate
    from hotloop.headless.bench_view import Progress, chart, findings, fleet_findings, workers_table
    from hotloop.headless.fleet_mix import Workload
    from hotloop.headless.fleet_run import measured_level, start_fleet
    from hotloop.headless.fleet_slo import SWEEP_CAP, Slo, judged, next_load

    options = fleet or FleetOptions()
    slo = options.slo or Slo()
    workload = Workload(options.mix, time_scale=options.time_scale) if options.mix else Workload.of(scenario_path)
    config, choice = load_config().pointed_at(choice)
    target = resolve(config, choice)
    err, out = Console(stderr=True), out or Console()
    runtime = Runtime(config)

    def warned(event: AgentEvent) -> None:  # an export that failed: one line
        if isinstance(event, Notice):
            err.print(f"{event.level}: {event.message}", markup=False, highlight=False)

    telemetry = start_telemetry(config, otel, warned, lambda: None)
    workers = None
    try:
        provider = await runtime.connect(target)
        await asyncio.to_thread(warm_up)
        if any(part.trace is not None for part in workload.parts):
            workload = replace(workload, calibration=await calibrate(provider))
        result = results(provider, workload.name, workload.task())
        if options.mix:
            result["mix"] = [{"workload": part.name, "weight": part.weight} for part in workload.parts]
        if options.workers > 1:
            workers = await start_fleet(options.workers, options.ray_address, config, target, provider, err)
        result["workers"] = len(workers.actors) if workers else 1
        if workers is not None and telemetry is not None:
            err.print("--otel: the workers' agents export no spans", markup=False, highlight=False)
        if workers is not None:
            result["ray"] = {"address": workers.address, "startup_s": workers.startup_s}
        # A sweep's levels are found as it goes: the progress view reads the list as it grows.
        levels = ramp[:1] if options.sweep else list(ramp)
        cap = max(ramp) if options.sweep and len(ramp) > 1 else SWEEP_CAP
        tried: dict[int, bool] = {}
        progress = Progress(levels, workload.task()["turns"], result)
        with Live(progress, console=err, refresh_per_second=4, transient=True, auto_refresh=err.is_terminal):
            for agents in levels:
                progress.start(agents)
                level, figures, parts = await measured_level(
                    runtime, provider, workload, agents, progress.take, progress.tally, telemetry, workers
                )
                figures.update(judged(level, [part.turns for part in parts], slo, target.settings.cost_per_hour))
                result["levels"].append(figures)
                tried[agents] = figures["goodput"] == 1
                if options.sweep and (following := next_load(tried, cap)) is not None:
                    levels.append(following)
        if options.sweep:
            result["levels"].sort(key=lambda figures: figures["agents"])
            result["sweep"] = {"highest_meeting_slo": max((n for n, ok in tried.items() if ok), default=0)}
    finally:
        if workers is not None:
            await workers.close()
        await runtime.aclose()
        if telemetry is not None:
            await telemetry.close()

    def below_the_table(console: Console) -> None:
        console.print(findings(result), end="")
        console.print(fleet_findings(result), end="")
        if workers is not None:
            console.print(workers_table(result))
        if len(result["levels"]) >= 2:
            console.print(chart(result["levels"]))

    return report(result, json_out, out, err, below_the_table)


def report(
    result: dict[str, Any], json_out: bool, out: Console, err: Console, below_the_table: Callable[[Console], None]
) -> int:
    """Save a run's result, print it (as JSON, or the table and what goes under it) and where it was saved; the
    exit status: 1 if a level had errors."""
    from hotloop import paths
    from hotloop.headless.bench_view import table

    path = save(result, paths.data_dir() / "bench")
    if json_out:
        out.print_json(data=result)
    else:
        out.print(table(result))
        below_the_table(out)
    err.print(f"saved {path} · hotloop bench compare {path.stem} OTHER", highlight=False, soft_wrap=True)
    return 1 if any(level["errors"] for level in result["levels"]) else 0
