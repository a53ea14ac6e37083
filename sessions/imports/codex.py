"""Codex's rollouts (`~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl`) read as a conversation.

A rollout is a run of `response_item`s (messages, reasoning, calls and their outputs) with an
`event_msg` `token_count` after each API request: its `last_token_usage` is that request's usage (the
`total_token_usage` beside it is the thread's so far, which `codex exec --json` reports after a resume).
The items since the previous request make the step the count closes; a call's output, written after it,
finds its call by id. A `token_count` whose totals didn't move repeats the last one (Codex sends one when
only its rate limits changed), so it is no request. Codex keeps no request shapes: its verdicts are
from usage alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotloop.providers.events import UsageLedger
from hotloop.providers.protocols import Wire
from hotloop.sessions.imports.model import Call, Imported, Step, Turn, kind_of, read_lines, text_of, timestamp
from hotloop.sessions.titles import users_words

AGENT = "codex"
_SERVERS = {"openai": "https://api.openai.com/v1"}  # the provider ids that say which server; another's isn't kept
_RECORDS = frozenset(
    {"session_meta", "turn_context", "response_item", "event_msg", "world_state", "token_usage_record", "compacted"}
)


@dataclass
class _Reading:
    imported: Imported
    model: str = ""
    step: Step | None = None
    calls: dict[str, Call] = field(default_factory=dict)
    last_input: float | None = None
    totals: object = None  # the last count's thread totals, to pass over a repeated count

    def open_step(self, at: float | None) -> Step:
        if self.step is None:
            self.step = Step(model=self.model, started=self.last_input or at, ended=at)
            if not self.imported.turns:
                self.imported.turns.append(Turn(prompt="", at=self.step.started))
            self.imported.turns[-1].steps.append(self.step)
        self.step.ended = at or self.step.ended
        return self.step


def read_rollout(path: Path, problems: list[str]) -> list[Imported]:
    reading = _Reading(
        Imported(
            agent=AGENT,
            source_id=path.stem,
            version="",
            provider="openai",
            base_url="",
            model="",
            workspace="",
            started=None,
            wire=Wire.OPENAI_RESPONSES,
        )
    )
    unknown: dict[str, int] = {}
    for line in read_lines(path, problems):
        kind, payload = kind_of(line.data), line.data.get("payload")
        at = timestamp(line.data.get("timestamp"))
        if kind not in _RECORDS:
            unknown[kind] = unknown.get(kind, 0) + 1
        elif not isinstance(payload, dict):
            problems.append(f"{path.name} line {line.number}: a {kind} record without a payload, skipped")
        elif kind == "session_meta":
            _meta(reading.imported, payload, at)
        elif kind == "turn_context" and isinstance(payload.get("model"), str):
            reading.model = payload["model"][:200]
            reading.imported.model = reading.imported.model or reading.model
        elif kind == "response_item":
            _item(reading, payload, at)
        elif kind == "event_msg" and payload.get("type") == "token_count":
            _count(reading, payload, at)
    for kind, count in unknown.items():
        problems.append(f"{path.name}: {count} line(s) of unknown type {kind!r}, skipped")
    imported = reading.imported
    return [imported] if any(turn.steps for turn in imported.turns) else []


def _meta(imported: Imported, payload: Mapping[str, Any], at: float | None) -> None:
    session = payload.get("id") or payload.get("session_id")
    if isinstance(session, str) and session:
        imported.source_id = session[:200]
    imported.version = str(payload.get("cli_version") or "")[:40]
    imported.workspace = str(payload.get("cwd") or "")
    imported.started = timestamp(payload.get("timestamp")) or at
    provider = payload.get("model_provider")
    if isinstance(provider, str) and provider:
        imported.provider = provider[:80]  # Codex's name for the server: "openai", or its config's
        imported.base_url = _SERVERS.get(provider, imported.base_url)


def _item(reading: _Reading, item: Mapping[str, Any], at: float | None) -> None:
    kind, role = item.get("type"), item.get("role")
    if kind == "message" and role == "user":
        text = text_of(item.get("content"))
        if users_words(text):  # not a message of Codex's own context (the environment, instructions)
            reading.imported.turns.append(Turn(prompt=text, at=at))
            reading.step, reading.last_input = None, at
    elif kind == "message" and role == "assistant":
        reading.open_step(at).text.append(text_of(item.get("content")))
    elif kind == "reasoning":
        summary = text_of(item.get("summary"))
        step = reading.open_step(at)
        if summary:
            step.reasoning.append(summary)
    elif kind in ("function_call", "custom_tool_call"):
        arguments = item.get("arguments", item.get("input"))
        call = Call(str(item.get("call_id")), str(item.get("name"))[:200], str(arguments or ""), at=at)
        reading.calls[call.call_id] = call
        reading.open_step(at).calls.append(call)
    elif kind in ("function_call_output", "custom_tool_call_output"):
        answered = reading.calls.get(str(item.get("call_id")))
        if answered is not None:
            output = item.get("output")
            answered.result = (
                output
                if isinstance(output, str)
                else text_of(output.get("content"))
                if isinstance(output, dict)
                else ""
            )
            answered.done_at = at
        reading.last_input = at


def _count(reading: _Reading, payload: Mapping[str, Any], at: float | None) -> None:
    info = payload.get("info")
    last = info.get("last_token_usage") if isinstance(info, dict) else None
    if not isinstance(info, dict) or not isinstance(last, dict):
        return
    if info.get("total_token_usage") == reading.totals and reading.totals is not None:
        return
    reading.totals = info.get("total_token_usage")
    step = reading.step if reading.step is not None else reading.open_step(at)
    step.usage = ledger(last)
    step.finish_reason = "tool_calls" if step.calls else "stop"
    reading.step = None


def ledger(usage: Mapping[str, Any]) -> UsageLedger:
    """Codex's counts in the Responses API's words: `input_tokens` holds the cached part."""
    details = {"cached_tokens": usage.get("cached_input_tokens")}
    if "cache_write_input_tokens" in usage:
        details["cache_write_tokens"] = usage.get("cache_write_input_tokens")
    return UsageLedger.from_openai_responses(
        {
            "input_tokens": usage.get("input_tokens"),
            "output_tokens": usage.get("output_tokens"),
            "input_tokens_details": details,
            "output_tokens_details": {"reasoning_tokens": usage.get("reasoning_output_tokens")},
        }
    )
