"""How full a conversation's context is, from the provider's own counts: what its last step left in it.

A step leaves its prompt and its answer in the context (the next request holds both), as the
server counted them; a compaction leaves the compacted conversation's size, from the server's
counts plus a small estimate (`estimated` until the next step reports). A step whose usage wasn't
reported leaves the figure unknown rather than wrong. The same rule serves a live session and a resumed one: the
resumed session's logged events are observed in order.
"""

from __future__ import annotations

from hotloop.agent.events import AgentEvent, Compacted, StepFinished
from hotloop.agent.figures import context_use
from hotloop.config import ContextSettings


class ContextMeter:
    """The tokens the last step (or compaction) left in the context; None when unknown."""

    def __init__(self) -> None:
        self.used: int | None = None
        self.estimated = False  # part of `used` is an estimate (a compaction's result, until a step reports)

    def observe(self, event: AgentEvent) -> None:
        if isinstance(event, Compacted):
            self.used, self.estimated = event.after_tokens, True
        elif isinstance(event, StepFinished):
            self.estimated = False
            usage = event.usage
            known = usage is not None and usage.prompt_total is not None
            self.used = (usage.prompt_total or 0) + (usage.output or 0) if usage is not None and known else None

    def of(self, window: int | None) -> tuple[int, int] | None:
        """The tokens used and the window; None if either is unknown."""
        return (self.used, window) if self.used is not None and window else None

    def due(self, settings: ContextSettings, window: int | None) -> str | None:
        """Why the conversation should be compacted before the next turn, if it should."""
        measured = self.of(window)
        if not settings.auto_compact or measured is None or measured[0] < settings.compact_at * measured[1]:
            return None
        return (
            f"compacting the conversation first: {context_use(*measured, self.estimated)}, past [context] compact_at = "
            f"{settings.compact_at:g}"
        )
