"""The simulated inference engine behind every wire protocol.

It turns a parsed request into a `Generation`: the prompt's token count and prefix-cache
hit, the reply, and the reply cut into timed emissions. It also keeps vLLM's counters, and
applies the faults that change what the model says (scenario.py's docstring lists them all).
Nothing here knows HTTP.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Any

from hotloop.sim.cache import BreakpointCache, CacheBlock, CacheUse, PrefixCache, block_hashes
from hotloop.sim.defaults import (
    BATCH_SLOWDOWN,
    CACHE_BLOCKS,
    CACHE_MIN_TOKENS,
    MAX_MODEL_LEN,
    PROMPT_TOKENS_DETAILS,
    SCHEDULING_POLICY,
)
from hotloop.sim.model import reply, thinking_for
from hotloop.sim.scenario import Faults, Refusal, Reply, padded, scenario_step
from hotloop.sim.template import END, Call, Turn, assistant_body, call_text, render
from hotloop.sim.tokenizer import encode, pieces


@dataclass(frozen=True)
class LatencyProfile:
    """TTFT = ttft + prefill_per_token × uncached prompt tokens; then decode_per_token per output token.

    decode_per_token is a request's pace alone on the server: `SimEngine.pace` slows it by the batch.
    """

    ttft: float
    prefill_per_token: float
    decode_per_token: float


TIERS: dict[str, LatencyProfile] = {
    "sim-fast": LatencyProfile(ttft=0.04, prefill_per_token=0.000_010, decode_per_token=0.004),
    "sim-balanced": LatencyProfile(ttft=0.12, prefill_per_token=0.000_030, decode_per_token=0.010),
    "sim-strong": LatencyProfile(ttft=0.35, prefill_per_token=0.000_080, decode_per_token=0.022),
}
DEFAULT_MODEL = "sim-balanced"
NO_LATENCY = LatencyProfile(0.0, 0.0, 0.0)


@dataclass
class SimConfig:
    models: dict[str, LatencyProfile] = field(default_factory=lambda: dict(TIERS))
    cache_blocks: int = CACHE_BLOCKS
    scenario: tuple[Reply, ...] = ()
    prompt_tokens_details: bool = PROMPT_TOKENS_DETAILS
    max_model_len: int = MAX_MODEL_LEN
    cache_min_tokens: int = CACHE_MIN_TOKENS
    # vLLM's --max-num-seqs (None: unlimited) and --scheduling-policy (fcfs or priority).
    max_running: int | None = None
    scheduling: str = SCHEDULING_POLICY
    # `hotloop sim serve --fault`: faults for every request, under a scenario step's own.
    faults: Faults = field(default_factory=Faults)
    # Continuous batching: what each other request decoding at once adds to a request's per-token time.
    batch_slowdown: float = BATCH_SLOWDOWN

    def with_latency(
        self, ttft: float | None = None, prefill_per_token: float | None = None, decode_per_token: float | None = None
    ) -> SimConfig:
        """The same config with the given latency figures applied to every model."""
        overrides = {
            key: value
            for key, value in (
                ("ttft", ttft),
                ("prefill_per_token", prefill_per_token),
                ("decode_per_token", decode_per_token),
            )
            if value is not None
        }
        return replace(self, models={name: replace(p, **overrides) for name, p in self.models.items()})


@dataclass(frozen=True)
class Emission:
    """One streamed piece of output and the decode tokens it stands for."""

    kind: str  # reasoning | text | call_start | call_args
    text: str
    tokens: int
    index: int = 0
    call: Call | None = None


@dataclass(frozen=True)
class SimRequest:
    """A request in the engine's terms, whichever wire protocol it came in.

    `blocks` is set for Anthropic requests: the prompt as content blocks with their
    breakpoints, cached explicitly. Without it, the ChatML prompt is cached as vLLM does.
    `thinking`: None sends reasoning as planned, False drops it, True makes sure there is some.
    """

    model: str
    turns: list[Turn]
    tools: list[dict[str, Any]]
    max_tokens: int | None = None
    blocks: tuple[CacheBlock, ...] | None = None
    thinking: bool | None = None
    call_ids: str = "vllm"  # or "anthropic" or "responses": the id format of the tool calls made


@dataclass
class Generation:
    model: str
    profile: LatencyProfile
    prompt_tokens: int
    cached_tokens: int
    reply: Reply
    emissions: list[Emission]
    output_tokens: int
    finish_reason: str
    request_id: str
    prompt_ids: list[int] = field(default_factory=list, repr=False)
    cache: CacheUse = field(default_factory=CacheUse)
    decoding: bool = False  # in the batch: from its first token to its end

    @property
    def prefill_seconds(self) -> float:
        uncached = self.prompt_tokens - self.cached_tokens
        return self.profile.ttft + self.profile.prefill_per_token * uncached

    @property
    def text(self) -> str:
        return "".join(e.text for e in self.emissions if e.kind == "text")

    @property
    def reasoning(self) -> str:
        return "".join(e.text for e in self.emissions if e.kind == "reasoning")

    @property
    def generated(self) -> str:
        """The decoded text of the whole output, as the chat template would show it."""
        return assistant_body(self.text, self.calls, self.reasoning)

    @property
    def calls(self) -> list[Call]:
        """Calls as generated, arguments possibly cut short by `max_tokens`."""
        found: dict[int, tuple[Call, list[str]]] = {}
        for e in self.emissions:
            if e.kind == "call_start" and e.call is not None:
                found[e.index] = (e.call, [])
            elif e.kind == "call_args":
                found[e.index][1].append(e.text)
        # Joined once: adding fragment by fragment is quadratic, and `huge_argument` makes megabytes of them.
        return [replace(call, arguments="".join(parts)) for call, parts in found.values()]

    @property
    def runs(self) -> list[list[Emission]]:
        """The emissions as the output's parts, in order: the reasoning, the text, then each call from its start."""
        runs: list[list[Emission]] = []
        for emission in self.emissions:
            kind = emission.kind
            if runs and (kind == "call_args" or kind == runs[-1][0].kind != "call_start"):
                runs[-1].append(emission)
            else:
                runs.append([emission])
        return runs

    @property
    def invalid_utf8_emission(self) -> Emission | None:
        """The emission whose chunk carries the `invalid_utf8` byte: the first text, else reasoning or arguments."""
        if not self.reply.faults.invalid_utf8:
            return None
        for kind in ("text", "reasoning", "call_args"):
            found = next((e for e in self.emissions if e.kind == kind), None)
            if found is not None:
                return found
        return None


