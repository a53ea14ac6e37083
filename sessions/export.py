"""Exporting a session as Markdown, JSON, HTML or ATIF (`export_atif.py`).

An export holds the conversation and its usage: prompts, answers, tool calls with their
results, and each step's figures and dollars. It holds nothing of the configuration: no system
prompt, no endpoints, no key names, no workspace path.

Dollars are priced when exporting, from the logged usage and model (`agent/pricing.py`): the
log holds tokens, never prices.

Markdown and HTML are read in a terminal or a browser: their control characters are inert
(`agent/text.py`). JSON keeps the exact text, every control character escaped.
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime
from typing import Any

from hotloop.agent.figures import seconds, step_summary
from hotloop.agent.pricing import Cost, CostTotals, dollars
from hotloop.agent.text import inert
from hotloop.providers.events import UsageLedger
from hotloop.sessions.projection import CallRecord, StepRecord, TurnRecord, project
from hotloop.sessions.store import LoggedSession
from hotloop.sessions.summary import Summary, own_spending_since, tokens_total
from hotloop.sessions.titles import headline

RESULT_LINES = 20
# JSON must escape only C0 controls; DEL and the C1 controls (a terminal may read `\x9b` as CSI) are escaped too.
_UNESCAPED_CONTROL = re.compile("[\x7f-\x9f]")


def export(session: LoggedSession, fmt: str) -> str:
    projection = project(session.events)
    turns = projection.turns
    costs = step_costs(session, turns)
    if fmt == "json":
        return json_text(_as_json(session, turns, costs))
    if fmt == "atif":
        from hotloop.sessions.export_atif import trajectory

        return json_text(trajectory(session, projection, costs))
    markdown = inert(_as_markdown(session, projection.preamble, turns, costs))
    return markdown if fmt == "md" else _as_html(session, markdown)


def json_text(document: dict[str, Any]) -> str:
    """A document as JSON with the exact text, every control character escaped."""
    text = json.dumps(document, ensure_ascii=False, indent=2)
    return _UNESCAPED_CONTROL.sub(lambda control: f"\\u{ord(control.group()):04x}", text) + "\n"


Costs = dict[int, Cost | None]  # by the `id` of a step's record; a step the model never answered has none


def step_costs(session: LoggedSession, turns: list[TurnRecord]) -> Costs:
    """Each answered step's cost, priced by the server its provider was (the header's, or a switch's)."""
    pricer = session.header.pricer()
    for event in session.events:
        pricer.learn(event)
    return {
        id(step): pricer.price(answered, step.provider, step.model)
        for turn in turns
        for step in turn.steps
        if (answered := step.finished or step.response) is not None
    }


def _spent(session: LoggedSession, turns: list[TurnRecord], costs: Costs) -> tuple[CostTotals, CostTotals]:
    """The session's own spend, and a fork's parent's, whose turns the fork's log begins with (stamped earlier)."""
    since = own_spending_since(session.header)
    own, parents = CostTotals(), CostTotals()
    for step in (step for turn in turns for step in turn.steps if id(step) in costs):
        (own if step.started >= since else parents).add(costs[id(step)])
    return own, parents


def _spent_line(session: LoggedSession, turns: list[TurnRecord], costs: Costs) -> str:
    own, parents = _spent(session, turns, costs)
    inherited = parents.priced + parents.unknown
    return f" · {own}" + (f" (the parent's turns, before the fork: {parents})" if inherited else "")


def _tokens_line(session: LoggedSession) -> str:
    """` · ≥18,968 tokens`: the session's own, as `sessions list` counts them; nothing if no step's usage is known."""
    summary = Summary(own_since=own_spending_since(session.header))
    for event in session.events:
        summary.observe(event)
    return "" if summary.tokens is None else f" · {tokens_total(summary.tokens, summary.unmeasured)} tokens"


def _started(session: LoggedSession) -> str:
    return datetime.fromtimestamp(session.header.started).strftime("%Y-%m-%d %H:%M")


def _title(turns: list[TurnRecord]) -> str:
    return (headline(turns[0].prompt) if turns else "") or "an empty session"


def _fence(text: str, language: str = "") -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}{language}\n{text}\n{ticks}"


def _quoted(note: str) -> str:
    """A note as a Markdown quote, every line of it (a compaction's carries its summary)."""
    return "\n".join(f"> {line}" if line else ">" for line in note.splitlines())


