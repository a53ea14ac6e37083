"""Two design claims about the providers, measured with the real SDKs against the simulator over loopback HTTP.

docs/architecture.md says hotloop's providers (a) build the official SDK clients with
`http_client=sdk.DefaultAioHttpClient()` because it costs "about 40% less CPU per request
than the default" (the SDK's own httpx2 client), and (b) send request bytes they serialize
themselves through the client's generic `post`, and parse the event stream with msgspec,
because the typed `create()` "re-walks the whole conversation with typing introspection on
every request (17 ms at 40 messages, growing with the session)" and the SDK "builds a
pydantic object per chunk (~190 µs, against ~2 µs here)". This script measures both, side
by side, in one run:

1. CPU per streamed request, client side, with each SDK's default client and with
   `DefaultAioHttpClient()`, on the same request bytes (a 40-message conversation with
   tools): the bare `client.post(..., stream=True)` with the body drained, and hotloop's
   provider `stream()` on top of each client. Twice: with the simulator at zero latency,
   where the whole reply leaves the server in one write, and paced at 500 tokens/s, where
   each chunk is its own write and read, as from a real model.
2. Request building, CPU per request, at 10, 40 and 80 messages: the typed `create()`,
   given the very JSON hotloop sends as keyword arguments (so rendering hotloop's messages
   into dicts is not counted against it), minus the bare `post` of the same bytes, both
   over HTTP with the body drained raw; of that, the OpenAI SDK's typed walk alone
   (`async_maybe_transform`); against hotloop's `request_body`, at steady state (the
   previous step's messages already serialized) and from scratch.
3. Chunk parsing, CPU per chunk of the reply to the 40-message request: the SDK's
   `json.loads` + `construct_type` (what its stream iterator does with each event), and
   pydantic's validating `model_validate_json` for comparison, against msgspec
   `_decode_chunk` + `ChunkParser.feed` (Anthropic: `_decode_event` + `MessageParser.feed`);
   and the same in place: (typed `create()` iterated − typed `create()` drained raw) per
   chunk, against (provider `stream()` − bare `post`) per chunk.

The simulator runs in this process, in threads of its own. The figures are the CPU time of
the client's thread (`time.thread_time`); as a check, the header gives how far process CPU
minus the simulator threads' CPU strays from it. Every figure is measured once per round,
in an order that rotates from round to round; requests compared with each other (default
and aiohttp, bare and provider, typed and bytes) alternate request by request, so machine
noise hits both sides alike. The tables give the median of the round medians and the range
over rounds; ratios and differences are taken within each round.

    python benchmarks/transport.py [--rounds N] [--quick]

`--quick` (a check that it runs, its figures noise) takes a request or two per figure.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import platform
import statistics
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import date
from functools import partial
from importlib.metadata import version
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import anthropic
import httpx2
import msgspec
import openai
from anthropic._models import construct_type as anthropic_construct
from anthropic.types import RawMessageStreamEvent
from openai._models import construct_type as openai_construct
from openai._utils import async_maybe_transform
from openai.types.chat import ChatCompletionChunk, completion_create_params

from hotloop.agent.prompt import system_prompt, volatile_context
from hotloop.agent.tools.builtins import builtin_tools
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.anthropic import AnthropicProvider, MessageParser, _decode_event
from hotloop.providers.base import ProviderOptions
from hotloop.providers.chat_chunks import ChunkParser, _decode_chunk
from hotloop.providers.conversation import (
    AssistantMessage,
    ChatRequest,
    Message,
    ToolCall,
    ToolResultMessage,
    UserMessage,
)
from hotloop.providers.openai_chat import OpenAIChatProvider
from hotloop.providers.sse import SseSplitter
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.sim.engine import NO_LATENCY, SimConfig
from hotloop.sim.scenario import Reply
from hotloop.sim.template import Call

SIZES = (10, 40, 80)  # messages in the conversation, for request building
SIZE = 40  # messages in the request of the transport and chunk figures
PACED_DECODE = 0.002  # seconds per output token in the paced simulator: each chunk its own write
SDKS = ("openai", "anthropic")
TRANSPORTS = ("default", "aiohttp")
PACINGS = ("one write", "paced")
# Samples per figure per round.
REQUESTS = 12  # streamed requests (transport, zero latency)
PACED_REQUESTS = 4  # streamed requests (transport, paced: ~0.2 s each)
BUILDS = 8  # typed create(), bare post and typed walk, in turn (request building)
BODIES = 40  # hotloop request_body calls
STREAMS = 12  # whole replies parsed chunk by chunk
IN_PLACE = 6  # typed create() iterated (chunk parsing in place)

# The reply the simulator gives at every step: a short preface, then one tool call (~90 chunks).
REPLY = Reply(
    text=(
        "The loader reads the file once and validates nothing until a key is used, so a typo in the config "
        "only shows up at the first request. I'll read the schema module next, then the tests that cover "
        "the loader, to see where an early check fits."
    ),
    calls=(
        Call(id="", name="read_file", arguments=json.dumps({"path": "config/schema.py", "offset": 1, "limit": 120})),
    ),
)


# -- the conversation ---------------------------------------------------------------------------


def code_listing(path: str, lines: int) -> str:
    """A read_file result: numbered lines of plausible Python."""
    body = [
        f"{n:>5}  {text}"
        for n, text in enumerate(
            (
                f"def load_{path.replace('/', '_').removesuffix('.py')}_{k}(raw: dict[str, Any]) -> Settings:"
                if k % 6 == 0
                else f"    value = raw.get('key_{k}', DEFAULTS['key_{k}'])  # see docs/config.md#key-{k}"
                for k in range(lines)
            ),
            start=1,
        )
    ]
    return "\n".join(body)


def grep_listing(pattern: str, hits: int) -> str:
    return "\n".join(f"src/module_{k}.py:{10 * k + 3}:    if {pattern}(raw, 'key_{k}'):" for k in range(hits))


def conversation(size: int, tools: ToolRegistry) -> ChatRequest:
    """A request of `size` messages as an agent session builds it: a task, then steps of one or two tool calls.

    Steps cycle: read a file, grep, read two files in parallel (two results). The last
    message is a tool result, as in every request after the first of a turn.
    """
    steps: list[int] = []  # messages per step: 2 (one call) or 3 (two calls)
    while sum(steps) + (3 if len(steps) % 3 == 2 else 2) <= size - 1:
        steps.append(3 if len(steps) % 3 == 2 else 2)
    leftover = size - 1 - sum(steps)
    if leftover == 2:
        steps.append(2)
    elif leftover == 1:
        steps[steps.index(2)] = 3
    task = "Make the config loader validate keys when it loads the file, not at first use, and run the tests."
    messages: list[Message] = [UserMessage(task + volatile_context(Path("/home/dev/project"), date(2026, 1, 5)))]
    for n, calls in enumerate(steps):
        if calls == 3:
            paths = (f"src/module_{n}.py", f"tests/test_module_{n}.py")
            made = tuple(
                ToolCall(f"call_{n:08d}{k:016x}", "read_file", json.dumps({"path": path}))
                for k, path in enumerate(paths)
            )
            messages.append(AssistantMessage(text="", tool_calls=made))
            messages += [ToolResultMessage(c.id, c.name, code_listing(p, 30)) for c, p in zip(made, paths, strict=True)]
        elif n % 3 == 1:
            call = ToolCall(f"call_{n:08d}{0:016x}", "grep", json.dumps({"pattern": f"validate_{n}"}))
            messages.append(AssistantMessage(text=f"Where is validate_{n} called?", tool_calls=(call,)))
            messages.append(ToolResultMessage(call.id, call.name, grep_listing(f"validate_{n}", 12)))
        else:
            path = f"src/config_{n}.py"
            call = ToolCall(f"call_{n:08d}{0:016x}", "read_file", json.dumps({"path": path}))
            messages.append(AssistantMessage(text=f"I'll read {path} first.", tool_calls=(call,)))
            messages.append(ToolResultMessage(call.id, call.name, code_listing(path, 40)))
    assert len(messages) == size, (size, len(messages))
    return ChatRequest(system=system_prompt(), tools=tools.specs(), messages=tuple(messages))


# -- clocks and figures -------------------------------------------------------------------------


class CpuClocks:
    """The client thread's CPU time, and process CPU minus the simulator threads' (the check)."""

    def __init__(self) -> None:
        servers = [t.ident for t in threading.enumerate() if t.name == "hotloop-sim" and t.ident is not None]
        self._servers = [time.pthread_getcpuclockid(ident) for ident in servers]
        assert self._servers, "the simulator threads were not found"

    def read(self) -> tuple[float, float]:
        return time.thread_time(), time.process_time() - sum(time.clock_gettime(c) for c in self._servers)


class Stat(NamedTuple):
    median: float
    low: float
    high: float

    @staticmethod
    def of(values: list[float]) -> Stat:
        return Stat(statistics.median(values), min(values), max(values))


@dataclass
class Figures:
    """Per-round medians by figure name (seconds), and the clock check of every HTTP figure."""

    clocks: CpuClocks
    rounds: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    check: list[tuple[float, float]] = field(default_factory=list)  # (client thread, process − simulator)
    blocks: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))
    warming: bool = False  # run every measurement once, record nothing

    def stat(self, name: str) -> Stat:
        return Stat.of(self.rounds[name])

    def per_round(self, combine: Callable[..., float], *names: str) -> Stat:
        """A figure computed within each round from others (a ratio, a difference)."""
        return Stat.of([combine(*values) for values in zip(*(self.rounds[n] for n in names), strict=True)])

    async def http(self, works: Mapping[str, Callable[[], Awaitable[object]]], samples: int) -> None:
        """Median CPU of each request in `works`, taken in turn (the order alternating), after one untimed call each.

        Both clocks are kept, for the check.
        """
        for work in works.values():
            await work()
        if self.warming:
            return
        client: dict[str, list[float]] = defaultdict(list)
        process: dict[str, list[float]] = defaultdict(list)
        for n in range(samples):
            for name, work in list(works.items())[:: 1 if n % 2 == 0 else -1]:
                thread0, process0 = self.clocks.read()
                await work()
                thread1, process1 = self.clocks.read()
                client[name].append(thread1 - thread0)
                process[name].append(process1 - process0)
        for name in works:
            self.rounds[name].append(statistics.median(client[name]))
            self.check.append((statistics.median(client[name]), statistics.median(process[name])))

    def cpu(
        self, name: str, work: Callable[[], object], samples: int, setup: Callable[[], object] = lambda: None
    ) -> None:
        """Median CPU of `work` (pure computation on this thread), `setup` run untimed before each call."""
        times = []
        for _ in range(1 if self.warming else samples):
            setup()
            started = time.thread_time()
            work()
            times.append(time.thread_time() - started)
        if not self.warming:
            self.rounds[name].append(statistics.median(times))


# -- the two sides ------------------------------------------------------------------------------

Provider: TypeAlias = OpenAIChatProvider | AnthropicProvider


def hotloop_provider(sdk: str, sim: EmbeddedSimulator) -> Provider:
    """hotloop's provider as the runtime builds it: the SDK client on `DefaultAioHttpClient()`."""
    if sdk == "anthropic":
        return AnthropicProvider(ProviderOptions(name="sim", model="sim-balanced", base_url=sim.url, max_retries=0))
    return OpenAIChatProvider(ProviderOptions(name="sim", model="sim-balanced", base_url=sim.base_url, max_retries=0))


