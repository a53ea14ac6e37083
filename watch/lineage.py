"""Which conversation a watched request belongs to.

An agent's next request is its previous one plus the model's answer and what follows it (tool
results, a new prompt): its messages extend the previous request's, and the first message added
is the assistant's. So a request continues the conversation whose latest request is the longest
prefix of its messages, when it adds the answer (or nothing: a retry). One that extends a
conversation without its answer (a title or summary asked on the conversation's prefix), or that
extends an earlier request than the latest, branches off: a side request, the start of a
conversation of its own whose parent is that one. Prefixes are found by chained digests, one per
message, so a request costs a lookup per message, not a comparison with every earlier request.

A session key (an agent's session header, Codex's `prompt_cache_key`) keeps agents and their
sessions apart: lineage is looked for only among requests with the same key. A keyed request that
extends nothing continues the key's main conversation when its system prompt is the same as that
conversation's latest (the agent rewrote its history: a compaction), else it is a side request of it
(a sub-agent, a title job).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass


def _digest(data: bytes) -> bytes:
    return hashlib.blake2b(data, digest_size=12).digest()


def chains(messages: Sequence[bytes]) -> list[bytes]:
    """The chained digest of every prefix of `messages`: `chains[k]` stands for the first k."""
    chained = [b""]
    for message in messages:
        chained.append(_digest(chained[-1] + _digest(message)))
    return chained


@dataclass(frozen=True)
class Placement:
    """Where a request goes: `continues` a conversation, or starts a new one (`side_of` its parent, if any)."""

    continues: str = ""
    side_of: str = ""


@dataclass
class _Line:
    key: str
    system: bytes  # the digest of its latest request's system prompt
    head: bytes  # the chained digest of its latest request's messages


class Lineage:
    def __init__(self) -> None:
        self._seen: dict[tuple[str, bytes], str] = {}  # (key, a request's chain) -> its conversation
        self._lines: dict[str, _Line] = {}
        self._main: dict[str, str] = {}  # a session key's first conversation

    def place(self, key: str, system: str, messages: Sequence[bytes], roles: Sequence[str]) -> Placement:
        chained = chains(messages)
        for length in range(len(messages), 0, -1):
            conversation = self._seen.get((key, chained[length]))
            if conversation is None:
                continue
            added = roles[length:]
            if self._lines[conversation].head == chained[length] and (not added or added[0] == "assistant"):
                return Placement(continues=conversation)
            if length == len(messages):
                return Placement()  # an earlier request again, whole: a new run of it, not a branch
            return Placement(side_of=conversation)
        main = self._main.get(key) if key else None
        if main is None:
            return Placement()
        if self._lines[main].system == _digest(system.encode()):
            return Placement(continues=main)
        return Placement(side_of=main)

    def record(self, conversation: str, key: str, system: str, messages: Sequence[bytes]) -> None:
        """`conversation`'s latest request is this one."""
        head = chains(messages)[-1]
        self._seen[(key, head)] = conversation
        line = self._lines.get(conversation)
        if line is None:
            self._lines[conversation] = _Line(key, _digest(system.encode()), head)
            if key:
                self._main.setdefault(key, conversation)
        else:
            # A later request's system prompt is the one a rewrite of this conversation keeps: an agent whose tools
            # changed (Claude Code's --tools on a resumed session) sends a new one from then on.
            line.head, line.system = head, _digest(system.encode())