class ModelNotFound(LookupError):
    pass


class Refused(Exception):
    """A request a `status` fault refuses, before anything is cached or counted."""

    def __init__(self, refusal: Refusal, faults: Faults) -> None:
        super().__init__(refusal.status)
        self.refusal, self.faults = refusal, faults


class SimEngine:
    """Holds the prefix cache, the scenario and the counters shared by every request.

    Decoding is continuously batched, as in vLLM: every request past its first token decodes in
    one batch, and a bigger batch makes each step longer. A request's per-token time is its
    model's `decode_per_token × (1 + batch_slowdown × others)`, `others` being the requests
    decoding with it, read anew before each chunk. Decoding is bound by memory bandwidth (each
    step reads the weights once, whatever the batch), so a step grows slowly with the batch:
    the default 2% a request is roughly an 8B model on one GPU, whose inter-token latency at 32
    requests is about 1.6× that of one. So the server's tokens a second rise with the batch (20×
    at 32) while each request's latency bends up. Prefill is not slowed: its cost is the
    uncached tokens, and waiting for a slot (`max_running`) is what makes TTFT grow with load.
    """

    def __init__(self, config: SimConfig | None = None) -> None:
        from hotloop.sim.metrics import Metrics

        self.config = config or SimConfig()
        self.cache = PrefixCache(self.config.cache_blocks)
        self.breakpoints = BreakpointCache(self.config.cache_min_tokens)
        self.metrics = Metrics()
        self.decoding = 0  # requests in the batch
        self._refused: Counter[str] = Counter()  # refusals so far, per scenario step or (for --fault) per request
        for model in self.config.models:
            self.metrics.register_model(model)

    def generate(self, request: SimRequest) -> Generation:
        profile = self.config.models.get(request.model)
        if profile is None:
            raise ModelNotFound(request.model)
        prompt_ids, prompt_tokens, request_id = _prompt(request)
        answer = self._answer(request, request_id)
        if request.blocks is None:
            use = self._prefix_cache_use(prompt_ids, request.model)
        else:
            use = self.breakpoints.use(request.blocks, _model_root(request.model))
        if answer.decode_per_token is not None:
            profile = replace(profile, decode_per_token=answer.decode_per_token)
        emissions, truncated = _emissions(answer, request.max_tokens)
        finish = "length" if truncated else "tool_calls" if any(e.kind == "call_start" for e in emissions) else "stop"
        generation = Generation(
            model=request.model,
            profile=profile,
            prompt_tokens=prompt_tokens,
            cached_tokens=use.read,
            reply=answer,
            emissions=emissions,
            output_tokens=0,
            finish_reason=finish,
            request_id=request_id,
            prompt_ids=prompt_ids,
            cache=use,
        )
        # Like vLLM's completion_tokens, the count includes the end-of-message token.
        generation.output_tokens = len(encode(generation.generated)) + (0 if truncated else 1)
        self.metrics.started(request.model, prompt_tokens, use.read, self.cache)
        return generation

    def cached_prefix(self, request: SimRequest) -> int:
        """Prompt tokens of `request` this engine's caches hold now; asks without counting or refreshing anything.

        A router scores replicas by it, as llm-d's prefix-cache scorer does.
        """
        if request.blocks is not None:
            return self.breakpoints.readable(request.blocks, _model_root(request.model))
        tokens = _prompt(request)[0]
        return self.cache.peek(block_hashes(tokens, self.cache.block_size, _model_root(request.model)), len(tokens))

    def start_decoding(self, generation: Generation) -> None:
        """The request's first token is out: it joins the batch."""
        if not generation.decoding:
            generation.decoding = True
            self.decoding += 1

    def pace(self, generation: Generation) -> float:
        """Seconds a token of `generation` takes now, with the batch as it is."""
        others = self.decoding - 1 if generation.decoding else self.decoding
        return generation.profile.decode_per_token * (1 + self.config.batch_slowdown * others)

    def _leave_batch(self, generation: Generation) -> None:
        if generation.decoding:
            generation.decoding = False
            self.decoding -= 1

    def _prefix_cache_use(self, tokens: list[int], model: str) -> CacheUse:
        blocks = block_hashes(tokens, self.cache.block_size, _model_root(model))
        # Blocks count as computed once the request is scheduled, as in vLLM.
        cached = self.cache.lookup(blocks, len(tokens))
        self.cache.insert(blocks)
        return CacheUse(read=cached)

    def _answer(self, request: SimRequest, request_id: str) -> Reply:
        """The reply with its faults (a scenario step's own over --fault's); raises `Refused` for a status fault."""
        answer = self._reply(request)
        faults = answer.faults.over(self.config.faults)
        if faults.refusal is not None:
            # A step's refusals count per step, so a retry (the same step) gets through after `times`; --fault's
            # count per request.
            self._refuse_if_due(faults, f"step {scenario_step(request.turns)}" if answer.faults.refusal else request_id)
        return _padded(_with_call_ids(replace(answer, faults=faults), request_id, request.call_ids))

    def _reply(self, request: SimRequest) -> Reply:
        answer = reply(request.turns, request.tools, self.config.scenario)
        if request.thinking is False:
            return replace(answer, reasoning="")
        if request.thinking and not answer.reasoning:
            return replace(answer, reasoning=thinking_for(request.turns, answer))
        return answer

    def _refuse_if_due(self, faults: Faults, key: str) -> None:
        """Raise `Refused` while the `status` fault has refusals left (`times`) for this step or request."""
        refusal = faults.refusal
        if refusal is None or (refusal.times is not None and self._refused[key] >= refusal.times):
            return
        self._refused[key] += 1
        raise Refused(refusal, faults)

    def finish(self, generation: Generation) -> None:
        """Cache the generated tokens too (vLLM does; Anthropic caches only at breakpoints)."""
        if generation.prompt_ids:
            output = [*encode(generation.generated)]
            if generation.finish_reason != "length":
                output += encode(END)[:1]
            tokens = [*generation.prompt_ids, *output]
            self.cache.insert(block_hashes(tokens, self.cache.block_size, _model_root(generation.model)))
        self._leave_batch(generation)
        self.metrics.finished(generation.model, generation.output_tokens, generation.finish_reason, self.cache)

    def abort(self, generation: Generation) -> None:
        self._leave_batch(generation)
        self.metrics.finished(generation.model, 0, "abort", self.cache)


