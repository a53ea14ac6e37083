"""A session as an ATIF trajectory: the Agent Trajectory Interchange Format, v1.4.

ATIF is Harbor's format (RFC 0001, `laude-institute/harbor`), the one trajectory format that
benchmark harnesses, trace viewers and training pipelines read in common; its RFC's tables are
the schema. A turn becomes a `user` step (the prompt), and each of its model requests an `agent`
step: the answer, the reasoning, the tool calls and, as the observation, their results.

A figure the provider didn't report is left out, never written as 0: ATIF's metrics are all
optional, so a reader can tell "not reported" from "none". What ATIF has no field for (cache
writes, timings, a call's status) goes in the objects' `extra`, hotloop's own names.
As in the other exports, nothing of the configuration is written: no system prompt, no
endpoint, no workspace.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from hotloop.nesting import decoded
from hotloop.sessions.export import Costs, call_status, cost_json
from hotloop.sessions.projection import CallRecord, Projection, StepRecord, TurnRecord
from hotloop.sessions.store import LoggedSession

SCHEMA_VERSION = "ATIF-v1.4"


def trajectory(session: LoggedSession, projection: Projection, costs: Costs) -> dict[str, Any]:
    """The session as one ATIF trajectory document."""
    header = session.header
    steps: list[dict[str, Any]] = []
    for turn in projection.turns:
        steps.append(_user_step(turn, len(steps) + 1))
        for step in turn.steps:
            steps.append(_agent_step(step, turn.broken_off(step), costs, len(steps) + 1))
    recorded = {
        "provider": header.provider,
        "recorded_by": f"hotloop {header.hotloop}",
        "origin": header.origin or None,
    }
    return _present(
        {
            "schema_version": SCHEMA_VERSION,
            "session_id": header.id,
            "agent": {
                **agent_of(header.origin, header.hotloop),
                "model_name": header.model or None,
                "extra": _present(recorded),
            },
            "steps": steps,
            "final_metrics": _final_metrics(projection.turns, costs, len(steps)),
            "extra": _present(
                {
                    "started": _timestamp(header.started),
                    "parent": header.parent or None,
                    "forked_at_turn": header.forked_at_turn or None,
                    "notes": projection.preamble or None,
                }
            ),
        }
    )


# Harbor's names for the agents hotloop watches and imports, by the product their user-agent or import names.
_AGENTS = {"claude-cli": "claude-code", "claude-code": "claude-code", "codex": "codex", "opencode": "opencode"}
_VERSION = re.compile(r"\d[\w.+-]*")


def agent_of(origin: str, hotloop: str) -> dict[str, str]:
    """Who made the session: hotloop itself, or the agent it watched or imported (`watch:claude-cli/2.1.332 (external,
    cli)`, `import:codex/0.171.0`) by Harbor's name for it and the version its user-agent or transcript says."""
    if not origin:
        return {"name": "hotloop", "version": hotloop}
    client = origin.partition(":")[2].split(" ", 1)[0]
    product, _, version = client.partition("/")
    name = next((agent for prefix, agent in _AGENTS.items() if product.lower().startswith(prefix)), product)
    return {"name": name or "unknown", "version": version if _VERSION.fullmatch(version) else "unknown"}


def _user_step(turn: TurnRecord, step_id: int) -> dict[str, Any]:
    """The prompt, with how the turn ended and its notes (a switch, a compaction, a notice)."""
    extra = {"turn": turn.turn, "end": turn.end or "interrupted", "wall": turn.wall, "notes": turn.notes or None}
    return {
        "step_id": step_id,
        "timestamp": _timestamp(turn.started),
        "source": "user",
        "message": turn.prompt,
        "extra": _present(extra),
    }


