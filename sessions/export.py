"""Exporting a session as Markdown, JSON or HTML.

An export holds the conversation and its usage: prompts, answers, tool calls with their
results, and each step's figures. It holds nothing of the configuration: no system prompt,
no endpoints, no key names, no workspace path.
"""

from __future__ import annotations

import html
import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ProviderSwitched,
    ResponseFinished,
    StepFinished,
    StepStarted,
    ToolFinished,
    TurnFinished,
    TurnStarted,
)
from hotloop.agent.figures import seconds, step_summary
from hotloop.agent.switching import describe_switch
from hotloop.providers.events import ReasoningDelta, TextDelta, ToolCallReady, UsageLedger
from hotloop.sessions.store import LoggedSession

RESULT_LINES = 20


@dataclass
class CallRecord:
    id: str
    name: str
    arguments: str
    status: str = "not run"
    duration: float | None = None
    result: str = ""


@dataclass
class StepRecord:
    step: int
    provider: str
    model: str
    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[CallRecord] = field(default_factory=list)
    finished: StepFinished | None = None
    usage: UsageLedger | None = None
    interrupted: bool = False


@dataclass
class TurnRecord:
    turn: int
    prompt: str
    steps: list[StepRecord] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    end: str = "interrupted"  # until a TurnFinished says otherwise


def turns_of(events: list[AgentEvent]) -> tuple[list[str], list[TurnRecord]]:
    """The session's notes from before its first turn, and its turns."""
    preamble: list[str] = []
    turns: list[TurnRecord] = []
    calls: dict[str, CallRecord] = {}
    for event in events:
        turn = turns[-1] if turns else None
        step = turn.steps[-1] if turn and turn.steps else None
        if isinstance(event, TextDelta) and step:
            step.text.append(event.text)
        elif isinstance(event, ReasoningDelta) and step:
            step.reasoning.append(event.text)
        elif isinstance(event, TurnStarted):
            turns.append(TurnRecord(event.turn, event.prompt))
        elif isinstance(event, StepStarted) and turn:
            turn.steps.append(StepRecord(event.step, event.provider, event.model))
        elif isinstance(event, ToolCallReady) and step:
            calls[event.call_id] = CallRecord(event.call_id, event.name, event.arguments)
            step.calls.append(calls[event.call_id])
        elif isinstance(event, ToolFinished) and event.call_id in calls:
            call = calls[event.call_id]
            call.status, call.duration, call.result = event.status, event.duration, event.result
        elif isinstance(event, ResponseFinished) and step:
            step.usage = event.usage
        elif isinstance(event, StepFinished) and step:
            step.finished, step.usage = event, event.usage
        elif isinstance(event, TurnFinished) and turn:
            turn.end = event.reason
        elif isinstance(event, Notice | ProviderSwitched):
            note = describe_switch(event) if isinstance(event, ProviderSwitched) else f"{event.level}: {event.message}"
            (turn.notes if turn else preamble).append(note)
    for turn in turns:
        for record in turn.steps:
            record.interrupted = record.finished is None and turn.end in ("cancelled", "error", "interrupted")
    return preamble, turns


def export(session: LoggedSession, fmt: str) -> str:
    preamble, turns = turns_of(session.events)
    if fmt == "json":
        return json.dumps(_as_json(session, turns), ensure_ascii=False, indent=2) + "\n"
    markdown = _as_markdown(session, preamble, turns)
    return markdown if fmt == "md" else _as_html(session, markdown)


def _started(session: LoggedSession) -> str:
    return datetime.fromtimestamp(session.header.started).strftime("%Y-%m-%d %H:%M")


def _title(turns: list[TurnRecord]) -> str:
    first = turns[0].prompt.strip().splitlines()[0] if turns and turns[0].prompt.strip() else "an empty session"
    return first if len(first) <= 80 else first[:79] + "…"


def _fence(text: str, language: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text}\n{ticks}"