def _prompt(request: SimRequest) -> tuple[list[int], int, str]:
    """The prompt's token ids (none for Anthropic's, cached as blocks), its length, and the request's id."""
    if request.blocks is None:
        prompt = render(request.turns, request.tools)
        prompt_ids, prompt_tokens = prompt.tokens, len(prompt.tokens)
        fingerprint = "".join(prompt.segments)
    else:
        prompt_ids, prompt_tokens = [], sum(block.tokens for block in request.blocks)
        fingerprint = repr([block.key for block in request.blocks])
    return prompt_ids, prompt_tokens, hashlib.blake2b(fingerprint.encode(), digest_size=16).hexdigest()


def _model_root(model: str) -> int:
    """Each model has a cache of its own, as each vLLM server (or Anthropic model) does: one prompt, other hashes."""
    return int.from_bytes(hashlib.blake2b(model.encode(), digest_size=8).digest(), "big")


_CALL_ID_FORMATS = {"vllm": ("chatcmpl-tool-", 16), "anthropic": ("toolu_", 12), "responses": ("call_", 12)}


def _with_call_ids(answer: Reply, request_id: str, style: str) -> Reply:
    prefix, size = _CALL_ID_FORMATS[style]
    calls = tuple(
        replace(call, id=prefix + hashlib.blake2b(f"{request_id}:{n}".encode(), digest_size=size).hexdigest())
        for n, call in zip(_call_numbers(answer), answer.calls, strict=True)
    )
    return replace(answer, calls=calls)