async def on_default_client(provider: Provider, sim: EmbeddedSimulator) -> Provider:
    """The same provider on the SDK's default client (httpx2), built with the same options but `http_client`."""
    await provider._client.close()
    options: dict[str, Any] = {"api_key": "no-key", "max_retries": 0, "timeout": httpx2.Timeout(600.0, connect=10.0)}
    if isinstance(provider, AnthropicProvider):
        provider._client = anthropic.AsyncAnthropic(base_url=sim.url, **options)
    else:
        provider._client = openai.AsyncOpenAI(base_url=sim.base_url, **options)
    return provider


def transport_name(provider: Provider) -> str:
    return type(provider._client._client).__name__


def forget(provider: Provider) -> None:
    """Drop what the provider serialized before (its private caches): the next body is built from scratch."""
    provider._rendered.clear()
    provider._tools = None


async def bare_post(provider: Provider, body: bytes) -> int:
    """The same bytes through the provider's SDK client, with nothing of hotloop's on top; body blocks read."""
    response = await provider._client.post(provider.path, content=body, cast_to=httpx2.Response, stream=True)
    blocks = 0
    async for _ in response.aiter_bytes():
        blocks += 1
    await response.aclose()
    return blocks


async def hotloop_stream(provider: Provider, request: ChatRequest) -> None:
    async for _ in provider.stream(request):
        pass


