"""Switching you can trust (issue 35, item 3; the first frame, item 7): a pick from the palette or a slash command
lands whatever the turn is doing, the status bar names where it goes at once, picking what answers already
switches nothing, and the provider is named before it has answered anything. The real app on the embedded
simulator, over loopback HTTP; every wait is bounded."""

from __future__ import annotations

from pathlib import Path

from textual.command import CommandPalette

from hotloop.agent.events import AgentEvent, ProviderSwitched, decode
from hotloop.config import load_config
from hotloop.core.session import SessionOptions
from hotloop.providers.conversation import AssistantMessage
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.app import HotloopApp

from support import present
from tui_support import drawn, idle, notified, press, running_app, search_palette, send, wait_until, write_config


def simulator(app: HotloopApp) -> EmbeddedSimulator:
    return present(present(app.session.runtime).simulator)


def logged(app: HotloopApp) -> list[AgentEvent]:
    """The events in the session's log so far (flushed first)."""
    log = present(app.session.log)
    log.flush()
    return [decode(line) for line in log.path.read_bytes().splitlines()[1:]]


async def pick(app: HotloopApp, query: str, best: str) -> None:
    """ctrl+p, type `query`, wait until `best` is the highlighted first match, and press Enter."""
    await search_palette(app, query, best)
    press(app, "enter")
    await wait_until(lambda: not isinstance(app.screen, CommandPalette), what="the palette to close")


async def test_a_palette_pick_after_a_cancelled_turn_switches(isolated_home: Path) -> None:
    """Issue 35: after Esc cancelled a turn, ctrl+p → `sim-anthropic sim-balanced` → Enter closed the palette and
    nothing switched. The pick lands: a ProviderSwitched in the log, the status bar on the new provider, and every
    request after it (the next prompt's) goes to the simulator's Anthropic API."""
    write_config(isolated_home, [{"text": "word " * 400}, {"text": "second answer"}], decode_ms=10)
    async with running_app() as (app, pilot):
        await send(app, pilot, "talk at length")
        await wait_until(lambda: app.main.transcript.answer.shown_to > 30, what="the answer to stream")
        press(app, "escape")
        await idle(app, pilot)
        partial = present(app.agent).messages[-1]
        assert isinstance(partial, AssistantMessage) and partial.interrupted
        before = len(simulator(app).server.requests)

        await pick(app, "sim-anthropic sim-balanced", "model: sim-anthropic · sim-balanced")
        await wait_until(lambda: any(isinstance(e, ProviderSwitched) for e in logged(app)), what="the switch")
        (switched,) = [e for e in logged(app) if isinstance(e, ProviderSwitched)]
        assert (switched.provider, switched.model) == ("sim-anthropic", "sim-balanced")
        await wait_until(lambda: app.main.status.state == "ready", what="the status bar to be ready")
        assert (app.main.status.provider, app.main.status.model) == ("sim-anthropic", "sim-balanced")

        await send(app, pilot, "go on")
        await idle(app, pilot)
    after = list(simulator(app).server.requests)[before:]
    assert after and all(request.path.endswith("/v1/messages") for request in after), [r.path for r in after]


async def test_a_switch_names_its_target_in_the_status_bar_before_it_lands(isolated_home: Path) -> None:
    """`/provider sim-anthropic`: the status bar says `● switching to` with sim-anthropic named while the agent is
    still on sim (an SDK to import, a client to build), then `● ready` on sim-anthropic, and the next prompt goes
    to the new provider."""
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        status = app.main.status
        seen: list[tuple[str, str, str]] = []  # the bar's state and provider, and the agent's provider, at each change

        def look(_: str) -> None:
            seen.append((status.state, status.provider, present(app.agent).provider.name))

        app.main.watch(status, "state", look, init=False)
        app.main.watch(status, "provider", look, init=False)
        before = len(simulator(app).server.requests)
        await send(app, pilot, "/provider sim-anthropic")
        await send(app, pilot, "what now?")  # queued behind the switch, never sent to sim
        await idle(app, pilot)

    assert ("switching to", "sim-anthropic", "sim") in seen, seen
    assert seen.index(("switching to", "sim-anthropic", "sim")) < seen.index(
        ("ready", "sim-anthropic", "sim-anthropic")
    )
    turns = [r for r in list(simulator(app).server.requests)[before:] if "/v1/" in r.path]
    assert turns and all(r.path.endswith("/v1/messages") for r in turns), [r.path for r in turns]


async def test_picking_what_answers_already_switches_nothing(isolated_home: Path) -> None:
    """Issue 35: re-picking the provider in use logged a switch whose note called its cache cold. The palette's
    `model: sim · sim-balanced`, `/provider sim`, `/tier balanced` and `/model sim-balanced` on sim · sim-balanced
    say so and log no switch."""
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "hello")
        await idle(app, pilot)
        await pick(app, "sim sim-balanced", "model: sim · sim-balanced")
        await wait_until(lambda: notified(app, "already on sim · sim-balanced: nothing to switch"), what="the note")
        for command in ("/provider sim", "/tier balanced", "/model sim-balanced"):
            app._notifications.clear()
            await send(app, pilot, command)
            await wait_until(lambda: notified(app, "already on sim · sim-balanced"), what=f"{command}'s note")
        assert not [e for e in logged(app) if isinstance(e, ProviderSwitched)]
        assert app.main.status.state == "ready" and app.main.status.provider == "sim"


async def test_a_pick_during_a_turn_is_made_when_the_turn_ends(isolated_home: Path) -> None:
    """A pick while a turn streams is said at once (`switching to sim · sim-fast when this turn ends`) and made when
    the turn ends: the next turn's request goes to sim-fast."""
    write_config(isolated_home, [{"text": "word " * 200}, {"text": "fast answer"}], decode_ms=10)
    async with running_app() as (app, pilot):
        await send(app, pilot, "talk")
        await wait_until(lambda: app.main.transcript.answer.shown_to > 10, what="the answer to stream")
        await send(app, pilot, "/tier fast")
        await wait_until(lambda: notified(app, "switching to sim · sim-fast when this turn ends"), what="the note")
        await idle(app, pilot)
        await wait_until(lambda: app.main.status.model == "sim-fast" and app.main.status.state == "ready")
        await send(app, pilot, "again")
        await idle(app, pilot)
        assert simulator(app).server.requests[-1].model == "sim-fast"


async def test_the_status_bar_names_the_provider_before_it_answers(isolated_home: Path) -> None:
    """Issue 35, item 7: the bar said `● connecting…` with no provider named. It names the provider from the first
    frame: here one that can't be reached yet, named while the app waits to ask it again."""
    write_config(isolated_home)
    options = SessionOptions(provider="openai", base_url="http://127.0.0.1:9/v1")
    app = HotloopApp(load_config(), options)
    async with app.run_test(size=(100, 30)):
        status = app.main.status
        assert status.provider == "openai"  # composed so, before the connection was tried
        await wait_until(lambda: status.state.startswith("connecting… retry in"), what="the retry countdown")
        line = drawn(app).splitlines()[-2]
        assert line.startswith(" ● connecting… retry in") and "│  openai" in line, line