def _call_numbers(answer: Reply) -> list[int]:
    """What each call's id is made from: its position, or 0 for all under `duplicate_ids`."""
    return [0 if answer.faults.duplicate_ids else n for n in range(len(answer.calls))]


def _padded(answer: Reply) -> Reply:
    """The reply with its first call's arguments grown to `huge_argument` characters."""
    size = answer.faults.huge_argument
    if not size or not answer.calls:
        return answer
    first, *rest = answer.calls
    return replace(answer, calls=(replace(first, arguments=padded(first.arguments, size)), *rest))


def _emissions(answer: Reply, max_tokens: int | None) -> tuple[list[Emission], bool]:
    """The reply as timed pieces, cut at `max_tokens` (or by `cut_arguments`), and whether it was cut."""
    planned: list[Emission] = [Emission("reasoning", p, 1) for p in pieces(answer.reasoning)]
    planned += [Emission("text", p, 1) for p in pieces(answer.text)]
    for index, call in enumerate(answer.calls):
        head, _, tail = call_text(call.name, "\0").partition("\0")
        planned.append(Emission("call_start", "", len(encode(head)), index, call))
        args = pieces(call.arguments or "{}")
        planned += [Emission("call_args", p, 1, index) for p in args[:-1]]
        # The closing `}\n</tool_call>` decodes with the last fragment and shows nothing of its own.
        planned.append(Emission("call_args", args[-1], 1 + len(encode(tail)), index))
    cut = False
    if answer.faults.cut_arguments is not None and answer.calls:
        planned, cut = _cut_arguments(planned, answer.faults.cut_arguments), True
    budget = max_tokens if max_tokens is not None else float("inf")
    emitted: list[Emission] = []
    used = 0
    for emission in planned:
        if used + emission.tokens > budget:
            return emitted, True
        emitted.append(emission)
        used += emission.tokens
    return emitted, cut


def _cut_arguments(planned: list[Emission], size: int) -> list[Emission]:
    """The pieces up to `size` characters into the first call's arguments, where the output limit hits."""
    kept: list[Emission] = []
    for emission in planned:
        if emission.kind in ("call_start", "call_args") and emission.index > 0:
            break
        if emission.kind == "call_args":
            if len(emission.text) >= size:
                if size:
                    kept.append(replace(emission, text=emission.text[:size]))
                break
            size -= len(emission.text)
        kept.append(emission)
    return kept


def invalid_byte_in(chunk: bytes, key: str) -> bytes:
    """The chunk with a 0xff byte (never valid UTF-8) at the start of its JSON string `key`, all else well formed."""
    opening = f'"{key}":"'.encode()
    return chunk.replace(opening, opening + b"\xff", 1)