async def typed_create_raw(provider: Provider, arguments: dict[str, Any]) -> None:
    """The typed `create()` (request building, sending), the streamed body drained as bytes, nothing parsed."""
    client: Any = provider._client
    resource = client.messages if isinstance(provider, AnthropicProvider) else client.chat.completions
    async with resource.with_streaming_response.create(**arguments) as response:
        async for _ in response.iter_bytes():
            pass


async def typed_create_iterated(provider: Provider, arguments: dict[str, Any]) -> None:
    """The typed `create()` and the SDK's stream iterator over its typed chunks."""
    client: Any = provider._client
    resource = client.messages if isinstance(provider, AnthropicProvider) else client.chat.completions
    async for _ in await resource.create(**arguments):
        pass


async def reply_chunks(provider: Provider, body: bytes) -> list[bytes]:
    """The `data` of every event of the reply to `body`, as hotloop reads them ([DONE] left out)."""
    response = await provider._client.post(provider.path, content=body, cast_to=httpx2.Response, stream=True)
    splitter = SseSplitter()
    chunks = [data async for block in response.aiter_bytes() for data in splitter.feed(block)]
    await response.aclose()
    return [data for data in [*chunks, *splitter.end()] if data != b"[DONE]"]


def sdk_parse(sdk: str, chunks: list[bytes]) -> None:
    """What the SDK's stream iterator does with each event's data (`_process_response_data`, not strict)."""
    if sdk == "anthropic":
        for data in chunks:
            anthropic_construct(type_=RawMessageStreamEvent, value=json.loads(data))
    else:
        for data in chunks:
            openai_construct(type_=ChatCompletionChunk, value=json.loads(data))