def _as_markdown(session: LoggedSession, preamble: list[str], turns: list[TurnRecord], costs: Costs) -> str:
    header = session.header
    spent = _spent_line(session, turns, costs) if costs else ""
    lines = [
        f"# {_title(turns)}",
        "",
        f"Session `{header.id}` · {_started(session)} · {len(turns)} turn{'s' if len(turns) != 1 else ''}"
        f"{_tokens_line(session)}{spent}",
        "",
    ]
    lines += [_quoted(note) for note in preamble] + ([""] if preamble else [])
    for turn in turns:
        lines += [f"## Turn {turn.turn}", "", "**You**", "", turn.prompt.strip(), ""]
        for step in turn.steps:
            lines += _step_markdown(step, turn.broken_off(step), costs)
        lines += [_quoted(note) for note in turn.notes] + ([""] if turn.notes else [])
        if turn.end != "answer":
            lines += [f"*The turn ended: {(turn.end or 'interrupted').replace('_', ' ')}.*", ""]
    return "\n".join(lines).rstrip() + "\n"


def _step_markdown(step: StepRecord, interrupted: bool, costs: Costs) -> list[str]:
    lines = [f"**{step.provider} · {step.model}**, step {step.step}{' (interrupted)' if interrupted else ''}", ""]
    if step.reasoning:
        lines += ["*Reasoning:*", "", *[f"> {line}" for line in "".join(step.reasoning).strip().splitlines()], ""]
    text = "".join(step.text).strip()
    if text:
        lines += [text, ""]
    for call in step.calls.values():
        took = f" · {seconds(call.duration)}" if call.duration is not None else ""
        lines += [f"- `{call.name}` `{call.arguments}` · {call_status(call)}{took}", ""]
        if call.result:
            shown = call.result.splitlines()
            more = f"\n… {len(shown) - RESULT_LINES} more lines" if len(shown) > RESULT_LINES else ""
            lines += ["  " + line for line in _fence("\n".join(shown[:RESULT_LINES]) + more).splitlines()] + [""]
    if step.finished is not None:
        lines += [f"*{step_summary(step.finished)} · {dollars(costs[id(step)])}*", ""]
    elif id(step) in costs:
        lines += [f"*{dollars(costs[id(step)])}*", ""]
    return lines


def _usage(usage: UsageLedger | None) -> dict[str, Any] | None:
    if usage is None:
        return None
    return {name: getattr(usage, name) for name in UsageLedger.__struct_fields__}


def cost_json(cost: Cost | None) -> dict[str, Any] | None:
    """Dollars as decimal strings, exact: `{"total": "0.0225", "source": "price table", "uncached": "0.006", …}`."""
    if cost is None:
        return None
    return {
        "total": str(cost.total),
        "source": cost.source,
        **{kind: str(value) for kind, value in cost.parts().items()},
    }


def _as_json(session: LoggedSession, turns: list[TurnRecord], costs: Costs) -> dict[str, Any]:
    header = session.header
    totals, parents = _spent(session, turns, costs)
    return {
        "id": header.id,
        "started": datetime.fromtimestamp(header.started).isoformat(timespec="seconds"),
        "hotloop": header.hotloop,
        **({"parent": header.parent, "forked_at_turn": header.forked_at_turn} if header.parent else {}),
        # The priced steps' dollars, and how many steps had no price (their cost is unknown, not 0).
        "cost": {"total": str(totals.known), "priced_steps": totals.priced, "unpriced_steps": totals.unknown},
        # A fork's log begins with its parent's turns: their spend is the parent's, apart.
        **({"parent_cost": {"total": str(parents.known), "priced_steps": parents.priced}} if header.parent else {}),
        "turns": [
            {
                "turn": turn.turn,
                "prompt": turn.prompt,
                "end": turn.end or "interrupted",
                "notes": turn.notes,
                "steps": [_step_json(step, turn.broken_off(step), costs) for step in turn.steps],
            }
            for turn in turns
        ],
    }


def call_status(call: CallRecord) -> str:
    return call.status if call.status in ("ok", "error", "cancelled") else "not run"


def _step_json(step: StepRecord, interrupted: bool, costs: Costs) -> dict[str, Any]:
    finished = step.finished
    calls = [
        {
            "id": call.call_id,
            "name": call.name,
            "arguments": call.arguments,
            "status": call_status(call),
            "duration": call.duration,
            "result": call.result,
        }
        for call in step.calls.values()
    ]
    return {
        "step": step.step,
        "provider": step.provider,
        "model": step.model,
        "text": "".join(step.text),
        "reasoning": "".join(step.reasoning),
        "interrupted": interrupted,
        "tool_calls": calls,
        "usage": _usage(step.usage),
        "cost": cost_json(costs.get(id(step))),
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
    return _PAGE.format(title=html.escape(inert(f"hotloop session {session.header.id}")), body=body)
