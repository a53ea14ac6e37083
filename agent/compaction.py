"""Compaction that keeps the cache: the conversation summarized by its own model, then replaced by the summary.

The summary request is the conversation's next request as the agent would send it (system
prompt, tools, every message, byte for byte) with one more user message: the instruction. So
it reads the whole conversation from the provider's cache and prefills only the instruction.
The compacted conversation keeps the static prefix (system prompt and tools) as it was, so the
first request after it reads that from the cache too; only the summary and the new prompt are
prefilled. A naive compaction (a fresh summarization prompt over a transcript, then a fresh
conversation) prefills everything twice: `benchmarks/compaction.py` measures both.

`Compaction` is the agent's part that does it: the summary request, the check before each step of a turn, and
the counts a compacted conversation's size is measured from.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

import msgspec

from hotloop.agent.events import AgentEvent, Compacted, Notice, ResponseFinished, SideRequest, StepStarted
from hotloop.agent.figures import stop_words
from hotloop.agent.step import StepAccumulator
from hotloop.providers.base import Provider
from hotloop.providers.conversation import ChatRequest, Message, UserMessage
from hotloop.providers.errors import ProviderError
from hotloop.providers.events import ProviderWarning, ServerHint, UsageLedger

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent

INSTRUCTION = (
    "The conversation above is about to be compacted: write the summary that will replace it. Don't call any "
    "tool. Keep what the work needs to go on: the user's requests and constraints, decisions made and why, "
    "files read or changed (with paths), commands run and their outcome, errors met, and what is left to do. "
    "Drop pleasantries and repetition. Reply with the summary only, in Markdown."
)
OPENING = (
    "This conversation was compacted to save context: its earlier turns are summarized below. "
    "Go on from this summary; ask the user if something you need is missing from it."
)
# English text in the BPE tokenizers of OpenAI, Anthropic, Llama and Qwen: ~4 bytes a token.
BYTES_PER_TOKEN = 4
# How servers refuse a request longer than the context: vLLM and OpenAI, Anthropic, llama.cpp, SGLang.
_TOO_LONG = re.compile(
    r"maximum context length|context_length_exceeded|prompt is too long|exceeds the available context size"
    r"|exceed_context_size_error|longer than the model's context length",
    re.IGNORECASE,
)


def summary_messages(messages: list[Message]) -> list[Message]:
    """The summary request's messages: the conversation's own, then the instruction."""
    return [*messages, UserMessage(INSTRUCTION)]


def compacted_messages(summary: str) -> list[Message]:
    """The conversation after compaction: one user message holding the summary.

    The next prompt follows it as another user message; Anthropic merges the two into one turn,
    and the summary stays the start of every request's messages from then on.
    """
    return [UserMessage(_opened(summary))]


def _opened(summary: str) -> str:
    return f"{OPENING}\n\n<summary>\n{summary.strip()}\n</summary>"


def compacted_size(
    frame: ChatRequest,
    summary_tokens: int | None,
    anchor: tuple[int, int] | None,
    asked: tuple[ChatRequest, int | None],
) -> int | None:
    """The compacted conversation's size in tokens, from the server's counts where it gave them.

    `frame` is the compacted request with an empty summary (system prompt, tools, the opening).
    `anchor` is the conversation's first counted request (its encoded size and the prompt tokens
    the server reported, less any summary it began with): its count holds the system prompt, the
    tools and the chat template's tokens as the server counted them, so only what differs between
    the two (the opening against the first prompt, a few dozen tokens) is estimated, at
    BYTES_PER_TOKEN. The summary's tokens are the server's count of its output. Without an
    anchor (a resumed conversation), the frame is scaled by the summary request `asked`'s own
    bytes per token, which misses the template's tokens.
    """
    if summary_tokens is None:
        return None
    if anchor is not None:
        return anchor[1] + round((len(msgspec.json.encode(frame)) - anchor[0]) / BYTES_PER_TOKEN) + summary_tokens
    request, asked_tokens = asked
    if asked_tokens is None:
        return None
    return scaled_tokens(frame, len(msgspec.json.encode(request)), asked_tokens) + summary_tokens


def summary_bytes(summary: str) -> int:
    """The encoded size of a summary as a compacted conversation holds it: what its first request's size is less."""
    return len(msgspec.json.encode(_opened(summary))) - len(msgspec.json.encode(_opened("")))


def scaled_tokens(request: ChatRequest, known_bytes: int, known_tokens: int) -> int:
    """`request`'s tokens, estimated from a request of the same conversation: its encoded size
    and the token count the provider reported for it."""
    return round(known_tokens * len(msgspec.json.encode(request)) / known_bytes) if known_bytes else 0


