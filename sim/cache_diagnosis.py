"""Anthropic's cache diagnostics (beta `cache-diagnosis-2026-04-07`), as the simulator answers them.

With the beta header, a request may carry `diagnostics: {"previous_message_id": ID | null}`. The API keeps a
fingerprint of every such request under its response's id (hashes and token estimates, never the text), and
answers with `diagnostics: {"cache_miss_reason": …}`: null when nothing diverged (or on a first turn), else the
first point of divergence in prefix order (model, tools, system, messages) as `{"type": "<part>_changed",
"cache_missed_input_tokens": N}` (N: the tokens after it), or `{"type": "previous_message_not_found"}`.
Like the API's, the comparison is of the requests' structure: an expired or evicted entry with nothing changed
is no divergence, which is how a client tells those from a change.
"""

from __future__ import annotations

import hashlib
import json
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from hotloop.sim.tokenizer import count

BETA = "cache-diagnosis-2026-04-07"
_KEPT = 4096  # fingerprints kept, oldest dropped first: the API keeps them "for a limited time"


@dataclass(frozen=True)
class _Print:
    model: str
    segments: tuple[tuple[str, str, int], ...]  # (part, digest, tokens) in prefix order


class Diagnoser:
    """Every fingerprinted request of one simulator, by the id of the response that answered it."""

    def __init__(self) -> None:
        self._prints: OrderedDict[str, _Print] = OrderedDict()

    def diagnose(self, body: dict[str, Any], previous: str | None, message_id: str) -> dict[str, Any]:
        """The response's `diagnostics`; the request is kept under `message_id` for the next one to name."""
        now = _fingerprint(body)
        self._prints[message_id] = now
        while len(self._prints) > _KEPT:
            self._prints.popitem(last=False)
        if previous is None:
            return {"cache_miss_reason": None}
        before = self._prints.get(previous)
        if before is None:
            return {"cache_miss_reason": {"type": "previous_message_not_found"}}
        return {"cache_miss_reason": _divergence(before, now)}


def enabled(beta: str | None) -> bool:
    """Whether the `anthropic-beta` header (a comma-separated list) names the diagnostics beta."""
    return beta is not None and BETA in (name.strip() for name in beta.split(","))


def _fingerprint(body: dict[str, Any]) -> _Print:
    tools = [("tools", tool) for tool in body.get("tools") or []]
    system = [("system", body["system"])] if body.get("system") else []
    messages = [("messages", message) for message in body.get("messages") or []]
    segments = []
    for part, value in [*tools, *system, *messages]:
        text = json.dumps(_unmarked(value), sort_keys=True, ensure_ascii=False)
        segments.append((part, hashlib.blake2b(text.encode(), digest_size=8).hexdigest(), count(text)))
    return _Print(str(body.get("model", "")), tuple(segments))


def _unmarked(value: Any) -> Any:
    """`value` without its `cache_control` markers: a breakpoint is not content, and moving one changes nothing."""
    if isinstance(value, dict):
        return {key: _unmarked(item) for key, item in value.items() if key != "cache_control"}
    if isinstance(value, list):
        return [_unmarked(item) for item in value]
    return value


def _divergence(before: _Print, now: _Print) -> dict[str, Any] | None:
    total = sum(tokens for _, _, tokens in now.segments)
    if before.model != now.model:
        return {"type": "model_changed", "cache_missed_input_tokens": total}
    for index, old in enumerate(before.segments):
        new = now.segments[index] if index < len(now.segments) else None
        if new is None or new[:2] != old[:2]:
            part = old[0] if new is None or new[0] == old[0] else min(old[0], new[0], key=_ORDER.index)
            missed = sum(tokens for _, _, tokens in now.segments[index:])
            return {"type": f"{part}_changed", "cache_missed_input_tokens": missed}
    return None  # the new request extends the old one: nothing diverged


_ORDER = ("tools", "system", "messages")
