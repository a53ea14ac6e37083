"""Agents are built once: what the session, the router and the pre-warmer hand an agent goes in when it is made.

Statically (the AST, nothing imported): outside `agent/` and `providers/`, no code assigns to an attribute of an
agent, its tool runner, its prefetcher or predictor, or a provider (`agent.runner.summarize = …`,
`provider.cache_ttl = …`, `setattr(agent, …)`), except through a property setter the class itself declares
(`Agent.system`: a prompt the user's instructions changed). One allowance, named: the runtime, where providers are
made, points a provider at its model and records what discovery found of its server. The scan is shown to bite on
the assignments it replaced. And by behaviour: the agents a session makes share one prefetch predictor and follow
the server it follows, and a provider writes its cache for the lifetime the session's pauses chose.
"""

from __future__ import annotations

import ast
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from test_cache_lifetime import session_with_a_pause

from hotloop.agent.events import AgentEvent, Notice
from hotloop.config import load_config
from hotloop.core.session import Session, SessionOptions

from support import present

ROOT = Path(__file__).resolve().parent.parent
SCANNED = ("core", "tui", "headless", "acp_server", "cli")
# The names an agent and its parts go by: the object assigned to is one of them when its expression ends in one.
PARTS = {"agent", "runner", "prefetcher", "predictor", "provider", "helper"}
# Where providers are made: connected to a model, and told what discovery found (core/runtime.py).
MADE_HERE = {("core/runtime.py", attribute) for attribute in ("model", "server", "send_priority")}
OWNERS = ("agent", "providers")  # the packages whose classes' own setters may be used


def declared_setters() -> set[str]:
    """Every property setter the agent's and the providers' classes declare (`@system.setter`)."""
    setters = set()
    for package in OWNERS:
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.FunctionDef):
                    for decorator in node.decorator_list:
                        if isinstance(decorator, ast.Attribute) and decorator.attr == "setter":
                            setters.add(node.name)
    return setters


def part_name(node: ast.expr) -> str | None:
    """The part an expression names (`self.agent.runner` → runner), or None."""
    name = node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
    return name if name in PARTS else None


def targets(node: ast.AST) -> Iterator[ast.expr]:
    """What an assignment writes to, tuples unpacked (`target, agent.route = …`)."""
    written: list[ast.expr] = []
    if isinstance(node, ast.Assign):
        written = list(node.targets)
    elif isinstance(node, (ast.AugAssign, ast.AnnAssign, ast.For, ast.AsyncFor)):
        written = [node.target]
    while written:
        target = written.pop()
        if isinstance(target, (ast.Tuple, ast.List)):
            written.extend(target.elts)
        elif isinstance(target, ast.Starred):
            written.append(target.value)
        else:
            yield target


