"""Figures as people read them: token counts, seconds, and the one-line summary of a step.

A figure the provider did not report reads "not reported". It is never shown as 0.
"""

from __future__ import annotations

import re

from hotloop.agent.cache_explainer import CacheReads
from hotloop.agent.events import Compacted, ResponseFinished, SideRequest, StepFinished, StepStarted
from hotloop.agent.pricing import CostTotals, StepPricer
from hotloop.providers.events import UsageLedger

NOT_REPORTED = "not reported"
CUT_OFF = "cut off by the output limit"
WINDOW_FULL = "cut off by the context window"
_ENDED = frozenset({"", "stop", "tool_calls", "function_call"})  # the model ended its message itself


def stop_words(reason: str) -> str | None:
    """What stopped an answer the model didn't end itself, in words: the output limit, the context window (which
    a larger output cap can't help), the content filter or the server's own reason; None if the model ended it."""
    if reason in _ENDED:
        return None
    if reason == "length":
        return CUT_OFF
    if reason == "context_window":
        return WINDOW_FULL
    return "stopped by the content filter" if reason == "content_filter" else f"stopped by the server ({reason})"


def rate(per_second: float) -> str:
    """`95`, `9.4`, `0.43`: whole numbers from 10 on, two significant figures below, so a slow rate never reads 0."""
    return f"{per_second:,.0f}" if per_second >= 10 else f"{per_second:.2g}"


def short_model(model: str) -> str:
    """A model id that is a file's path (llama.cpp names a model by its .gguf) as the file's name, for tight places."""
    if model.startswith(("/", "~", ".")) or model.endswith(".gguf"):
        return re.split(r"[/\\]", model)[-1]
    return model


def counted(count: int, noun: str) -> str:
    """`1 turn`, `2 turns`, `1,024 tokens`: a count and its noun, singular or plural as the count asks."""
    return f"{count:,} {noun}{'' if count == 1 else 's'}"


def context_use(used: int, window: int, estimated: bool = False) -> str:
    """`ctx 61% of 200k`: how full the context window is after the last step (`ctx ≈ 61%`: partly estimated)."""
    # Windows are sized in binary (32,768 is "32k", 131,072 "128k") or decimal (200,000) thousands.
    size = (
        f"{window // 1024}k" if window % 1024 == 0 else f"{window / 1000:.0f}k" if window >= 10_000 else f"{window:,}"
    )
    return f"ctx {'≈ ' if estimated else ''}{used / window:.0%} of {size}"


def tokens(count: int | None) -> str:
    return NOT_REPORTED if count is None else f"{count:,}"


def seconds(value: float) -> str:
    return f"{value:.2f} s"


def prompt_breakdown(usage: UsageLedger | None) -> str:
    """`prompt 2,351 (cache read 2,320 · uncached 31)`, with "not reported" where it applies."""
    if usage is None:
        return f"usage {NOT_REPORTED}"
    if usage.distrust is not None:
        return f"usage not trustworthy (server said {usage.distrust})"
    if usage.prompt_total is None:
        return f"prompt {NOT_REPORTED}"
    if usage.below_cache_min is not None:
        return f"prompt {usage.prompt_total:,} (below cache minimum {usage.below_cache_min:,}: not cached)"
    if usage.cache_read is None:
        return f"prompt {usage.prompt_total:,} (cache {NOT_REPORTED})"
    parts = [f"cache read {usage.cache_read:,}"]
    if usage.cache_write is not None:
        parts.append(f"write {usage.cache_write:,}")
    parts.append(f"uncached {tokens(usage.uncached)}")
    return f"prompt {usage.prompt_total:,} ({' · '.join(parts)}){iterations(usage)}"


def iterations(usage: UsageLedger) -> str:
    """` · compaction: read 55,096 · uncached 100 · out 83`: the server-side iterations besides the message."""
    said = []
    for part in usage.parts:
        if part.kind == "message":
            continue
        figures = [
            f"{name} {value:,}"
            for name, value in (
                ("read", part.cache_read),
                ("write", part.cache_write),
                ("uncached", part.uncached),
                ("out", part.output),
            )
            if value
        ]
        said.append(f"{part.kind}: {' · '.join(figures) or 'nothing'}")
    return "".join(f" · {text}" for text in said)