def _as_markdown(session: LoggedSession, preamble: list[str], turns: list[TurnRecord]) -> str:
    header = session.header
    lines = [f"# {_title(turns)}", "",
             f"Session `{header.id}` · {_started(session)} · {len(turns)} turn{'s' if len(turns) != 1 else ''}", ""]
    lines += [f"> {note}" for note in preamble] + ([""] if preamble else [])
    for turn in turns:
        lines += [f"## Turn {turn.turn}", "", "**You**", "", turn.prompt.strip(), ""]
        for step in turn.steps:
            lines += _step_markdown(step)
        lines += [f"> {note}" for note in turn.notes] + ([""] if turn.notes else [])
        if turn.end != "answer":
            lines += [f"*The turn ended: {turn.end.replace('_', ' ')}.*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _step_markdown(step: StepRecord) -> list[str]:
    lines = [f"**{step.provider} · {step.model}**, step {step.step}{' (interrupted)' if step.interrupted else ''}", ""]
    if step.reasoning:
        lines += ["*Reasoning:*", "", *[f"> {line}" for line in "".join(step.reasoning).strip().splitlines()], ""]
    text = "".join(step.text).strip()
    if text:
        lines += [text, ""]
    for call in step.calls:
        took = f" · {seconds(call.duration)}" if call.duration is not None else ""
        lines += [f"- `{call.name}` `{call.arguments}` · {call.status}{took}", ""]
        if call.result:
            shown = call.result.splitlines()
            more = f"\n… {len(shown) - RESULT_LINES} more lines" if len(shown) > RESULT_LINES else ""
            lines += ["  " + line for line in _fence("\n".join(shown[:RESULT_LINES]) + more).splitlines()] + [""]
    if step.finished is not None:
        lines += [f"*{step_summary(step.finished)}*", ""]
    return lines


def _usage(usage: UsageLedger | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {name: getattr(usage, name) for name in UsageLedger.__struct_fields__}


def _as_json(session: LoggedSession, turns: list[TurnRecord]) -> dict[str, Any]:
    header = session.header
    return {
        "id": header.id,
        "started": datetime.fromtimestamp(header.started).isoformat(timespec="seconds"),
        "hotloop": header.hotloop,
        "turns": [
            {
                "turn": turn.turn,
                "prompt": turn.prompt,
                "end": turn.end,
                "notes": turn.notes,
                "steps": [_step_json(step) for step in turn.steps],
            }
            for turn in turns
        ],
    }


def _step_json(step: StepRecord) -> dict[str, Any]:
    finished = step.finished
    return {
        "step": step.step,
        "provider": step.provider,
        "model": step.model,
        "text": "".join(step.text),
        "reasoning": "".join(step.reasoning),
        "interrupted": step.interrupted,
        "tool_calls": [vars(call) for call in step.calls],
        "usage": _usage(step.usage),
        "ttft": finished.ttft if finished else None,
        "decode_tps": finished.decode_tps if finished else None,
        "wall": finished.wall if finished else None,
        "finish_reason": finished.finish_reason if finished else None,
    }


_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title>
<style>
body {{ max-width: 50rem; margin: 2rem auto; padding: 0 1rem; font: 16px/1.5 system-ui, sans-serif; color: #222; }}
pre {{ background: #f5f5f5; padding: .75rem; overflow-x: auto; border-radius: 4px; }}
code {{ font: 0.9em ui-monospace, monospace; }}
blockquote {{ color: #555; border-left: 3px solid #ddd; margin-left: 0; padding-left: 1rem; }}
em {{ color: #666; }}
table {{ border-collapse: collapse; }} td, th {{ border: 1px solid #ddd; padding: .25rem .5rem; }}
</style>
</head>
<body>
{body}
</body>
</html>
"""


def _as_html(session: LoggedSession, markdown: str) -> str:
    from markdown_it import MarkdownIt

    # Raw HTML in a prompt, an answer or a tool's output is shown as text, never run.
    body = MarkdownIt("commonmark", {"html": False}).enable("table").render(markdown)
    return _PAGE.format(title=html.escape(f"hotloop session {session.header.id}"), body=body)