def pydantic_validate(chunks: list[bytes]) -> None:
    for data in chunks:
        ChatCompletionChunk.model_validate_json(data)


def hotloop_parse(sdk: str, chunks: list[bytes]) -> None:
    if sdk == "anthropic":
        messages = MessageParser()
        for data in chunks:
            messages.feed(_decode_event(data))
        messages.finish()
    else:
        parser = ChunkParser()
        for data in chunks:
            parser.feed(_decode_chunk(data))
        parser.finish()


# -- the run ------------------------------------------------------------------------------------


@dataclass
class Setup:
    """Everything measured: providers by (sdk, pacing, transport), requests and bodies by (sdk, size)."""

    providers: dict[tuple[str, str, str], Provider]
    builders: dict[str, Provider]  # for request_body alone, with caches of their own
    requests: dict[int, ChatRequest]
    bodies: dict[tuple[str, int], bytes]
    chunks: dict[str, list[bytes]]
    transports: dict[tuple[str, str], str]
    same_json: bool


async def counted_post(provider: Provider, body: bytes, blocks: list[int]) -> None:
    blocks.append(await bare_post(provider, body))


async def bodies_alone(figures: Figures, builder: Provider, request: ChatRequest, key: str) -> None:
    """hotloop's request_body: at steady state (the previous step's messages serialized before), and from scratch."""
    previous = msgspec.structs.replace(request, messages=request.messages[:-2])

    def steady() -> None:
        forget(builder)
        builder.request_body(previous)

    figures.cpu(f"{key}/body warm", lambda: builder.request_body(request), BODIES, steady)
    figures.cpu(f"{key}/body cold", lambda: builder.request_body(request), BODIES, lambda: forget(builder))


async def parsing_alone(figures: Figures, sdk: str, chunks: list[bytes]) -> None:
    figures.cpu(f"{sdk}/parse sdk", lambda: sdk_parse(sdk, chunks), STREAMS)
    figures.cpu(f"{sdk}/parse hotloop", lambda: hotloop_parse(sdk, chunks), STREAMS)
    if sdk == "openai":
        figures.cpu("openai/parse validate", lambda: pydantic_validate(chunks), STREAMS)


