"""Tools the agent can call: a name, a JSON schema, a `read_only` flag and an async handler."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hotloop.nesting import decoded
from hotloop.providers.conversation import ToolSpec

OUTPUT_LIMIT = 30_000


class ToolError(Exception):
    """A tool failed in a way the model should read about: the message becomes the error result."""


@dataclass
class ToolContext:
    """What a running tool may use: the workspace root and a way to stream output to the user."""

    call_id: str
    workspace: Path
    emit_output: Callable[[str], None] = field(default=lambda text: None)


Handler = Callable[[dict[str, Any], ToolContext], Awaitable[str]]
# What a call would do, shown before it is approved and in its pane: a unified diff, a command line.
Preview = Callable[[dict[str, Any], ToolContext], Awaitable[str]]
# Where a call writes, for rules: the path it reaches (symlinks followed) and the path it names, both below the root.
Target = Callable[[dict[str, Any], Path], tuple[str, str]]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    read_only: bool = False
    timeout: float | None = None
    source: str = "builtin"
    volatile: bool = False  # read-only, yet its answer changes on its own (a clock, a queue): never memoized
    prefetch: bool = False  # may run ahead of the model's request, when predicted (read-only tools only)
    side_effects: bool = False  # changes the workspace or the world: runs only once approved
    destructive: bool = False  # asks every time, whatever the rules allow (an MCP tool's destructiveHint)
    preview: Preview | None = None
    target: Target | None = None

    def spec(self) -> ToolSpec:
        return ToolSpec(self.name, self.description, canonical(self.parameters))


CallKey = tuple[str, str]  # a tool's name and its arguments as canonical JSON


def call_key(name: str, arguments: str) -> CallKey | None:
    """What makes two calls the same call: the tool, and the arguments whatever their key order; None if not JSON."""
    try:
        return name, json.dumps(decoded(json.loads, arguments or "{}"), sort_keys=True)
    except json.JSONDecodeError:
        return None


def canonical(schema: dict[str, Any]) -> dict[str, Any]:
    """The schema with keys sorted at every level, so it serializes to the same bytes every time."""
    sorted_schema: dict[str, Any] = json.loads(json.dumps(schema, sort_keys=True, ensure_ascii=False))
    return sorted_schema


def cap_output(text: str, limit: int = OUTPUT_LIMIT, unseen: int = 0) -> str:
    """`text` in at most `limit` characters: its head and its tail, how much was left out said between them.

    The end is kept because that is where a command says what failed. `unseen`: characters already
    missing from the middle of `text` (a stream that kept only its ends), counted in the notice.
    """
    if len(text) <= limit and not unseen:
        return text
    total = len(text) + unseen
    # Room for the notice at its longest (no cut exceeds the total); what is unseen sits at the middle.
    room = min(len(text), max(0, limit - len(_cut(total))))
    head, tail = room // 2, room - room // 2
    return f"{text[:head]}{_cut(total - head - tail)}{text[len(text) - tail :]}"


def _cut(characters: int) -> str:
    return f"\n[output truncated: {characters:,} characters left out here]\n"


@dataclass(frozen=True)
class HeldTools:
    """A server's tool list that changed only in descriptions, kept out of requests until `/mcp accept`.

    The tools come before the conversation in every request, so sending a reworded description re-prefills the
    prompt from that tool on; a server that moves a date in a description on every listing would cost that each time.
    """

    server: str
    names: tuple[str, ...]  # the tools whose descriptions changed
    tokens: int  # ≈ the tool specs' tokens from the first of them on: what accepting re-prefills at least


class ToolSpecs(tuple[ToolSpec, ...]):
    """The specs as sent, and what the cache explainer names about them: a change held back, or one just accepted."""

    held: tuple[HeldTools, ...] = ()
    accepted: tuple[HeldTools, ...] = ()  # sent for the first time by this list


class ToolRegistry:
    """The tools on offer, listed by name so that requests stay byte-stable."""

    def __init__(self, tools: list[Tool] | None = None, *, read_only: bool = False) -> None:
        self.read_only = read_only  # offers no tool with side effects (`--read-only`), whoever adds one
        self._tools: dict[str, Tool] = {}
        self._specs: ToolSpecs | None = None
        self._held: dict[str, ToolSpec] = {}  # a tool's name → the spec still sent in place of its new description
        self._holds: dict[str, HeldTools] = {}  # by source
        self._accepted: tuple[HeldTools, ...] = ()
        for tool in tools or []:
            self.add(tool)

    def add(self, tool: Tool) -> None:
        if self.read_only and tool.side_effects:
            return
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        self._specs = None

    def replace(self, tool: Tool) -> None:
        """Put `tool` in the place of the registered one of its name (a server that redefined it)."""
        if self.read_only and tool.side_effects:
            self._tools.pop(tool.name, None)
        else:
            self._tools[tool.name] = tool
        self._specs = None

    def remove_source(self, source: str) -> list[str]:
        """Drop every tool from `source` (an MCP server that died); returns their names."""
        gone = sorted(name for name, tool in self._tools.items() if tool.source == source)
        for name in gone:
            del self._tools[name]
        self._release(source)
        self._specs = None
        return gone

    def sent(self, source: str) -> dict[str, ToolSpec]:
        """The specs of `source`'s tools as requests carry them (a held-back description included), by name."""
        specs = {spec.name: spec for spec in self.specs()}
        return {tool.name: specs[tool.name] for tool in self if tool.source == source}

    def guard(self, source: str, server: str, before: dict[str, ToolSpec]) -> HeldTools | None:
        """Compare `source`'s tools, just listed again, with the specs requests carried (`before`).

        Only descriptions changed (same names, same schemas): the old specs stay in requests until `accept`,
        and what is held is returned. Anything else (a tool added or removed, a schema changed) goes through.
        """
        self._release(source)
        now = {tool.name: tool.spec() for tool in self if tool.source == source}
        if not before or now.keys() != before.keys() or now == before:
            return None
        if any(now[name].parameters != spec.parameters for name, spec in before.items()):
            return None
        names = tuple(sorted(name for name, spec in before.items() if now[name].description != spec.description))
        self._held.update((name, before[name]) for name in names)
        # Requests list the tools by name: the first reworded one and every tool after it would be prefilled again.
        after = [tool.spec() for tool in self if tool.name >= names[0]]
        held = self._holds[source] = HeldTools(server, names, _tokens(after))
        self._specs = None
        return held

    def accept(self) -> list[HeldTools]:
        """Send every held-back description from the next request on; returns what was held."""
        accepted = list(self._holds.values())
        self._held.clear()
        self._holds.clear()
        self._accepted = tuple(accepted)
        self._specs = None
        return accepted

    def held(self) -> list[HeldTools]:
        return list(self._holds.values())

    def _release(self, source: str) -> None:
        held = self._holds.pop(source, None)
        for name in held.names if held is not None else ():
            self._held.pop(name, None)

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(sorted(self._tools.values(), key=lambda tool: tool.name))

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> ToolSpecs:
        """Tool specs sorted by name, computed once per change of the tool set (held-back descriptions kept)."""
        if self._specs is None:
            self._specs = ToolSpecs(self._held.get(tool.name) or tool.spec() for tool in self)
            self._specs.held = tuple(self._holds.values())
            self._specs.accepted, self._accepted = self._accepted, ()
        return self._specs


def _tokens(specs: Iterable[ToolSpec]) -> int:
    """≈ tokens of `specs` as a request encodes them: about four bytes of JSON a token."""
    encoded = (json.dumps([spec.name, spec.description, spec.parameters], ensure_ascii=False) for spec in specs)
    return sum(len(text.encode()) for text in encoded) // 4