def grown_tokens(size: int, known_bytes: int, known_tokens: int) -> int:
    """The tokens of a request of `size` encoded bytes, estimated from the one before it in the
    conversation: its reported count, plus what was added since at BYTES_PER_TOKEN. The added part
    (an answer, tool results) is mostly text, which a tokenizer counts more sparsely than the tool
    schemas of the prefix."""
    return known_tokens + max(size - known_bytes, 0) // BYTES_PER_TOKEN


def written_summary(stream: StepAccumulator) -> str:
    """The summary the request wrote; ProviderError if it was cut off or empty."""
    if (stopped := stop_words(stream.finish_reason)) is not None:
        raise ProviderError(f"the summary was {stopped}")
    if not (summary := stream.message().text.strip()):
        raise ProviderError("the model wrote no summary")
    return summary


def compaction_failed(
    trigger: Literal["manual", "auto"], provider: Provider, stream: StepAccumulator, error: Exception
) -> SideRequest:
    """A summary request that failed, as the one line that says so and counts what the server billed for it."""
    return SideRequest(
        kind="compaction",
        why=trigger,
        provider=provider.name,
        model=provider.model,
        usage=stream.usage,
        model_time=time.perf_counter() - stream.started,
        outcome="failed",
        error=f"{error}; the conversation is unchanged",
    )


@dataclass(frozen=True)
class LogCounts:
    """What a session's log tells of its conversation since it began or was last compacted.

    `summary`: the summary it began with, its encoded size and its tokens ((0, 0): none; None: not
    counted). `first`: its first step's provider, model and the prompt tokens the server counted.
    """

    summary: tuple[int, int] | None = (0, 0)
    compacted: bool = False
    steps: int = 0
    first: tuple[str, str, int] | None = None


def log_counts(events: Iterable[AgentEvent]) -> LogCounts:
    """Read a log for `resumed_anchor`."""
    found, where = LogCounts(), ("", "")
    for event in events:
        if isinstance(event, Compacted):
            tokens = event.usage.output if event.usage else None
            found = LogCounts((summary_bytes(event.summary), tokens) if tokens is not None else None, compacted=True)
        elif isinstance(event, StepStarted):
            found, where = replace(found, steps=found.steps + 1), (event.provider, event.model)
        elif isinstance(event, ResponseFinished) and found.steps == 1 and event.usage and event.usage.prompt_total:
            found = replace(found, first=(*where, event.usage.prompt_total))
    return found


def resumed_anchor(
    log: LogCounts | None,
    messages: list[Message],
    using: tuple[str, str],
    request: Callable[[list[Message]], ChatRequest],
) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
    """A resumed conversation's anchor and summary (the agent's `_anchor`, `_summary`), from its log.

    The first request since the conversation began or was compacted held the summary (if any) and
    the first prompt: rebuilt, its size beside the count the log kept is the anchor a live session
    would have. Without a step yet, the next one sets it; counted by another model, none is known.
    """
    if log is None:
        return None, None
    if log.steps == 0:
        return None, log.summary
    opening = 2 if log.compacted else 1
    first = messages[:opening]
    if (
        log.first is None
        or log.summary is None
        or log.first[:2] != using
        or len(first) < opening
        or not all(isinstance(message, UserMessage) for message in first)
    ):
        return None, None
    return (len(msgspec.json.encode(request(first))) - log.summary[0], log.first[2] - log.summary[1]), log.summary


def with_fix(refusal: str) -> str:
    """A provider's refusal, with what to do when it was for a conversation longer than the model's context."""
    if _TOO_LONG.search(refusal):
        return f"{refusal} · the conversation no longer fits the context: /compact summarizes it, /new starts afresh"
    return refusal


def too_long(step: int, estimate: int, reserved: int | None, window: int, model: str) -> str | None:
    """The warning before a request of ≈ `estimate` tokens (plus `reserved` for the answer) that `window` can't hold."""
    if estimate + (reserved or 0) <= window:
        return None
    answer = f" + {reserved:,} reserved for the answer" if reserved else ""
    return (
        f"step {step}'s request is ≈ {estimate:,} tokens{answer}, more than the {window:,} tokens {model} holds: "
        "the server will likely refuse it (/compact once this turn ends, or switch to a model with a longer context)"
    )