def probes(setup: Setup, figures: Figures) -> list[Callable[[], Awaitable[None]]]:
    """One closure per group of figures measured together; a round runs each once."""
    found: list[Callable[[], Awaitable[None]]] = []
    works: dict[str, Callable[[], Awaitable[object]]]
    # 1. CPU per streamed request: bare and provider, default and aiohttp, request by request in turn.
    for sdk in SDKS:
        for pacing in PACINGS:
            works = {}
            for transport in TRANSPORTS:
                provider, key = setup.providers[sdk, pacing, transport], f"{sdk}/{pacing}/{transport}"
                works[f"{key}/bare"] = partial(counted_post, provider, setup.bodies[sdk, SIZE], figures.blocks[key])
                works[f"{key}/provider"] = partial(hotloop_stream, provider, setup.requests[SIZE])
            found.append(partial(figures.http, works, PACED_REQUESTS if pacing == "paced" else REQUESTS))
    # 2. Request building at each size, over the zero-latency simulator and hotloop's client.
    for sdk in SDKS:
        provider = setup.providers[sdk, "one write", "aiohttp"]
        for size in SIZES:
            body, key = setup.bodies[sdk, size], f"{sdk}/{size}"
            arguments = json.loads(body)
            works = {
                f"{key}/create": partial(typed_create_raw, provider, arguments),
                f"{key}/post": partial(bare_post, provider, body),
            }
            if sdk == "openai":  # the typed walk alone, in turn with the two requests
                params = completion_create_params.CompletionCreateParamsStreaming
                works[f"{key}/transform"] = partial(async_maybe_transform, arguments, params)
            found.append(partial(figures.http, works, BUILDS))
            found.append(partial(bodies_alone, figures, setup.builders[sdk], setup.requests[size], key))
    # 3. Chunk parsing, alone and in place.
    for sdk in SDKS:
        provider = setup.providers[sdk, "one write", "aiohttp"]
        arguments = json.loads(setup.bodies[sdk, SIZE])
        found.append(partial(parsing_alone, figures, sdk, setup.chunks[sdk]))
        in_place: dict[str, Callable[[], Awaitable[object]]] = {
            f"{sdk}/create iterated": partial(typed_create_iterated, provider, arguments),
            f"{sdk}/create raw": partial(typed_create_raw, provider, arguments),
            f"{sdk}/provider": partial(hotloop_stream, provider, setup.requests[SIZE]),
            f"{sdk}/post": partial(bare_post, provider, setup.bodies[sdk, SIZE]),
        }
        found.append(partial(figures.http, in_place, IN_PLACE))
    return found


async def prepare(tools: ToolRegistry, flat: EmbeddedSimulator, paced: EmbeddedSimulator) -> Setup:
    providers: dict[tuple[str, str, str], Provider] = {}
    for sdk in SDKS:
        for pacing in PACINGS:
            sim = flat if pacing == "one write" else paced
            providers[sdk, pacing, "aiohttp"] = hotloop_provider(sdk, sim)
            providers[sdk, pacing, "default"] = await on_default_client(hotloop_provider(sdk, sim), sim)
    requests = {size: conversation(size, tools) for size in SIZES}
    bodies = {
        (sdk, size): providers[sdk, "one write", "aiohttp"].request_body(requests[size])
        for sdk in SDKS
        for size in SIZES
    }
    chunks = {sdk: await reply_chunks(providers[sdk, "one write", "aiohttp"], bodies[sdk, SIZE]) for sdk in SDKS}
    # The typed create(), given hotloop's JSON as arguments, must send the same request.
    same = True
    for sdk in SDKS:
        provider = providers[sdk, "one write", "aiohttp"]
        await typed_create_raw(provider, json.loads(bodies[sdk, SIZE]))
        same &= json.loads(flat.server.requests[-1].body) == json.loads(bodies[sdk, SIZE])
    transports = {(sdk, t): transport_name(providers[sdk, "one write", t]) for sdk in SDKS for t in TRANSPORTS}
    builders = {sdk: hotloop_provider(sdk, flat) for sdk in SDKS}
    return Setup(providers, builders, requests, bodies, chunks, transports, same)


async def measure(rounds: int) -> tuple[Setup, Figures]:
    tools = ToolRegistry(builtin_tools())
    config = SimConfig(scenario=(REPLY,) * 200)  # the same reply at every step of any conversation
    flat = EmbeddedSimulator(config.with_latency(**vars(NO_LATENCY))).start()
    paced = EmbeddedSimulator(config.with_latency(0.0, 0.0, PACED_DECODE)).start()
    try:
        setup = await prepare(tools, flat, paced)
        figures = Figures(CpuClocks())
        everything = probes(setup, figures)
        figures.warming = True
        for probe in everything:  # every measurement once: imports, connections, caches
            await probe()
        figures.warming = False
        for blocks in figures.blocks.values():
            blocks.clear()  # in place: the probes hold these lists
        gc.collect()
        gc.freeze()
        for n in range(rounds):
            start = n * len(everything) // rounds
            for probe in everything[start:] + everything[:start]:
                await probe()
        for provider in [*setup.providers.values(), *setup.builders.values()]:
            await provider.aclose()
    finally:
        flat.stop()
        paced.stop()
    return setup, figures


