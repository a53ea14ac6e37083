"""Claude Code's transcripts (`~/.claude/projects/<cwd with dashes>/<session id>.jsonl`) read as conversations.

One API response is written as several `assistant` lines sharing a message id (one per content block), each
repeating the response's usage: a step is a message id, its usage read once (the last line's, whose output
count is final), never summed over lines. `<synthetic>` messages are Claude Code's own (an error shown as an
answer), not requests. Recent versions record each request (`api-request`: its time, the shape of its system
prompt and tools by hash, its messages as the previous request's first `keep` plus new blobs), which gives
the request's segments for the cache explainer. Sub-agents' lines (`isSidechain`, in the file or in a
`subagents/` file of their own) become side conversations, one per agent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotloop.agent.cache_explainer import WireSegments
from hotloop.providers.events import UsageLedger
from hotloop.providers.protocols import Wire
from hotloop.sessions.imports.model import (
    Call,
    Imported,
    Step,
    Turn,
    canonical,
    kind_of,
    read_lines,
    text_of,
    timestamp,
)

AGENT = "claude-code"
# Records that hold nothing of the conversation's turns, steps or calls.
_OTHER_RECORDS = frozenset(
    {
        "queue-operation",
        "attachment",
        "atis-latch",
        "last-prompt",
        "tools-used",
        "cost-state",
        "mode",
        "summary",
        "system",
        "file-history-snapshot",
        "custom-title",
        "progress",
        "agent-name",
        "tag",
    }
)
_FINISH = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}
_CHAINS_KEPT = 8


@dataclass
class _Conversation:
    imported: Imported
    steps: dict[str, Step] = field(default_factory=dict)
    calls: dict[str, Call] = field(default_factory=dict)
    last_input: float | None = None  # the latest prompt or tool result: the next request follows it


@dataclass
class _Requests:
    """The `api-request*` records: each request's time and, where all its parts are there, its segments."""

    shapes: dict[str, Any] = field(default_factory=dict)
    blobs: dict[str, Any] = field(default_factory=dict)
    records: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Messages the transcript holds, by a key: Claude Code writes no blob for a message its own lines give.
    sent: dict[str, dict[str, Any]] = field(default_factory=dict)
    _hashed: dict[str, int] = field(default_factory=dict)  # each of `sent` hashed, at its length then
    _shaped: dict[str, tuple[str, dict[str, bytes]] | None] = field(default_factory=dict)
    _chains: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # the last requests' messages, to build on

    def blob(self, digest: str) -> Any:
        """A message by its hash (sha256 of its canonical JSON): a recorded blob, else one the lines give."""
        if digest not in self.blobs:
            for key, message in self.sent.items():
                size = len(message["content"])
                if self._hashed.get(key) != size:
                    self._hashed[key] = size
                    self.blobs.setdefault(hashlib.sha256(canonical(message)).hexdigest(), message)
        return self.blobs.get(digest)

    def segments(self, request_id: str) -> WireSegments | None:
        record = self.records.get(request_id)
        shape = self._shape(str(record.get("shapeHash"))) if record is not None else None
        messages = self._messages(request_id)
        if shape is None or messages is None:
            return None
        return WireSegments(
            system=shape[0],
            tools=shape[1],
            # A blob's hash is the digest of its canonical bytes: comparing hashes compares the messages, without
            # encoding a long session's every message again at every step.
            messages=[digest.encode() for digest, _ in messages],
            roles=[role for _, role in messages],
            body=b"",  # the body as sent isn't kept, so no byte of divergence is claimed
        )

    def _resolved(self, digest: object) -> tuple[str, str] | None:
        """A message's hash and role, if its blob is recorded or its lines give it."""
        message = self.blob(str(digest))
        if message is None:
            return None
        return str(digest), str(message.get("role", "message")) if isinstance(message, dict) else "message"

    def _shape(self, digest: str) -> tuple[str, dict[str, bytes]] | None:
        """A shape's system prompt and tools by name, each worked out once."""
        if digest not in self._shaped:
            shape = self.shapes.get(digest)
            tools = shape.get("tools") if isinstance(shape, dict) else None
            self._shaped[digest] = (
                (
                    text_of(shape.get("system")),
                    {str(tool.get("name")): canonical(tool) for tool in tools if isinstance(tool, dict)}
                    if isinstance(tools, list)
                    else {},
                )
                if isinstance(shape, dict)
                else None
            )
        return self._shaped[digest]

    def _messages(self, request_id: str) -> list[tuple[str, str]] | None:
        """The request's messages by hash and role: its base request's first `keep`, then its `tail`.

        A request builds on the one before, so the last few requests' lists are kept: each is then one step.
        """
        chain: list[dict[str, Any]] = []
        current: str | None = request_id
        seen: set[str] = set()
        while current is not None and current not in self._chains:
            record = self.records.get(current)
            if record is None or current in seen:
                return None  # a base that isn't recorded, or a loop of bases in a hostile file
            seen.add(current)
            chain.append(record)
            base = record.get("base")
            current = base if isinstance(base, str) and base != current else None
        hashes = list(self._chains[current]) if current is not None else []
        for record in reversed(chain):
            keep, tail = record.get("keep", 0), record.get("tail", [])
            if not isinstance(keep, int) or not isinstance(tail, list):
                return None
            added = [self._resolved(digest) for digest in tail]
            if any(message is None for message in added):
                return None
            hashes = hashes[: max(keep, 0)] + [message for message in added if message is not None]
        self._chains[request_id] = hashes
        while len(self._chains) > _CHAINS_KEPT:
            del self._chains[next(iter(self._chains))]
        return hashes