def timing(response: ResponseFinished | StepFinished) -> list[str]:
    """`ttft 0.54 s (llama.cpp's prefill 0.31 s)`, `95 tok/s (llama.cpp's)` or `96 tok/s measured`.

    TTFT is hotloop's, to the response's first byte; a server that reports its own prefill time
    gets it shown beside, and a server that reports its decode rate gets its own in place of
    hotloop's measurement, each named.
    """
    parts = []
    if response.ttft is not None:
        prefill = response.server_prefill
        beside = f" ({response.figures_by}'s prefill {seconds(prefill)})" if prefill is not None else ""
        parts.append(f"ttft {seconds(response.ttft)}{beside}")
    if response.decode_tps is not None:
        by = f"({response.figures_by}'s)" if response.figures_by else "measured"
        parts.append(f"{rate(response.decode_tps)} tok/s {by}")
    if (stopped := stop_words(response.finish_reason)) is not None:
        parts.append(stopped)
    if isinstance(response, StepFinished) and response.cut:
        parts.append(response.cut)  # "cancelled": its figures are what the provider billed before the stop
    return parts


def tool_phase(count: int, ran: float, summed: float, wrote: float | None = None) -> str:
    """`3 tools ran for 1.02 s (sum 3.01 s, 3.0× from parallelism) · the model wrote for 0.84 s`.

    `ran` is the time during which at least one tool ran, and `wrote` the model's streaming: named
    apart, because early-dispatched tools run while the model still writes the calls after them,
    and one figure spanning both read as tools that had become slower by running together.
    """
    said = f"{counted(count, 'tool')} ran for {seconds(ran)}"
    if count > 1:
        # Below 1.05× the calls did not overlap in any way worth a figure (they were instant, or one was).
        overlap = f", {summed / ran:.1f}× from parallelism" if ran > 0 and summed / ran >= 1.05 else ""
        said += f" (sum {seconds(summed)}{overlap})"
    return said if wrote is None else f"{said} · the model wrote for {seconds(wrote)}"


def model_writing(step: StepFinished) -> float | None:
    """Seconds from the response's first byte to its end: the model writing; None if nothing arrived."""
    return max(step.model_time - step.ttft, 0.0) if step.ttft is not None else None


def step_summary(step: StepFinished) -> str:
    """One line for a finished step.

    e.g. `step 2 · prompt 2,351 (cache read 2,320 · uncached 31) · out 117 · ttft 0.04 s · 96 tok/s ·
    3 tools ran for 1.01 s (sum 3.02 s, 3.0× from parallelism) · the model wrote for 0.84 s`.
    """
    parts = [f"step {step.step}", *([step.route] if step.route else []), prompt_breakdown(step.usage)]
    if step.usage is not None and step.usage.distrust is None:
        parts.append(f"out {tokens(step.usage.output)}")
    parts += timing(step)
    if step.tool_count:
        parts.append(tool_phase(step.tool_count, step.tool_wall, step.tool_sum, model_writing(step)))
    if step.cache_note:
        parts.append(step.cache_note)
    return " · ".join(parts)


def compaction_summary(compacted: Compacted) -> str:
    """One line for a compaction: what it replaced, what it frees, and what the summary request cost.

    e.g. `compacted 24 turns (auto) · context 98,211 → ≈ 3,050 tokens, ≈ 95,161 freed · summary: prompt
    98,400 (cache read 98,304 · uncached 96) · out 812 · ttft 0.31 s · 4.21 s`.
    """
    how = "" if compacted.trigger == "manual" else f" ({compacted.trigger})"
    parts = [f"compacted {counted(compacted.turns, 'turn')}{how}"]
    before, after = compacted.context_tokens, compacted.after_tokens
    if before is not None and after is not None:
        about = "≈ " if compacted.before_estimated else ""
        freed = f"≈ {before - after:,} freed" if before >= after else f"≈ {after - before:,} more"
        parts.append(f"context {about}{before:,} → ≈ {after:,} tokens, {freed}")
    elif after is not None:
        parts.append(f"context now ≈ {after:,} tokens")
    usage = compacted.usage
    parts.append(f"summary: {prompt_breakdown(usage)}")
    if usage is not None and usage.distrust is None:
        parts.append(f"out {tokens(usage.output)}")
    if compacted.ttft is not None:
        parts.append(f"ttft {seconds(compacted.ttft)}")
    parts.append(seconds(compacted.model_time))
    if compacted.cache_note:
        parts.append(compacted.cache_note)
    return " · ".join(parts)