# -- the report ---------------------------------------------------------------------------------


def spread(stat: Stat, scale: float = 1.0) -> str:
    """`median (low–high)` in ms or µs, picked by the median."""
    median, low, high = (v * scale for v in stat)
    if abs(median) >= 0.001:
        return f"{median * 1000:.2f} ms ({low * 1000:.2f}–{high * 1000:.2f})"
    return f"{median * 1e6:.1f} µs ({low * 1e6:.1f}–{high * 1e6:.1f})"


def row(*cells: str, widths: tuple[int, ...]) -> str:
    return "  " + "".join(f"{cell:<{width}}" for cell, width in zip(cells, widths, strict=False)).rstrip()


def header(setup: Setup, figures: Figures, rounds: int, elapsed: float, load: float) -> None:
    cpu = platform.processor() or platform.machine()
    with contextlib.suppress(OSError, StopIteration):
        cpu = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if "model name" in line
        )
    packages = ", ".join(
        f"{p} {version(p)}" for p in ("openai", "anthropic", "httpx2", "aiohttp", "pydantic", "msgspec")
    )
    client = [c for c, _ in figures.check]
    rest = [p - c for c, p in figures.check]
    print("transport: docs/architecture.md's claims (a) the aiohttp transport, (b) bytes + msgspec, measured")
    print(
        f"command: python benchmarks/transport.py --rounds {rounds}   (run as: {sys.executable} {' '.join(sys.argv)})"
    )
    print(f"machine: {os.cpu_count()} CPUs ({cpu}), Python {platform.python_version()}; {packages}")
    print(f"load average (1 min) before/after: {load:.2f}/{os.getloadavg()[0]:.2f}; took {elapsed:.0f} s")
    print(
        f"rounds: {rounds}, each measuring every figure once, in rotating order; per figure per round: "
        f"{REQUESTS} streamed requests\n  ({PACED_REQUESTS} paced), {BUILDS} create()/post/typed walk triples, "
        f"{BODIES} request_body calls, {STREAMS} whole replies parsed ({IN_PLACE} in place)"
    )
    print("figures: median of the round medians (min–max over rounds); ratios and differences taken per round")
    print(
        "clock: CPU time of the client thread (time.thread_time); the simulator serves from threads of its own.\n"
        "  check, process CPU − simulator threads − client thread, per request: "
        f"median {statistics.median(rest) * 1e6:+.0f} µs (min {min(rest) * 1e6:+.0f}, max {max(rest) * 1e6:+.0f}), "
        f"requests of {min(client) * 1000:.2f}–{max(client) * 1000:.2f} ms"
    )
    sizes = ", ".join(f"{sdk} {len(setup.bodies[sdk, SIZE]):,} B" for sdk in SDKS)
    replies = ", ".join(f"{sdk} {len(setup.chunks[sdk])} events" for sdk in SDKS)
    print(f"request: {SIZE} messages, {len(setup.requests[SIZE].tools)} tools ({sizes}); reply: {replies}")
    print(f"typed create() given hotloop's JSON sends the same JSON: {'yes' if setup.same_json else 'NO'}")


