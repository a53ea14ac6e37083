"""`hotloop bench --trace`: recorded sessions replayed as closed-loop agents, by their request shapes.

Each traced session becomes one agent that sends its steps in order: each request's prompt is the last one's,
plus the answer, plus filler for what the session added (tool results, the next prompt), so its prompt length is
the recorded one and its prefix reuse is the real agent's. Its answer is as long as the recorded one: it asks for
that many words, capped at that many tokens. Between requests it waits as the session did (tools within a turn,
the user between turns), scaled by `time_scale`. No tokenizer is needed: two probe requests measure what the
server's chat template adds to a first request and to an exchange, and every reported prompt corrects the next.
The filler is words of one token each, drawn from a generator seeded by the session and the copy, so a copy's
prefix is its own, and the same on every run.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from hotloop import InputError
from hotloop.agent.events import AgentEvent, StepFinished, TurnFinished
from hotloop.agent.step import StepAccumulator
from hotloop.agent.step_fold import folded
from hotloop.headless.bench import Level, report, results, staggered
from hotloop.providers.conversation import AssistantMessage, ChatRequest, Message, UserMessage
from hotloop.providers.events import UsageLedger
from hotloop.sessions.store import read_session

if TYPE_CHECKING:
    from collections.abc import Callable

    from rich.console import Console

    from hotloop.config import Choice
    from hotloop.providers.base import Provider

# Short, common, lowercase words: one token each in the simulator's tokenizer (a word of up to 8 letters with its
# space) and in the usual BPE vocabularies, and none of the words the simulator's planner acts on.
# fmt: off
WORDS = (
    "apple", "bread", "chair", "dance", "eagle", "field", "grape", "house", "island", "jacket", "kettle", "lemon",
    "meadow", "north", "ocean", "pencil", "quiet", "river", "stone", "table", "umbrella", "valley", "window",
    "yellow", "zebra", "amber", "button", "candle", "desert", "engine", "forest", "garden", "harbor", "letter",
    "marble", "night", "orange", "planet", "rabbit", "silver", "tiger", "velvet", "winter", "basket", "copper",
    "dragon", "falcon", "ginger", "hammer", "jungle", "lantern", "mirror", "needle", "oyster", "pepper", "ribbon",
    "saddle", "thunder", "violin", "walnut", "anchor", "blossom", "cactus",
)
# fmt: on
SLO_TTFT = 2.0  # seconds to the first byte: an interactive agent's user sees nothing before it
SLO_STEP = 30.0  # seconds from a request to its answer's end (tool time excluded: the server doesn't spend it)


@dataclass(frozen=True)
class TracedStep:
    """One recorded request: its prompt and output tokens, what the cache read, and the client's time before it
    (tools within a turn, the user's think time before a turn's first step)."""

    turn: int
    prompt: int
    output: int
    cache_read: int
    gap: float
    new_turn: bool


@dataclass(frozen=True)
class Trace:
    name: str
    steps: list[TracedStep]
    skipped: int  # steps whose usage the session doesn't have: they can't be replayed

    @classmethod
    def load(cls, path: Path) -> Trace:
        """A session log's requests: `ResponseFinished` where logged (its time is the answer's end), else
        `StepFinished` less its tools."""
        steps: list[TracedStep] = []
        skipped = 0
        ended: float | None = None
        turn: int | None = None
        logged = read_session(path)
        for step in folded(logged.events):
            end, usage = step.answered, step.usage
            if end is None:
                continue  # no answer: the request failed, or the log ends before it
            if usage is None or usage.prompt_total is None or usage.output is None or step.started is None:
                skipped += 1
            else:
                gap = max(step.started.ts - ended, 0.0) if ended is not None else 0.0
                steps.append(
                    TracedStep(
                        step.turn, usage.prompt_total, usage.output, usage.cache_read or 0, gap, step.turn != turn
                    )
                )
            turn, ended = step.turn, end
        return cls(logged.header.id, steps, skipped)

    @property
    def turns(self) -> int:
        return sum(step.new_turn for step in self.steps)

    def recorded(self) -> dict[str, Any]:
        """What the session did, as the result records it."""
        prompt = sum(step.prompt for step in self.steps)
        return {
            "session": self.name,
            "turns": self.turns,
            "steps": len(self.steps),
            "skipped": self.skipped,
            "prompt_tokens": prompt,
            "output_tokens": sum(step.output for step in self.steps),
            "cache_hit": sum(step.cache_read for step in self.steps) / prompt if prompt else None,
        }


@dataclass
class Calibration:
    """What the server's chat template adds, in tokens: to a first request beyond its words, and to an exchange
    beyond the answer's tokens and the new words. Measured by two probes; each reported prompt corrects it."""

    first: int
    exchange: int


def filler(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(max(words, 0)))


def ask(rng: random.Random, output: int, words: int) -> UserMessage:
    """A user message of `words` filler words that asks for an answer of `output` words (the simulator writes them
    on request; its pattern wants two digits or more, and the cap cuts the answer to `output` tokens)."""
    return UserMessage(f"{filler(rng, words)}\nAnswer in {max(output, 10)} words.")


