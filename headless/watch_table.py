"""`hotloop watch` without the app: a line per request as it finishes, a summary, or the ledger as JSON lines.

Each line is one watched request's ledger, read from its `ResponseFinished` (the event the
app's usage strip reads): the conversation, the model, the prompt split into cache read, cache
write and uncached, the output, TTFT, the decode rate, dollars (`agent/pricing.py`, priced as the
session's own steps are) and the cache explainer's verdict. `--json` writes every event instead,
as the session log encodes it, with the conversation's id first; the watch has masked every secret it
knows (the config's, each key a client sent) in the events and lines it hands on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TextIO

from hotloop.agent.events import AgentEvent, Notice, ResponseFinished, SideRequest, encode
from hotloop.agent.figures import rate, short_model, side_request_summary, tokens
from hotloop.agent.pricing import CostTotals, StepPricer, dollars
from hotloop.agent.text import inert
from hotloop.headless.printer import _escaped
from hotloop.watch.conversation import ConversationInfo

HEADING = (
    f"{'conv':<8} {'model':<18} {'read':>8} {'write':>8} {'uncached':>8} {'out':>7} {'ttft':>7} {'tok/s':>6} "
    f"{'$':>9}  verdict"
)


@dataclass
class _Totals:
    requests: int = 0
    prompt: int = 0
    read: int = 0
    output: int = 0
    unreported: int = 0  # requests whose answer carried no usage (a stream without `include_usage`)
    costs: CostTotals = field(default_factory=CostTotals)


class WatchTable:
    """A sink for `Watch`: `line` is called with each request's line as its response ends (and each notice)."""

    def __init__(self, conversations: Mapping[str, ConversationInfo], line: Callable[[str], None]) -> None:
        self._conversations = conversations
        self._line = line
        self._pricers: dict[str, StepPricer] = {}
        self._totals: dict[str, _Totals] = {}

    def __call__(self, conversation: str, event: AgentEvent) -> None:
        if isinstance(event, Notice):
            self._line(inert(f"{event.level}: {f'[{conversation}] ' if conversation else ''}{event.message}"))
            return
        info = self._conversations.get(conversation)
        if info is None:
            return
        pricer = self._pricers.get(conversation)
        if pricer is None:
            pricer = self._pricers[conversation] = info.pricer()
        pricer.learn(event)
        if isinstance(event, ResponseFinished):
            self._line(self._row(conversation, event, pricer))
        elif isinstance(event, SideRequest):  # a keep-alive's ping: a line of its own, priced
            cost = pricer.cost(event)
            priced = f" · {dollars(cost)}" if cost is not None else ""
            self._line(inert(f"[{conversation}] {side_request_summary(event)}{priced}"))

    def _row(self, conversation: str, response: ResponseFinished, pricer: StepPricer) -> str:
        usage = response.usage
        cost = pricer.price(response, *pricer.using)
        totals = self._totals.setdefault(conversation, _Totals())
        totals.requests += 1
        totals.costs.add(cost)
        if usage is None or usage.prompt_total is None:
            totals.unreported += 1
        if usage is not None:
            totals.prompt += usage.prompt_total or 0
            totals.read += usage.cache_read or 0
            totals.output += usage.output or 0
        ttft = f"{response.ttft:.2f}s" if response.ttft is not None else "—"
        tps = rate(response.decode_tps) if response.decode_tps is not None else "—"
        verdict = response.cache_note or ("side request" if self._conversations[conversation].parent else "")
        return inert(
            f"{conversation:<8} {short_model(pricer.using[1])[:18]:<18} "
            f"{_n(usage.cache_read if usage else None):>8} {_n(usage.cache_write if usage else None):>8} "
            f"{_n(usage.uncached if usage else None):>8} {_n(usage.output if usage else None):>7} {ttft:>7} "
            f"{tps:>6} {dollars(cost) if cost else '?':>9}  {verdict}"
        )

    def summary(self) -> list[str]:
        """A line per conversation (its agent, requests, cache hit, output, dollars), then the totals."""
        lines, everything = [], _Totals()
        for conversation, totals in self._totals.items():
            info = self._conversations[conversation]
            side = f", side request of {info.parent}" if info.parent else ""
            lines.append(inert(f"{conversation} {info.agent}{side}: {_said(totals)} · {info.title[:60]}"))
            everything.requests += totals.requests
            everything.prompt += totals.prompt
            everything.read += totals.read
            everything.output += totals.output
            everything.unreported += totals.unreported
            everything.costs.known += totals.costs.known
            everything.costs.priced += totals.costs.priced
            everything.costs.unknown += totals.costs.unknown
        conversations = len(self._totals)
        lines.append(f"total: {conversations} conversation{'' if conversations == 1 else 's'}, {_said(everything)}")
        return lines


def _said(totals: _Totals) -> str:
    requests = f"{totals.requests} request{'' if totals.requests == 1 else 's'}"
    if totals.requests and totals.unreported == totals.requests:  # never a prompt of 0 where the server said nothing
        return f"{requests}, usage not reported, {totals.costs}"
    hit = f"{totals.read / totals.prompt:.0%} cache hit" if totals.prompt else "no prompt tokens"
    at_least = "≥" if totals.unreported else ""  # some requests' usage unknown: a floor, as the status bar says
    unknown = f", {totals.unreported} without usage" if totals.unreported else ""
    return (
        f"{requests}{unknown}, prompt {at_least}{totals.prompt:,} ({hit}), output {at_least}{totals.output:,}, "
        f"{totals.costs}"
    )


def _n(count: int | None) -> str:
    return tokens(count) if count is not None else "—"


class JsonLines:
    """A sink for `Watch` that writes every event as a JSON line, the conversation's id first (the watch has masked
    its secrets)."""

    def __init__(self, out: TextIO) -> None:
        self._out = out

    def __call__(self, conversation: str, event: AgentEvent) -> None:
        line = b'{"conversation":"' + conversation.encode() + b'",' + encode(event)[1:]
        self._out.write(_escaped(line.decode()) + "\n")
        self._out.flush()