def transport_table(setup: Setup, figures: Figures) -> dict[str, Stat]:
    """(a); returns the aiohttp/default ratios by row, for the summary."""
    print()
    print("(a) CPU per streamed request, client side, same bytes: the SDK's default client vs DefaultAioHttpClient()")
    print("    docs: 'about 40% less CPU per request than the default'")
    for sdk in SDKS:
        print(f"    {sdk}: default = {setup.transports[sdk, 'default']}, aiohttp = {setup.transports[sdk, 'aiohttp']}")
    widths = (10, 38, 26, 26, 20, 18)
    print(row("", "", "default (httpx2)", "DefaultAioHttpClient", "aiohttp/default", "saved", widths=widths))
    ratios = {}
    for sdk in SDKS:
        for pacing in PACINGS:
            blocks = "/".join(f"{statistics.median(figures.blocks[f'{sdk}/{pacing}/{t}']):.0f}" for t in TRANSPORTS)
            for way, label in (("bare", f"bare post, {pacing} ({blocks} blocks)"), ("provider", "provider stream()")):
                default, aio = (f"{sdk}/{pacing}/{t}/{way}" for t in TRANSPORTS)
                ratio = ratios[f"{sdk} {pacing} {way}"] = figures.per_round(lambda d, a: a / d, default, aio)
                saved = figures.per_round(lambda d, a: d - a, default, aio)
                print(
                    row(
                        sdk if label.startswith("bare") and pacing == PACINGS[0] else "",
                        label,
                        spread(figures.stat(default)),
                        spread(figures.stat(aio)),
                        f"{ratio.median:.2f} ({ratio.low:.2f}–{ratio.high:.2f})",
                        f"{1 - ratio.median:.0%}, {saved.median * 1000:.2f} ms",
                        widths=widths,
                    )
                )
    print(
        f"    one write: the simulator at zero latency, the whole reply in one write; paced: {1 / PACED_DECODE:,.0f} "
        "tokens/s, each chunk\n    its own write, as from a real model. blocks: aiter_bytes() blocks per response, "
        "default/aiohttp. saved: 1 − ratio, and default − aiohttp."
    )
    return ratios


def building_table(setup: Setup, figures: Figures) -> None:
    print()
    print("(b1) request building, CPU per request: the typed create() vs hotloop's request_body bytes")
    print("    docs: 'the typed create() re-walks the whole conversation ... (17 ms at 40 messages, growing)'")
    widths = (31, 26, 26, 24, 24, 14)
    print(
        row(
            "",
            "create() − post(bytes)",
            "of which the typed walk",
            "request_body, steady",
            "request_body, cold",
            "create/steady",
            widths=widths,
        )
    )
    for sdk in SDKS:
        for size in SIZES:
            key = f"{sdk}/{size}"
            overhead = figures.per_round(lambda c, p: c - p, f"{key}/create", f"{key}/post")
            walk = spread(figures.stat(f"{key}/transform")) if f"{key}/transform" in figures.rounds else "none"
            ratio = figures.per_round(lambda c, p, w: (c - p) / w, f"{key}/create", f"{key}/post", f"{key}/body warm")
            print(
                row(
                    f"{sdk} {size} messages ({len(setup.bodies[sdk, size]) / 1000:.0f} kB)",
                    spread(overhead),
                    walk,
                    spread(figures.stat(f"{key}/body warm")),
                    spread(figures.stat(f"{key}/body cold")),
                    f"{ratio.median:,.0f}×",
                    widths=widths,
                )
            )
    print(
        "    create() gets hotloop's wire JSON as its arguments (rendering messages into dicts not counted); it and\n"
        "    post(bytes) run over HTTP, the body drained raw. typed walk: async_maybe_transform (anthropic's create() "
        "has none).\n    steady: the previous step's messages already serialized, as in a session; cold: all of them."
    )


def parsing_table(setup: Setup, figures: Figures) -> None:
    print()
    print(f"(b2) chunk parsing, CPU per chunk of the reply to the {SIZE}-message request")
    print("    docs: 'builds a pydantic object per chunk (~190 µs, against ~2 µs here)'")
    widths = (10, 52, 25, 25, 12)
    print(row("", "", "SDK", "hotloop (msgspec)", "SDK/hotloop", widths=widths))
    for sdk in SDKS:
        n = len(setup.chunks[sdk])
        alone = figures.per_round(lambda s, h: s / h, f"{sdk}/parse sdk", f"{sdk}/parse hotloop")
        sdk_place = figures.per_round(lambda i, r: i - r, f"{sdk}/create iterated", f"{sdk}/create raw")
        ours = figures.per_round(lambda p, b: p - b, f"{sdk}/provider", f"{sdk}/post")
        place = figures.per_round(
            lambda i, r, p, b: (i - r) / max(p - b, 1e-9),
            f"{sdk}/create iterated",
            f"{sdk}/create raw",
            f"{sdk}/provider",
            f"{sdk}/post",
        )
        print(
            row(
                sdk,
                "alone: json.loads + construct_type | decode + feed",
                spread(figures.stat(f"{sdk}/parse sdk"), 1 / n),
                spread(figures.stat(f"{sdk}/parse hotloop"), 1 / n),
                f"{alone.median:,.0f}×",
                widths=widths,
            )
        )
        if sdk == "openai":
            validate = figures.per_round(lambda v, h: v / h, "openai/parse validate", "openai/parse hotloop")
            print(
                row(
                    "",
                    "alone: ChatCompletionChunk.model_validate_json",
                    spread(figures.stat("openai/parse validate"), 1 / n),
                    "",
                    f"{validate.median:,.0f}×",
                    widths=widths,
                )
            )
        print(
            row(
                "",
                "in place, over HTTP",
                spread(sdk_place, 1 / n),
                spread(ours, 1 / n),
                f"{place.median:,.0f}×",
                widths=widths,
            )
        )
    print(
        "    construct_type: what the SDKs' stream iterators build from each event (not strict: no validation).\n"
        "    in place: SDK = (create() iterated − create() drained raw) / events, so SSE decoding + json.loads + "
        "construct_type;\n    hotloop = (provider stream() − bare post) / events, SSE split, decode, feed, events "
        "and request_body included;\n    the four requests in turn, on DefaultAioHttpClient, zero latency."
    )