@dataclass
class Sent:
    """One request's figures: the step's books for `Level.figures`, and what the replay needs."""

    step: StepFinished
    text: str


async def send(provider: Provider, system: str, messages: list[Message], output: int, key: str) -> Sent:
    """One streamed request, timed as the agent times its steps (`StepAccumulator`)."""
    request = ChatRequest(system, (), tuple(messages), max_tokens=max(output, 1), cache_key=key)
    stream = StepAccumulator(started=time.perf_counter(), cap=provider.cap(request))
    async for event in provider.stream(request):
        stream.take(event, time.perf_counter())
    model_time = time.perf_counter() - stream.started
    step = StepFinished(
        turn=0,
        step=0,
        usage=stream.usage,
        ttft=stream.ttft(),
        decode_tps=stream.decode_tps(per_delta=provider.protocol.traits.per_delta),
        model_time=model_time,
        wall=model_time,
        tool_count=0,
        tool_sum=0.0,
        tool_wall=0.0,
        finish_reason=stream.finish_reason,
        figures_by=stream.timings.source if stream.timings else "",
    )
    return Sent(step, "".join(stream.text))


def _prompt(usage: UsageLedger | None) -> int | None:
    return usage.prompt_total if usage is not None else None


async def calibrate(provider: Provider) -> Calibration:
    """Two requests on a prefix of their own: a first request, then one exchange more."""
    rng = random.Random(uuid.uuid4().hex)
    system = filler(rng, 16)
    messages: list[Message] = [ask(rng, 10, 16)]
    first = await send(provider, system, messages, 10, "trace-probe")
    messages += [AssistantMessage(first.text), ask(rng, 10, 16)]
    second = await send(provider, system, messages, 10, "trace-probe")
    one, two, out = _prompt(first.step.usage), _prompt(second.step.usage), first.step.usage
    if one is None or two is None or out is None or out.output is None:
        # The user can point the bench at another server, hence an input error: one line, no traceback.
        raise InputError(f"{provider.name} reports no prompt or output tokens: a trace can't be sized on it")
    return Calibration(first=one - 32, exchange=two - one - out.output - 16)