def writes(source: str, where: str, setters: set[str]) -> list[str]:
    """Each assignment in `source` to an attribute of an agent's part, as `where:line: code`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        written: list[tuple[ast.expr, str]] = [
            (target.value, target.attr) for target in targets(node) if isinstance(target, ast.Attribute)
        ]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in ("setattr", "delattr"):
            written.append((node.args[0], "?"))
        for owner, attribute in written:
            if part_name(owner) is None or attribute in setters or (where, attribute) in MADE_HERE:
                continue
            found.append(f"{where}:{owner.lineno}: {ast.unparse(node).splitlines()[0]}")
    return found


def scanned() -> Iterator[tuple[str, str]]:
    for folder in SCANNED:
        for path in sorted((ROOT / folder).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text(encoding="utf-8")


def test_nothing_sets_an_agents_or_a_providers_attributes_after_it_is_made() -> None:
    """No module of the core or a frontend writes to an agent, its runner, prefetcher or predictor, or a provider."""
    setters = declared_setters()
    assert setters == {"system"}  # `Agent.system`; a new setter is a choice this test should be told of
    found = [line for where, source in scanned() for line in writes(source, where, setters)]
    assert found == []


@pytest.mark.parametrize(
    "line",
    [
        "agent.runner.summarize = lambda call, content: summarize(agent, call, content)",  # the router's, before
        "agent.server_residency = self.server.residency",  # the session's, before
        "self.agent.runner.prefetcher.predictor = before",
        "target, agent.route = await self.route(prompt, agent)",
        "provider.cache_ttl = choice.ttl",  # the pre-warmer's, before
        "helper.cache_ttl = ttl",
        "agent.turn += 1",
        "setattr(agent, 'route', '')",
        "for agent.route in routes: pass",
    ],
)
def test_the_scan_finds_each_write_it_forbids(line: str) -> None:
    """Each of the writes the agent's build replaced, planted in the pre-warmer's module, is found."""
    assert len(writes(f"async def planted():\n    {line}\n", "core/prewarm.py", declared_setters())) == 1


def test_the_scan_leaves_the_classes_own_setters_and_the_runtimes_connections_alone() -> None:
    """A declared setter (`agent.system`), `self`'s own fields and the runtime's provider fields are not writes."""
    source = "agent.system = text\nself.route = ''\nprovider.model = target.model\nstatus.model = model\n"
    assert writes(source, "core/runtime.py", declared_setters()) == []
    assert len(writes(source, "core/session.py", declared_setters())) == 1  # the model, outside the runtime


# No title requests, no pre-warm: a test's requests are its own steps.
QUIET = '[routing]\ntitles = false\n[cache]\nprewarm = "off"\n'
FAST_SIM = "[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\ncache_min_tokens = 64\n"


async def test_a_new_conversations_agent_keeps_what_prefetch_learned(isolated_home: Path, workspace: Path) -> None:
    """`/new` makes another agent: it guesses from what the session's first agent was taught, not from nothing."""
    (isolated_home / "config.toml").write_text(QUIET + FAST_SIM)
    session = Session(load_config(), SessionOptions(provider="sim", workspace=workspace), lambda event: None)
    await session.open()
    try:
        first = present(session.agent)
        taught = present(first.runner.prefetcher).predictor
        taught.learn("ctx", [("read_file", '{"path": "a"}')])
        session.new_conversation()
        second = present(session.agent)
        assert second is not first
        assert present(second.runner.prefetcher).predictor.predict("ctx") == [("read_file", '{"path": "a"}')]
    finally:
        await session.close()


async def test_an_agent_explains_misses_with_the_followed_servers_residency(
    isolated_home: Path, workspace: Path
) -> None:
    """The residency the session follows is the one every agent it makes quotes, from the first request on."""
    (isolated_home / "config.toml").write_text(QUIET + FAST_SIM)
    session = Session(load_config(), SessionOptions(provider="sim", workspace=workspace), lambda event: None)
    await session.open()
    try:
        first = present(session.agent)
        session.new_conversation()
        for agent in (first, present(session.agent)):
            assert agent.server_residency == session.server.residency
    finally:
        await session.close()


async def test_the_pre_warmer_chooses_a_lifetime_the_provider_asks_for(isolated_home: Path, workspace: Path) -> None:
    """The pre-warmer never writes the provider: it chooses, and the provider the runtime built asks at each request."""
    (isolated_home / "config.toml").write_text(QUIET + FAST_SIM)
    events: list[AgentEvent] = []
    session = Session(load_config(), SessionOptions(provider="sim-anthropic", workspace=workspace), events.append)
    await session.open()
    try:
        provider = present(session.agent).provider
        before = provider.cache_ttl
        for event in session_with_a_pause(400, t0=time.time() - 415):  # a pause past 5 minutes, as if seen
            session.prewarmer.rhythm.observe(event)
        session.prewarmer.after_turn(present(session.agent))
        assert any(isinstance(e, Notice) and e.message.startswith("cache lifetime: 1-hour") for e in events)
        assert (before, provider.cache_ttl) == ("5m", "1h")
        await session.turn("hello")
        requests = present(present(session.runtime).simulator).server.requests
        assert b'"ttl":"1h"' in requests[-1].body
    finally:
        await session.close()