def read_transcript(path: Path, problems: list[str]) -> list[Imported]:
    """The main conversation and each sub-agent's, as found in the file."""
    requests = _Requests()
    conversations: dict[str, _Conversation] = {}
    unknown: dict[str, int] = {}
    for line in read_lines(path, problems):
        data = line.data
        kind = kind_of(data)
        if kind == "api-request-shape":
            requests.shapes[str(data.get("shapeHash"))] = data.get("shape")
        elif kind == "api-request-blob":
            requests.blobs[str(data.get("hash"))] = data.get("message")
        elif kind == "api-request":
            requests.records[str(data.get("id"))] = data
        elif kind in ("user", "assistant"):
            message = data.get("message")
            if not isinstance(message, dict):
                problems.append(f"{path.name} line {line.number}: a {kind} line without a message, skipped")
                continue
            conversation = _conversation(conversations, data, path)
            if kind == "user":
                _user(conversation, data, message)
                content = message.get("content")
                blocks = content if isinstance(content, list) else [{"type": "text", "text": text_of(content)}]
                requests.sent[f"u{line.number}"] = {"role": "user", "content": blocks}
            else:
                _assistant(conversation, data, message, requests)
        elif kind not in _OTHER_RECORDS:
            unknown[kind] = unknown.get(kind, 0) + 1
    for kind, count in unknown.items():
        problems.append(f"{path.name}: {count} line(s) of unknown type {kind!r}, skipped")
    return [c.imported for c in conversations.values() if any(turn.steps for turn in c.imported.turns)]


def _conversation(conversations: dict[str, _Conversation], data: Mapping[str, Any], path: Path) -> _Conversation:
    side = str(data.get("agentId") or "sidechain") if data.get("isSidechain") is True else ""
    found = conversations.get(side)
    if found is None:
        session = data.get("sessionId")
        found = conversations[side] = _Conversation(
            Imported(
                agent=AGENT,
                source_id=str(session) if isinstance(session, str) and session else path.stem,
                version=str(data.get("version") or "")[:40],
                provider="anthropic",
                base_url="",
                model="",
                workspace=str(data.get("cwd") or ""),
                started=timestamp(data.get("timestamp")),
                side_key=side,
                wire=Wire.ANTHROPIC,
            )
        )
    return found


def _user(conversation: _Conversation, data: Mapping[str, Any], message: Mapping[str, Any]) -> None:
    at = timestamp(data.get("timestamp"))
    content = message.get("content")
    results = (
        [b for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
        if isinstance(content, list)
        else []
    )
    if results:
        for block in results:
            call = conversation.calls.get(str(block.get("tool_use_id")))
            if call is not None:
                call.result = text_of(block.get("content"))
                call.is_error = block.get("is_error") is True
                call.done_at = at
        conversation.last_input = at
    elif data.get("isMeta") is not True and text_of(content):
        conversation.imported.turns.append(Turn(prompt=text_of(content), at=at))
        conversation.last_input = at


def _assistant(
    conversation: _Conversation, data: Mapping[str, Any], message: Mapping[str, Any], requests: _Requests
) -> None:
    model = str(message.get("model") or "")
    if model == "<synthetic>":
        return  # Claude Code's own words (an error, an interruption), not a response
    at = timestamp(data.get("timestamp"))
    imported = conversation.imported
    key = str(message.get("id") or data.get("uuid") or len(conversation.steps))
    step = conversation.steps.get(key)
    if step is None:
        request_id = str(data.get("requestRef") or "")
        record = requests.records.get(request_id)
        sent = timestamp(record.get("timestamp")) if record is not None else None
        step = conversation.steps[key] = Step(model=model, started=sent or conversation.last_input or at, ended=at)
        step.segments = requests.segments(request_id) if record is not None else None
        if not imported.turns:
            imported.turns.append(Turn(prompt="", at=step.started))
        imported.turns[-1].steps.append(step)
        imported.model = imported.model or model
        if model.startswith("claude-"):
            imported.base_url = "https://api.anthropic.com"  # Claude Code's default server; a gateway isn't recorded
    step.ended = at or step.ended
    usage = message.get("usage")
    if isinstance(usage, dict):
        step.usage = UsageLedger.from_anthropic(usage, None)
    stop = message.get("stop_reason")
    if isinstance(stop, str):
        step.finish_reason = _FINISH.get(stop, stop[:40])
    content = message.get("content")
    blocks: list[Any] = content if isinstance(content, list) else []
    requests.sent.setdefault(f"a{key}", {"role": "assistant", "content": []})["content"].extend(blocks)
    for block in blocks:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            step.text.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str) and block["thinking"]:
            step.reasoning.append(block["thinking"])
        elif kind == "tool_use":
            call = Call(str(block.get("id")), str(block.get("name"))[:200], json.dumps(block.get("input")), at=at)
            conversation.calls[call.call_id] = call
            step.calls.append(call)
