"""How an agent runs its turns, as one options object; its defaults are the config's.

The config (`config/settings.py`) takes its defaults from here and `Config.agent_options()` fills one
in, so an agent built anywhere (the app, `hotloop run`, `hotloop bench`, a test) runs as the
config says unless the caller says otherwise, in code, with a reason.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.agent.prefetch import Predictor
    from hotloop.providers.conversation import ToolCall
    from hotloop.providers.server_metrics import Residency

MAX_STEPS = 25  # model requests per turn
TOOL_TIMEOUT = 120.0  # seconds; a tool that runs longer becomes an error result
MEMO_TTL = 30.0  # seconds an identical read-only call reuses its result
COMPACT_AT = 0.8  # the share of the context window past which the conversation is compacted

# Given the agent, a call and its (long) result: a shorter result for the context, and a note saying so; or None.
Summarizer = Callable[["Agent", "ToolCall", str], Awaitable[tuple[str, str] | None]]


@dataclass(frozen=True)
class AgentOptions:
    """A turn's limits and the latency engine's switches, and the parts a session hands every agent it makes.

    The parts are not settings: options that differ only in them still compare equal.
    """

    max_steps: int = MAX_STEPS
    tool_timeout: float = TOOL_TIMEOUT
    max_tokens: int | None = None  # the answer's cap, sent with every request; None: the provider's
    early_dispatch: bool = True  # a call starts once its arguments are complete, while the model writes on
    parallel_tools: bool = True  # off only to measure what running a step's calls together saves
    memo_ttl: float = MEMO_TTL  # 0: off
    prefetch: bool = True  # predicted read-only calls run while the model thinks
    compact_at: float | None = COMPACT_AT  # inside a turn, compact before a step past this; None: never
    summarize: Summarizer | None = field(default=None, compare=False)  # long tool results, by the helper tier
    residency: Callable[[], Residency | None] | None = field(default=None, compare=False)  # the followed server's
    predictor: Predictor | None = field(default=None, compare=False)  # prefetch's, shared: learning outlives one agent