class Compaction:
    """An agent's compaction: the summary request (`run`), the check before each step of a turn (`if_full`), and the
    counts of the conversation that say how large it is and will be once compacted."""

    def __init__(self, agent: Agent) -> None:
        self._agent = agent
        self.before = 0  # the step of this turn the last compaction ran before (0: none)
        self.sized: tuple[int, int] | None = None  # the last request's encoded size and its reported prompt tokens
        # The conversation's first counted request, its size and prompt tokens less the summary it may begin with
        # (`summary`: that summary's size and tokens; None if its count is unknown): what a compaction's
        # result is measured from, the server's count of the system prompt and tools included.
        self.anchor: tuple[int, int] | None = None
        self.summary: tuple[int, int] | None = (0, 0)

    def counted(self, size: int, usage: UsageLedger | None) -> None:
        """A request of `size` encoded bytes was answered with `usage`: what the next one's size is estimated from."""
        if usage is not None and usage.prompt_total:
            self.sized = (size, usage.prompt_total)
            if self.anchor is None and self.summary is not None:
                self.anchor = (size - self.summary[0], usage.prompt_total - self.summary[1])

    def estimate(self, size: int) -> int | None:
        """The tokens of a request of `size` encoded bytes, from the last one's count; None before any."""
        return grown_tokens(size, *self.sized) if self.sized is not None else None

    async def run(
        self,
        trigger: Literal["manual", "auto"],
        context_tokens: int | None = None,
        window: int | None = None,
        before_estimated: bool = False,
    ) -> Compacted:
        """Replace the conversation by a summary its own model writes at the end of it.

        The conversation changes only once the summary is whole: an error, a cut-off or empty
        summary, or a cancel leaves it as it was. `before_estimated`: `context_tokens` counts a step
        not sent yet (the last step's count plus an estimate of what was added since).
        """
        agent = self._agent
        agent.prepare()
        lifetimes = bool(agent.provider.protocol.traits.cache.lifetimes)
        request = agent.request(summary_messages(agent.messages))
        agent.explainer.fingerprint(request, agent.provider.name, agent.provider.model, time.time())
        stream = StepAccumulator(
            started=time.perf_counter(), cap=agent.provider.cap(request), window=agent.context_window()
        )
        try:
            async with agent.interactive():
                async for event in agent.provider.stream(request):
                    if not isinstance(event, (ServerHint, ProviderWarning)):
                        stream.take(event, time.perf_counter())
            summary = written_summary(stream)
        except ProviderError as error:
            agent.emit(compaction_failed(trigger, agent.provider, stream, error))  # said once, billed usage counted
            raise
        messages = compacted_messages(summary)
        summary_tokens = stream.usage.output if stream.usage else None
        compacted = Compacted(
            trigger=trigger,
            turns=agent.turn,
            summary=summary,
            provider=agent.provider.name,
            model=agent.provider.model,
            usage=stream.usage,
            ttft=stream.ttft(),
            model_time=time.perf_counter() - stream.started,
            context_tokens=context_tokens,
            after_tokens=compacted_size(
                agent.request(compacted_messages("")),
                summary_tokens,
                self.anchor,
                (request, stream.usage.prompt_total if stream.usage else None),
            ),
            window=window,
            before_estimated=before_estimated,
            cache_note=agent.explainer.explain(
                stream.usage, agent.messages, lifetimes, residency=agent.server_residency()
            ),
        )
        agent.go_on_from(messages)
        self.anchor = None
        self.summary = (summary_bytes(summary), summary_tokens) if summary_tokens is not None else None
        agent.provider.prune(messages)  # the turns summarized are sent no more
        agent.explainer.compacted()
        agent.warmth.record(agent.provider.name, agent.provider.model, stream.usage)
        agent.emit(compacted)
        return compacted

    async def if_full(self, step: int, size: int) -> bool:
        """Inside a turn: compact before a step whose request (`size` bytes encoded) would fill `compact_at` of the
        window; True if it did.

        Tool results grow a long turn past the window with no turn boundary in sight, so the check
        is per step, on the request as it would go (the last step's count plus what was added since).
        A failed compaction leaves the conversation as it was, and the step goes out anyway. So does
        a step right after a compaction: one step that fills the window again would have it compact
        in a loop (a tool result too long for any summary to help); the server's refusal says so.
        """
        agent = self._agent
        window = agent.context_window()
        compact_at = agent.options.compact_at
        if step == 1 or compact_at is None or not window or (estimate := self.estimate(size)) is None:
            return False
        if estimate < compact_at * window or self.before == step - 1:
            return False
        agent.emit(
            Notice(
                level="info",
                message=f"compacting before step {step}: its request would fill ≈ {estimate / window:.0%} of the "
                f"{window:,}-token window, past [context] compact_at = {compact_at:g}",
            )
        )
        self.before = step
        try:
            await self.run("auto", estimate, window, before_estimated=True)
        except ProviderError:
            return False
        return True
