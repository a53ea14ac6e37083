"""Figures as people read them: token counts, seconds, and the one-line summary of a step.

A figure the provider did not report reads "not reported". It is never shown as 0.
"""

from __future__ import annotations

from hotloop.agent.events import StepFinished
from hotloop.providers.events import UsageLedger

NOT_REPORTED = "not reported"


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
    return f"prompt {usage.prompt_total:,} ({' · '.join(parts)})"


def step_summary(step: StepFinished) -> str:
    """One line for a finished step.

    e.g. `step 2 · prompt 2,351 (cache read 2,320 · uncached 31) · out 117 · ttft 0.04 s · 96 tok/s ·
    tools 3 in 1.01 s (sum 3.02 s)`.
    """
    parts = [f"step {step.step}", *([step.route] if step.route else []), prompt_breakdown(step.usage)]
    if step.usage is not None and step.usage.distrust is None:
        parts.append(f"out {tokens(step.usage.output)}")
    if step.ttft is not None:
        parts.append(f"ttft {seconds(step.ttft)}")
    if step.decode_tps is not None:
        parts.append(f"{step.decode_tps:,.0f} tok/s")
    if step.tool_count:
        plural = "s" if step.tool_count != 1 else ""
        parts.append(f"tool{plural} {step.tool_count} in {seconds(step.tool_wall)} (sum {seconds(step.tool_sum)})")
    if step.cache_note:
        parts.append(step.cache_note)
    return " · ".join(parts)


class SessionTotals:
    """Running totals over a session's steps, for the status bar."""

    def __init__(self) -> None:
        self.steps = 0
        self.prompt = 0
        self.output = 0
        self.unreported = 0  # steps whose usage was missing
        self._cache_read = 0
        self._cache_prompt = 0  # prompt tokens of the steps that reported a cache figure

    def add(self, step: StepFinished) -> None:
        self.steps += 1
        usage = step.usage
        if usage is None or usage.prompt_total is None:
            self.unreported += 1
            return
        self.prompt += usage.prompt_total
        self.output += usage.output or 0
        # A prompt below the cache minimum could not be cached at all: it is not a miss.
        if usage.cache_read is not None and usage.below_cache_min is None:
            self._cache_read += usage.cache_read
            self._cache_prompt += usage.prompt_total

    @property
    def cache_hit(self) -> float | None:
        """cache-read ÷ prompt total over the steps that reported it and could be cached; None if none."""
        return self._cache_read / self._cache_prompt if self._cache_prompt else None