@dataclass
class Replay:
    """One agent's replay of a trace: its events, and what it waited on."""

    trace: Trace
    copy: int
    nonce: str  # the run and level: a copy's prefix is its own, not one an earlier level or run left in the cache
    events: list[AgentEvent] = field(default_factory=list)
    sent: list[int | None] = field(default_factory=list)  # each request's prompt tokens, as the server reported them
    tools: float = 0.0
    think: float = 0.0

    async def run(
        self, provider: Provider, calibration: Calibration, time_scale: float, emit: Callable[[AgentEvent], None]
    ) -> None:
        rng = random.Random(f"{self.nonce}/{self.trace.name}/{self.copy}")
        key = f"trace-{self.trace.name}-{self.copy}-{uuid.uuid4().hex[:8]}"
        first, exchange = calibration.first, calibration.exchange
        system, messages = "", list[Message]()
        last: tuple[int, int] | None = None  # the last request's prompt and output tokens, as reported
        turn_started, steps_in_turn = time.perf_counter(), 0
        steps = self.trace.steps
        for n, traced in enumerate(steps):
            if traced.new_turn:
                if n:
                    self._finish_turn(emit, steps[n - 1].turn, turn_started, steps_in_turn)
                    self.think += traced.gap * time_scale
                    await asyncio.sleep(traced.gap * time_scale)
                turn_started, steps_in_turn = time.perf_counter(), 0
            words = traced.prompt - last[0] - last[1] - exchange if last is not None else -1
            continued = words >= 0
            if not continued:
                # A first request, or a prompt shorter than the history (a compaction): a new conversation of
                # the recorded size, most of it in the system prompt as an agent's is.
                words = min(32, max(traced.prompt - first, 0) // 2)
                system = filler(rng, traced.prompt - first - words)
                messages = []
            messages.append(ask(rng, traced.output, words))
            sent = await send(provider, system, messages, traced.output, key)
            messages.append(AssistantMessage(sent.text))
            usage = sent.step.usage
            self.sent.append(usage.prompt_total if usage is not None else None)
            if usage is None or usage.prompt_total is None or usage.output is None:
                last = None  # nothing to size the next request by: it starts a conversation of its own
            else:
                # What the template added, as this request had it: the next request is sized by it.
                if continued and last is not None:
                    exchange = usage.prompt_total - last[0] - last[1] - words
                else:
                    first = usage.prompt_total - len(system.split()) - words
                last = (usage.prompt_total, usage.output)
            following = steps[n + 1] if n + 1 < len(steps) else None
            tool = following.gap * time_scale if following is not None and not following.new_turn else 0.0
            await asyncio.sleep(tool)
            self.tools += tool
            steps_in_turn += 1
            emit(
                msgspec.structs.replace(
                    sent.step,
                    turn=traced.turn,
                    step=steps_in_turn,
                    wall=sent.step.wall + tool,
                    tool_sum=tool,
                    tool_wall=tool,
                )
            )
        if steps:
            self._finish_turn(emit, steps[-1].turn, turn_started, steps_in_turn)

    def _finish_turn(self, emit: Callable[[AgentEvent], None], turn: int, started: float, steps: int) -> None:
        emit(TurnFinished(turn=turn, reason="answer", steps=steps, wall=time.perf_counter() - started))


def figures(level: Level, replays: list[Replay], slo_ttft: float, slo_step: float) -> dict[str, Any]:
    """The bench's figures, plus goodput, where the time went, the recorded cache hit and how close the prompts
    came to the recorded ones."""
    books = level.figures()
    steps = [[e for e in r.events if isinstance(e, StepFinished)] for r in replays]
    good = sum(
        len(agent) == len(r.trace.steps)
        and all(s.ttft is not None and s.ttft <= slo_ttft and s.model_time <= slo_step for s in agent)
        for r, agent in zip(replays, steps, strict=True)
    )
    recorded = [(traced.prompt, sent) for r in replays for traced, sent in zip(r.trace.steps, r.sent, strict=False)]
    read = sum(t.cache_read for r in replays for t in r.trace.steps)
    prompt = sum(t.prompt for r in replays for t in r.trace.steps)
    books.update(
        {
            # Steps that got fewer tokens than recorded: the model ended its answer before the cap.
            "cut_off": sum(
                s.usage is not None and (s.usage.output or 0) < t.output
                for r, agent in zip(replays, steps, strict=True)
                for s, t in zip(agent, r.trace.steps, strict=False)
            ),
            "goodput": good / len(replays) if replays else None,
            "good_sessions": good,
            "slo": {"ttft_s": slo_ttft, "step_s": slo_step},
            "waiting_s": {
                "model": sum(s.model_time for agent in steps for s in agent),
                "tools": sum(r.tools for r in replays),
                "think": sum(r.think for r in replays),
            },
            "original_cache_hit": read / prompt if prompt else None,
            "recorded_steps": sum(len(r.trace.steps) for r in replays),
            # The farthest a request's prompt came from the recorded one, as a share of it.
            "prompt_error": max(
                (abs(sent - want) / want for want, sent in recorded if want and sent is not None), default=None
            ),
        }
    )
    return books


async def run_level(
    provider: Provider,
    traces: list[Trace],
    copies: int,
    calibration: Calibration,
    time_scale: float,
    on_event: Callable[[AgentEvent], None],
) -> tuple[Level, list[Replay]]:
    """Every trace replayed `copies` times at once, each copy on a prefix of its own."""
    nonce = uuid.uuid4().hex
    replays = [Replay(trace, copy, nonce) for copy in range(copies) for trace in traces]
    level = Level(len(replays))

    async def one(replay: Replay) -> None:
        level.events.append(replay.events)

        def emit(event: AgentEvent) -> None:
            replay.events.append(event)
            on_event(event)

        try:
            await replay.run(provider, calibration, time_scale, emit)
        except Exception as error:  # one agent's failure is a figure of the level, not the end of the bench
            level.errors.append(f"{replay.trace.name} copy {replay.copy + 1}: {error}")

    started = time.perf_counter()
    level.ramp = await staggered(lambda n: one(replays[n]), len(replays))
    level.wall = time.perf_counter() - started
    return level, replays


@dataclass(frozen=True)
class TraceOptions:
    time_scale: float = 1.0
    slo_ttft: float = SLO_TTFT
    slo_step: float = SLO_STEP


async def bench_trace(
    choice: Choice,
    ramp: list[int],
    traces: list[Trace],
    options: TraceOptions,
    json_out: bool,
    out: Console | None = None,
) -> int:
    """Each level replays every trace as many times as the ramp says; print and save as `hotloop bench` does."""
    from rich.console import Console
    from rich.live import Live

    from hotloop.config import load_config, resolve
    from hotloop.core.runtime import Runtime
    from hotloop.headless.bench_view import Progress, trace_findings

    config, choice = load_config().pointed_at(choice)
    target = resolve(config, choice)
    err, out = Console(stderr=True), out or Console()
    runtime = Runtime(config)
    try:
        provider = await runtime.connect(target)
        calibration = await calibrate(provider)
        names = ", ".join(trace.name for trace in traces)
        # No task to hold the level to: a trace's steps are what the session did, and `recorded_steps` counts them.
        turns = sum(t.turns for t in traces)
        task = {"turns": turns, "steps": None, "tool_calls": None}
        result = results(provider, f"trace {names}", task)
        result["traces"] = [trace.recorded() for trace in traces]
        result["time_scale"] = options.time_scale
        # The progress bar counts turns per agent: traces of different lengths are shown at their mean.
        progress = Progress([n * len(traces) for n in ramp], max(turns // len(traces), 1), result)
        with Live(progress, console=err, refresh_per_second=4, transient=True, auto_refresh=err.is_terminal):
            for copies in ramp:
                progress.start(copies * len(traces))
                level, replays = await run_level(
                    provider, traces, copies, calibration, options.time_scale, progress.take
                )
                result["levels"].append(figures(level, replays, options.slo_ttft, options.slo_step))
    finally:
        await runtime.aclose()
    return report(result, json_out, out, err, lambda console: console.print(trace_findings(result), end=""))