def side_request_summary(side: SideRequest) -> str:
    """One line for a side request: what sent it, where, and what it used.

    e.g. `pre-warm (start, side request) · sim sim-balanced · prompt 12,030 (cache read 0 · write 12,030 · uncached 0)
    · out 1 · 0.46 s`.
    """
    parts = [f"{side.kind} ({side.why}, side request)", f"{side.provider} {short_model(side.model)}"]
    if side.outcome == "cancelled":
        return " · ".join([*parts, "cancelled: a prompt went out first; usage not reported"])
    if side.outcome == "failed":
        return " · ".join([*parts, f"failed: {side.error}"])
    parts.append(prompt_breakdown(side.usage))
    if side.usage is not None and side.usage.distrust is None:
        parts.append(f"out {tokens(side.usage.output)}")
    parts.append(seconds(side.model_time))
    return " · ".join(parts)


class SessionTotals:
    """Running totals over a session's steps, for the status bar.

    The cache-hit rate counts every step whose hit or miss is known: once a provider and model
    have reported a cache read (`CacheReads`), their steps without the figure read nothing,
    those before the first report included, since the server left the figure out of a miss
    then too. A step below the cache minimum could not be cached, so it is left out.
    `cost` sums the steps' dollars, priced by `pricer` (which knows each provider's server).
    """

    def __init__(self, pricer: StepPricer | None = None) -> None:
        self.pricer = pricer or StepPricer()
        self.cost = CostTotals()
        self.steps = 0
        self.prompt = 0
        self.output = 0
        self.unreported = 0  # steps whose usage was missing
        self.side_requests = 0  # pre-warms and pings: their dollars and tokens are in the totals, not in `steps`
        self.pings = 0  # of them, the keep-alive's
        self._reads = CacheReads()
        self._using = ("", "")  # the provider and model of the step in progress
        self._cache_read = 0
        self._cache_prompt = 0  # prompt tokens of the steps whose cache read is known
        self._waiting: dict[
            tuple[str, str], list[int]
        ] = {}  # prompts without a cache figure, until their server reports

    def add(self, event: StepStarted | StepFinished | Compacted | SideRequest) -> None:
        """Count a finished step, a compaction's summary request or a side request; a started step says who answers.

        A side request (a pre-warm) adds its dollars and tokens, not a step, and stays out of the hit rate: it
        writes the prefix by design, and a miss it was sent to take would read as the session's.
        """
        if isinstance(event, StepStarted):
            self._using = (event.provider, event.model)
            self.pricer.learn(event)
            return
        if isinstance(event, SideRequest):
            if event.outcome == "failed" and event.usage is None:
                return  # refused or never answered: nothing done, nothing to count
            if event.outcome != "failed":  # one that broke off after its usage: its tokens count, not a pre-warm
                self.side_requests += 1
                self.pings += event.kind == "keep-alive"
            self.cost.add(self.pricer.cost(event))
            if event.usage is not None:
                self.prompt += event.usage.prompt_total or 0
                self.output += event.usage.output or 0
            return
        if isinstance(event, Compacted):
            self._using = (event.provider, event.model)
        else:
            self.steps += 1
        self.cost.add(self.pricer.cost(event))
        usage = event.usage
        if usage is None or usage.prompt_total is None:
            self.unreported += 1
            return
        self.prompt += usage.prompt_total
        self.output += usage.output or 0
        read = self._reads.read(usage, self._using)
        if usage.below_cache_min is not None:
            return
        if read is None:
            self._waiting.setdefault(self._using, []).append(usage.prompt_total)
            return
        self._cache_read += read
        self._cache_prompt += usage.prompt_total + sum(self._waiting.pop(self._using, []))

    @property
    def cache_hit(self) -> float | None:
        """cache-read ÷ prompt total over the steps whose read is known and could be cached; None if none."""
        return self._cache_read / self._cache_prompt if self._cache_prompt else None

    @property
    def cache_unknown(self) -> int:
        """Steps the hit rate leaves out unknown: no usage, or no read from a server not known to give one."""
        return self.unreported + sum(len(prompts) for prompts in self._waiting.values())
