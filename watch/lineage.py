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
sessions apart: lineage is looked for only among requests with the same key, and from the same client
(its protocol and user agent): two agents asking the same first question are two conversations. A keyed request that
extends nothing continues the key's main conversation when its system prompt is the same as that
conversation's latest (the agent rewrote its history: a compaction), else it is a side request of it
(a sub-agent, a title job). The main conversation is the one that carries the tools: a key's first
conversation is its main until, while it has none, a request with tools would continue it without
extending it or branch off it. That request starts the key's main conversation instead, and adopts
the tool-less one and its side requests as its own (`Placement.adopts`): opencode sends its title
request (no tools) before its real one, under the same session header, and the title's answer
begins first.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import msgspec


def chains(messages: Sequence[bytes]) -> list[int]:
    """The chained digest of every prefix of `messages`: `chains[k]` stands for the first k.

    Python's own hash, keyed per process and cached on each `bytes` and `str`, not a cryptographic digest: the
    chains never leave the process, and a 100 KB prompt hashed with blake2b cost ~0.1 ms, each time it was looked
    at.
    """
    chained = [0]
    for message in messages:
        chained.append(hash((chained[-1], hash(message))))
    return chained


class Placement(msgspec.Struct, frozen=True):
    """Where a request goes: `continues` a conversation, or starts a new one (`side_of` its parent, if any) that
    `adopts` these conversations as its side requests."""

    continues: str = ""
    side_of: str = ""
    adopts: tuple[str, ...] = ()


_ALONE = Placement()  # a conversation of its own, no one's side request


@dataclass
class _Line:
    key: str
    system: int  # the hash of its latest request's system prompt
    head: int  # the chained digest of its latest request's messages
    tools: bool  # a request of it carried tools


class Lineage:
    def __init__(self) -> None:
        self._seen: dict[tuple[int, str, int], str] = {}  # (client, key, a request's chain) -> its conversation
        self._lines: dict[str, _Line] = {}
        self._main: dict[str, str] = {}  # a session key's main conversation
        self._sides: dict[str, list[str]] = {}  # a conversation's side requests

    def place(
        self,
        key: str,
        system: str,
        messages: Sequence[bytes],
        roles: Sequence[str],
        tools: bool = False,
        client: int = 0,
    ) -> Placement:
        """Where a request goes; `tools`: it carries tools; `client`: who sent it (a prefix of another's is not its)."""
        chained = chains(messages)
        for length in range(len(messages), 0, -1):
            conversation = self._seen.get((client, key, chained[length]))
            if conversation is None:
                continue
            added = roles[length:]
            if self._lines[conversation].head == chained[length] and (not added or added[0] == "assistant"):
                return Placement(continues=conversation)
            if length == len(messages):
                return _ALONE  # an earlier request again, whole: a new run of it, not a branch
            return self._beside(key, conversation, tools)
        main = self._main.get(key) if key else None
        if main is None:
            return _ALONE
        line = self._lines[main]
        if line.system == hash(system) and (line.tools or not tools):
            return Placement(continues=main)
        return self._beside(key, main, tools)

    def _beside(self, key: str, conversation: str, tools: bool) -> Placement:
        """A side request of `conversation`, unless that is its key's main without tools and this one has some: then
        this one is the main, and the other and its side requests are its side requests."""
        if not (tools and key and self._main.get(key) == conversation and not self._lines[conversation].tools):
            return Placement(side_of=conversation)
        return Placement(adopts=(conversation, *self._sides.get(conversation, ())))

    def record(
        self,
        conversation: str,
        key: str,
        system: str,
        messages: Sequence[bytes],
        tools: bool = False,
        placed: Placement = _ALONE,
        client: int = 0,
    ) -> None:
        """`conversation`'s latest request is this one, which was `placed` there."""
        head = chains(messages)[-1]
        self._seen[(client, key, head)] = conversation
        line = self._lines.get(conversation)
        if line is None:
            self._lines[conversation] = _Line(key, hash(system), head, tools)
            if placed.side_of:
                self._sides.setdefault(placed.side_of, []).append(conversation)
            if placed.adopts:  # the first is the key's old main: its side requests are this one's now
                self._sides.pop(placed.adopts[0], None)
                self._sides[conversation] = list(placed.adopts)
            if key and (placed.adopts or key not in self._main):
                self._main[key] = conversation
        else:
            # A later request's system prompt is the one a rewrite of this conversation keeps: an agent whose tools
            # changed (Claude Code's --tools on a resumed session) sends a new one from then on.
            line.head, line.system, line.tools = head, hash(system), line.tools or tools