def summary(setup: Setup, figures: Figures, ratios: dict[str, Stat]) -> None:
    n = len(setup.chunks["openai"])
    print()
    print("against the claims:")
    print("  (a) 'about 40% less CPU per request' — DefaultAioHttpClient saves, bare post / provider stream():")
    for sdk in SDKS:
        saved = "; ".join(
            f"{pacing} "
            + " / ".join(f"{1 - ratios[f'{sdk} {pacing} {way}'].median:.0%}" for way in ("bare", "provider"))
            for pacing in PACINGS
        )
        print(f"      {sdk}: {saved}")
    overhead = figures.per_round(lambda c, p: c - p, f"openai/{SIZE}/create", f"openai/{SIZE}/post")
    walk = figures.stat(f"openai/{SIZE}/transform")
    growth = ", ".join(
        f"{figures.per_round(lambda c, p: c - p, f'openai/{size}/create', f'openai/{size}/post').median * 1000:.1f}"
        for size in SIZES
    )
    steady = figures.stat(f"openai/{SIZE}/body warm")
    print(
        f"  (b) '17 ms at 40 messages, growing' — openai create() − post(bytes) {overhead.median * 1000:.1f} ms "
        f"(typed walk {walk.median * 1000:.1f} ms) at {SIZE}; {growth} ms at {', '.join(map(str, SIZES))} messages; "
        f"request_body {steady.median * 1e6:.0f} µs"
    )
    sdk_alone = figures.stat("openai/parse sdk").median / n
    ours_alone = figures.stat("openai/parse hotloop").median / n
    sdk_place = figures.per_round(lambda i, r: i - r, "openai/create iterated", "openai/create raw").median / n
    ours_place = figures.per_round(lambda p, b: p - b, "openai/provider", "openai/post").median / n
    print(
        f"  (b) '~190 µs per chunk, against ~2 µs' — openai {sdk_alone * 1e6:.0f} µs alone, {sdk_place * 1e6:.0f} µs "
        f"in place; hotloop {ours_alone * 1e6:.1f} µs alone, {ours_place * 1e6:.1f} µs in place"
    )


def report(setup: Setup, figures: Figures, rounds: int, elapsed: float, load: float) -> None:
    header(setup, figures, rounds, elapsed, load)
    ratios = transport_table(setup, figures)
    building_table(setup, figures)
    parsing_table(setup, figures)
    summary(setup, figures, ratios)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds, each measuring every figure once (default 7)")
    parser.add_argument("--quick", action="store_true", help="a check that it runs: a request or two per figure")
    args = parser.parse_args()
    if args.quick:
        global REQUESTS, PACED_REQUESTS, BUILDS, BODIES, STREAMS, IN_PLACE
        REQUESTS, PACED_REQUESTS, BUILDS, BODIES, STREAMS, IN_PLACE = 2, 1, 2, 2, 2, 2
    load = os.getloadavg()[0]
    started = time.perf_counter()
    setup, figures = asyncio.run(measure(args.rounds))
    report(setup, figures, args.rounds, time.perf_counter() - started, load)


if __name__ == "__main__":
    main()
