"""A session's events as ACP `session/update` notifications, and what a prompt's response says of its turn.

Text and reasoning stream as `agent_message_chunk` and `agent_thought_chunk`. A tool call is announced when
its arguments are complete (`ToolCallReady`: `tool_call`, pending, with its kind, the files it touches and, for
an edit or a write, the diff it would make), then updated as it starts (in_progress), prints (its output so
far) and ends (completed or failed, with its result). The turn's end gives the stop reason, and its usage:
the draft `usage` field (only when every step reported the figures it needs) and hotloop's own ledger in
`_meta`, step by step. A figure a provider didn't report is left out, never sent as 0.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from acp import text_block, tool_content, tool_diff_content, update_agent_message_text, update_agent_thought_text
from acp.schema import (
    AgentMessageChunk,
    AgentThoughtChunk,
    ContentToolCallContent,
    Cost,
    FileEditToolCallContent,
    StopReason,
    TerminalToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStart,
    ToolKind,
    Usage,
    UsageUpdate,
    UserMessageChunk,
)

from hotloop.agent.events import (
    AgentEvent,
    Compacted,
    Notice,
    SideRequest,
    StepFinished,
    ToolFinished,
    ToolOutput,
    ToolStarted,
    TurnEnd,
    TurnFinished,
)
from hotloop.agent.pricing import Cost as StepCost
from hotloop.agent.pricing import StepPricer
from hotloop.agent.text import visible
from hotloop.providers.events import ReasoningDelta, TextDelta, ToolCallReady, UsageLedger

Update = AgentMessageChunk | AgentThoughtChunk | ToolCallStart | ToolCallProgress | UsageUpdate | UserMessageChunk
Content = ContentToolCallContent | FileEditToolCallContent | TerminalToolCallContent

KINDS: dict[str, ToolKind] = {
    "read_file": "read",
    "list_dir": "read",
    "grep": "search",
    "edit_file": "edit",
    "write_file": "edit",
    "run_shell": "execute",
}
STOP_REASONS: dict[TurnEnd, StopReason] = {
    "answer": "end_turn",
    "cut_off": "max_tokens",
    "max_steps": "max_turn_requests",
    "cancelled": "cancelled",
}
REFUSALS = frozenset({"refusal", "content_filter"})  # finish reasons that mean the model declined
OUTPUT_SHOWN = 32_000  # characters of a call's output or result a client is sent (the end of it)
DIFF_READ = 1_000_000  # bytes of a file read to show an edit whole; a larger one shows the changed text only


@dataclass
class _Call:
    kind: ToolKind
    diff: FileEditToolCallContent | None = None
    output: list[str] = field(default_factory=list)


class Updates:
    """One ACP session's events as updates; `turn_started` before a prompt, then the turn's end from it."""

    def __init__(
        self, workspace: Path, pricer: StepPricer, context: Callable[[], tuple[int, int] | None] = lambda: None
    ) -> None:
        self.workspace = workspace
        self.pricer = pricer
        self.context = context
        self.calls: dict[str, _Call] = {}
        self.steps: list[tuple[StepFinished | Compacted, StepCost | None]] = []
        self.errors: list[str] = []
        self.spent: Decimal | None = Decimal(0)  # the session's dollars so far; None once a step couldn't be priced

    def turn_started(self) -> None:
        self.steps, self.errors = [], []

    def __call__(self, event: AgentEvent) -> list[Update]:
        self.pricer.learn(event)
        if isinstance(event, TextDelta):
            return [update_agent_message_text(event.text)]
        if isinstance(event, ReasoningDelta):
            return [update_agent_thought_text(event.text)]
        if isinstance(event, ToolCallReady):
            return [self._ready(event.call_id, event.name, event.arguments)]
        if isinstance(event, ToolStarted):
            if event.call_id not in self.calls:  # run before the model asked for it (prefetch): announced now
                return [self._ready(event.call_id, event.name, event.arguments, status="in_progress")]
            return [
                ToolCallProgress(session_update="tool_call_update", tool_call_id=event.call_id, status="in_progress")
            ]
        if isinstance(event, ToolOutput) and (call := self.calls.get(event.call_id)) is not None:
            call.output.append(event.text)
            shown = tail("".join(call.output))
            return [_progress(event.call_id, content=[*_diff(call), tool_content(text_block(shown))])]
        if isinstance(event, ToolFinished):
            call = self.calls.pop(event.call_id, None) or _Call(KINDS.get(event.name, "other"))
            status = "completed" if event.status == "ok" else "failed"
            content = [*(_diff(call) if event.status == "ok" else []), tool_content(text_block(tail(event.result)))]
            return [_progress(event.call_id, status=status, content=content)]
        if isinstance(event, StepFinished | Compacted):
            return self._step(event)
        if isinstance(event, SideRequest):  # the session's dollars, not the turn's steps
            cost = self.pricer.cost(event)
            self.spent = None if cost is None or self.spent is None else self.spent + cost.total
            return []
        if isinstance(event, Notice) and event.level == "error":
            self.errors.append(event.message)
        return []

    # -- tool calls ---------------------------------------------------------------------

    def _ready(self, call_id: str, name: str, arguments: str, status: str = "pending") -> ToolCallStart:
        try:
            parsed = json.loads(arguments) if arguments else {}
        except ValueError:
            parsed = {}
        args: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
        call = self.calls[call_id] = _Call(KINDS.get(name, "other"))
        path = args.get("path")
        where = self.inside(path) if isinstance(path, str) else None
        if name in ("edit_file", "write_file") and isinstance(path, str):
            call.diff = self._diff_of(name, path, where, args)
        line = args.get("offset")
        locations = [ToolCallLocation(path=str(where), line=line if isinstance(line, int) and line >= 0 else None)]
        return ToolCallStart(
            session_update="tool_call",
            tool_call_id=call_id,
            title=title_of(name, args),
            kind=call.kind,
            status="in_progress" if status == "in_progress" else "pending",
            content=_diff(call) or None,
            locations=locations if where is not None else None,
            raw_input=args or None,
        )

    def inside(self, path: str) -> Path | None:
        """`path` as an absolute path inside the workspace (what ACP's locations and diffs name); None if outside."""
        root = self.workspace.resolve()
        try:
            resolved = (root / path).resolve()
        except (OSError, RuntimeError, ValueError):
            return None
        return resolved if resolved.is_relative_to(root) else None

    def _diff_of(self, name: str, path: str, where: Path | None, args: dict[str, Any]) -> FileEditToolCallContent:
        """The change an edit or a write would make: the whole file before and after where it can be read."""
        shown = str(where) if where is not None else path
        before = _read_text(where) if where is not None else None
        if name == "write_file":
            content = args.get("content")
            return tool_diff_content(shown, content if isinstance(content, str) else "", before)
        old, new = args.get("old_string"), args.get("new_string")
        old, new = (old if isinstance(old, str) else ""), (new if isinstance(new, str) else "")
        if before is not None and old and old in before:
            return tool_diff_content(shown, before.replace(old, new, 1), before)
        return tool_diff_content(shown, new, old)

    # -- usage --------------------------------------------------------------------------

    def _step(self, step: StepFinished | Compacted) -> list[Update]:
        cost = self.pricer.cost(step)
        self.steps.append((step, cost))
        self.spent = None if cost is None or self.spent is None else self.spent + cost.total
        context = self.context()
        return self.usage_now(context) if context is not None else []

    def usage_now(self, context: tuple[int, int]) -> list[Update]:
        """The context used of its size, and the session's dollars so far (when every step was priced)."""
        spent = None if self.spent is None else Cost(amount=float(self.spent), currency="USD")
        return [UsageUpdate(session_update="usage_update", used=context[0], size=context[1], cost=spent)]

    def stop_reason(self, finished: TurnFinished) -> StopReason | None:
        """The prompt's stop reason; None for a turn that failed (the prompt answers with an error)."""
        last = next((step for step, _ in reversed(self.steps) if isinstance(step, StepFinished)), None)
        if last is not None and last.finish_reason in REFUSALS and finished.reason != "cancelled":
            return "refusal"
        return STOP_REASONS.get(finished.reason)

    def usage(self) -> Usage | None:
        """The turn's tokens in ACP's draft `usage`; None unless every step reported its prompt and output."""
        ledgers = [step.usage for step, _ in self.steps]
        prompt, output = _total(ledgers, "prompt_total"), _total(ledgers, "output")
        if prompt is None or output is None:
            return None
        return Usage(
            total_tokens=prompt + output,
            input_tokens=prompt,
            output_tokens=output,
            thought_tokens=_total(ledgers, "reasoning"),
            cached_read_tokens=_total(ledgers, "cache_read"),
            cached_write_tokens=_total(ledgers, "cache_write"),
        )

    def meta(self) -> dict[str, Any]:
        """hotloop's ledger of the turn, for `_meta.hotloop`: the totals and each step; unknown figures left out."""
        ledgers = [step.usage for step, _ in self.steps]
        costs = [cost for _, cost in self.steps]
        totals: dict[str, Any] = {name: _total(ledgers, name) for name in _FIGURES}
        totals["dollars"] = float(sum(c.total for c in costs if c)) if costs and all(costs) else None
        return _known({"turn": _known(totals), "steps": [_step_meta(step, cost) for step, cost in self.steps]})


_FIGURES = ("prompt_total", "cache_read", "cache_write", "uncached", "output", "reasoning")


def _step_meta(step: StepFinished | Compacted, cost: StepCost | None) -> dict[str, Any]:
    usage = step.usage or UsageLedger()
    figures: dict[str, Any] = {name: getattr(usage, name) for name in _FIGURES}
    if isinstance(step, StepFinished):
        figures |= {"step": step.step, "ttft": step.ttft, "decode_tps": step.decode_tps, "wall": step.wall}
        figures |= {"route": step.route or None, "cut": step.cut or None, "finish_reason": step.finish_reason}
    else:
        figures |= {"compaction": step.trigger, "ttft": step.ttft}
    figures |= {"model_time": step.model_time, "cache_note": step.cache_note or None}
    if cost is not None:
        figures |= {"dollars": float(cost.total), "dollars_source": cost.source}
    return _known(figures)


def _total(ledgers: list[UsageLedger | None], name: str) -> int | None:
    """The figure summed over the steps; None if any step didn't report it (a sum of what was reported would lie)."""
    values: list[int | None] = [getattr(ledger, name) if ledger is not None else None for ledger in ledgers]
    known = [value for value in values if value is not None]
    return sum(known) if values and len(known) == len(values) else None


def _known(figures: dict[str, Any]) -> dict[str, Any]:
    return {name: value for name, value in figures.items() if value is not None}


def _progress(call_id: str, status: str | None = None, content: list[Content] | None = None) -> ToolCallProgress:
    return ToolCallProgress(
        session_update="tool_call_update",
        tool_call_id=call_id,
        status="completed" if status == "completed" else "failed" if status == "failed" else None,
        content=list(content) if content is not None else None,
    )


def _diff(call: _Call) -> list[Content]:
    return [call.diff] if call.diff is not None else []


def tail(text: str) -> str:
    return text if len(text) <= OUTPUT_SHOWN else "…" + text[-OUTPUT_SHOWN:]


def title_of(name: str, args: dict[str, Any]) -> str:
    """`read_file src/app.py`, `run_shell: make test`: the tool and what it acts on, spelled out (`visible`)."""
    for key in ("command", "path", "pattern"):
        value = args.get(key)
        if isinstance(value, str) and value:
            return f"{visible(name)}: {visible(value)}" if key == "command" else f"{visible(name)} {visible(value)}"
    return visible(name)


def _read_text(path: Path) -> str | None:
    try:
        with path.open("rb") as file:
            data = file.read(DIFF_READ + 1)
    except OSError:
        return None  # a new file, or one that can't be read: the write shows as all new
    if len(data) > DIFF_READ:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None