def _agent_step(step: StepRecord, interrupted: bool, costs: Costs, step_id: int) -> dict[str, Any]:
    calls = list(step.calls.values())
    unparsed = {call.call_id: call.arguments for call in calls if _arguments(call) is None}
    results = [{"source_call_id": call.call_id, "content": call.full_text()} for call in calls if _ran(call)]
    finished = step.finished
    extra = {
        "turn_step": step.step,
        "provider": step.provider,
        # Cut short: the log stopped mid-step, or the step was cancelled (finished, its usage billed).
        "interrupted": interrupted or bool(finished and finished.cut) or None,
        "finish_reason": finished.finish_reason if finished else None,
        "tool_runs": [{"call_id": c.call_id, "status": call_status(c), "duration": c.duration} for c in calls] or None,
        # ATIF's arguments are an object: arguments that don't parse as one (cut short) are kept here, as sent.
        "unparsed_arguments": unparsed or None,
        "server_tools": [{"name": t.name, "arguments": t.arguments} for t in step.server_tools] or None,
    }
    return _present(
        {
            "step_id": step_id,
            "timestamp": _timestamp(step.started),
            "source": "agent",
            "model_name": step.model or None,
            "message": "".join(step.text),
            "reasoning_content": "".join(step.reasoning) or None,
            "tool_calls": [
                {"tool_call_id": call.call_id, "function_name": call.name, "arguments": _arguments(call) or {}}
                for call in calls
            ]
            or None,
            "observation": {"results": results} if results else None,
            "metrics": _metrics(step, costs) or None,
            "extra": _present(extra),
        }
    )


def _metrics(step: StepRecord, costs: Costs) -> dict[str, Any]:
    """ATIF's figures where hotloop has them; the rest of the usage and the step's times in `extra`."""
    usage, cost, finished = step.usage, costs.get(id(step)), step.finished or step.response
    timings: dict[str, Any] = {}
    if finished is not None:
        timings = {"ttft": finished.ttft, "decode_tps": finished.decode_tps, "model_time": finished.model_time}
    if step.finished is not None:
        timings |= {"wall": step.finished.wall, "tool_wall": step.finished.tool_wall}
    extra = {
        **timings,
        "uncached_tokens": usage.uncached if usage else None,
        "cache_write_tokens": usage.cache_write if usage else None,
        "cache_write_1h_tokens": usage.cache_write_1h if usage else None,
        "reasoning_tokens": usage.reasoning if usage else None,
        "usage_distrusted": usage.distrust if usage else None,
        "cost": cost_json(cost),  # exact decimal strings, and where the price came from
    }
    return _present(
        {
            # ATIF's prompt_tokens counts cached tokens too, as hotloop's prompt_total does.
            "prompt_tokens": usage.prompt_total if usage else None,
            "completion_tokens": usage.output if usage else None,
            "cached_tokens": usage.cache_read if usage else None,
            "cost_usd": float(cost.total) if cost is not None else None,
            "extra": _present(extra) or None,
        }
    )


def _final_metrics(turns: list[TurnRecord], costs: Costs, count: int) -> dict[str, Any]:
    """The totals, each only when every answered step reported its part: a partial sum would be a guess."""
    answered = [step for turn in turns for step in turn.steps if id(step) in costs]
    usages = [step.usage for step in answered]

    def total(name: str) -> int | None:
        figures: list[int | None] = [getattr(usage, name) if usage else None for usage in usages]
        known = [figure for figure in figures if figure is not None]
        return sum(known) if known and len(known) == len(figures) else None

    priced = [cost for step in answered if (cost := costs[id(step)]) is not None]
    known = len(priced) == len(answered) and bool(answered)
    return _present(
        {
            "total_prompt_tokens": total("prompt_total"),
            "total_completion_tokens": total("output"),
            "total_cached_tokens": total("cache_read"),
            "total_cost_usd": float(sum(cost.total for cost in priced)) if known else None,
            "total_steps": count,
            "extra": {"answered_steps": len(answered), "priced_steps": len(priced)},
        }
    )


def _ran(call: CallRecord) -> bool:
    """Whether the call has a result to observe: it finished (ok, error, cancelled) or printed something."""
    return call.status in ("ok", "error", "cancelled") or bool(call.output)


def _arguments(call: CallRecord) -> dict[str, Any] | None:
    """A call's arguments as an object; None (kept as text) when they are none: not JSON, or nested too deep."""
    try:
        arguments = decoded(json.loads, call.arguments or "{}")
    except json.JSONDecodeError:
        return None
    return arguments if isinstance(arguments, dict) else None


def _timestamp(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    """The fields that have a value: ATIF's optional fields are left out rather than null."""
    return {name: value for name, value in fields.items() if value is not None and value != {}}
