"""Helpers for driving the real app against the embedded simulator.

Every wait here is bounded: it ends when what it waits for happens, or raises a TimeoutError
that names it. Keys go in with `press`, which posts them as the terminal driver would and
returns at once: Pilot's own `press` then waits for the process to look idle (CPU against
wall time, up to a second a key), which the simulator's thread, streaming in the same
process, keeps from happening.
"""

from __future__ import annotations

import asyncio
import json
import unicodedata
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any
from weakref import WeakKeyDictionary

from textual import events
from textual._compositor import LayoutUpdate
from textual.app import App
from textual.command import CommandInput, CommandList, CommandPalette
from textual.keys import REPLACED_KEYS, _character_to_key, _get_unicode_name_from_key
from textual.pilot import Pilot
from textual.widgets._toast import Toast

from hotloop import paths
from hotloop.agent.events import AgentEvent
from hotloop.agent.tools.registry import Tool, ToolContext
from hotloop.config import load_config
from hotloop.core.slash import SlashError, parse
from hotloop.sim.embedded import EmbeddedSimulator
from hotloop.tui.app import HotloopApp
from hotloop.tui.live_panes import LivePane
from hotloop.tui.watch_app import WatchApp
from hotloop.tui.widgets.approval_bar import AnswerList, ApprovalBar
from hotloop.tui.widgets.prompt_input import PromptInput
from hotloop.tui.widgets.sessions_sidebar import SessionsSidebar
from hotloop.tui.widgets.transcript import Transcript
from hotloop.watch import Watch, upstream_at

from support import wait_until

__all__ = [
    "HELD",
    "after_drawn",
    "answer",
    "connected",
    "drawn",
    "held_toasts",
    "holding",
    "idle",
    "live_panes",
    "press",
    "running_app",
    "send",
    "sessions_sidebar",
    "submit",
    "transcript_text",
    "wait_until",
    "watch_app",
    "write_config",
]

# Titles off: a title request would add to the requests the tests count; titles have tests of their own.
FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"

# A scenario step that calls the `hold` tool `holding` adds: its turn runs until the test lets it go on.
HELD = {"tool_calls": [{"name": "hold", "arguments": {}}]}

# The turn each app's last prompt started: `idle` waits for it to end.
_turns_sent: WeakKeyDictionary[HotloopApp, int] = WeakKeyDictionary()


def write_config(home: Path, steps: Sequence[object] | None = None, decode_ms: float = 0, sim: str = "") -> None:
    """A config whose simulator answers at once (or at `decode_ms` a token), following `steps` if given.

    `sim` adds settings to the `[sim]` table.
    """
    text = FAST_SIM.replace("decode_ms_per_token = 0", f"decode_ms_per_token = {decode_ms}") + sim
    if steps is not None:
        scenario = home / "scenario.json"
        scenario.write_text(json.dumps(steps))
        text += f'scenario = "{scenario}"\n'
    (home / "config.toml").write_text(text)


async def connected(app: HotloopApp) -> None:
    """Wait for the app to connect and be ready for prompts (MCP tools registered); a RuntimeError if it could not."""
    await wait_until(
        lambda: (app.agent is not None and app.session.ready) or app.main.status.state == "not connected",
        what="the app to connect",
    )
    if app.agent is None or not app.session.ready:
        raise RuntimeError("the app could not connect")


async def idle(app: HotloopApp, pilot: Pilot[None]) -> None:
    """Wait for the turn the last prompt started to end, then for the screen to settle."""
    turn = _turns_sent.get(app, 0)
    await wait_until(
        lambda: app.agent is not None and app.agent.turn >= turn and not app.main.turn_running,
        what=f"turn {turn} to end (the agent is at turn {app.agent.turn if app.agent else None})",
    )
    await pilot.pause()


@asynccontextmanager
async def running_app(
    size: tuple[int, int] = (100, 30), **options: Any
) -> AsyncIterator[tuple[HotloopApp, Pilot[None]]]:
    app = HotloopApp(load_config(), **options)
    async with app.run_test(size=size) as pilot:
        await connected(app)
        app.query_one(PromptInput).cursor_blink = False
        yield app, pilot


def holding(app: HotloopApp) -> asyncio.Event:
    """Add the `hold` tool to `app`'s tools: a `HELD` step's call ends once the event returned is set. A test that
    must act while a turn runs holds it open so, not with a stream it hopes is slow enough for the machine."""
    release = asyncio.Event()

    async def hold(arguments: dict[str, Any], context: ToolContext) -> str:
        await release.wait()
        return "let go"

    assert app.session.runtime is not None
    app.session.runtime.tools.add(Tool("hold", "Wait.", {"type": "object"}, hold))
    return release


def press(app: App[Any], *keys: str) -> None:
    """Post key presses to the app as its terminal driver would; they are handled in order, after this returns.

    The events are built as Pilot builds them.
    """
    for key in keys:
        if len(key) == 1 and not key.isalnum():
            key = _character_to_key(key)
        try:
            character: str | None = unicodedata.lookup(_get_unicode_name_from_key(REPLACED_KEYS.get(key, key)))
        except KeyError:
            character = key if len(key) == 1 else None
        event = events.Key(key, character)
        event.set_sender(app)
        app.post_message(event)


async def submit(app: HotloopApp) -> None:
    """Press Enter in the prompt box; returns once the box has taken what it held.

    A prompt that is not a /command starts a turn: `idle` then waits for that turn to end.
    """
    box = app.query_one(PromptInput)
    text = box.text
    try:
        command = parse(text) is not None
    except SlashError:
        command = True  # the app explains it; no turn starts
    if not command and app.agent is not None:
        _turns_sent[app] = app.agent.turn + 1
    press(app, "enter")
    try:
        await wait_until(lambda: box.text != text, what=f"the prompt box to take {text!r}")
    except TimeoutError as error:
        said = [str(notification.message) for notification in app._notifications]
        raise TimeoutError(f"{error} (the app is {app.main.status.state!r} and said {said})") from None


async def send(app: HotloopApp, pilot: Pilot[None], prompt: str) -> None:
    """Type `prompt` in the prompt box and press Enter (see `submit`)."""
    box = app.query_one(PromptInput)
    box.load_text(prompt)
    box.focus()
    await submit(app)


def watch_app(sim: EmbeddedSimulator, cost_per_hour: float | None = None) -> WatchApp:
    """The watch's app, on a free port, on a real watch of `sim` (its hour at `cost_per_hour`) whose only sink is the
    app's own."""
    upstream = upstream_at(sim.url, "sim", cost_per_hour)
    watch = Watch(upstream, lambda _c, _e: None, folder=paths.sessions_dir(), workspace=Path.cwd())
    return WatchApp(watch, "127.0.0.1", 0, load_config())


def after_drawn(app: WatchApp, kind: type[AgentEvent], then: Callable[[str, AgentEvent], None]) -> None:
    """`then(conversation, event)` for each watched event of `kind`, once the app's own sink has drawn it."""
    draw = app.watch_.sink

    def sink(conversation: str, event: AgentEvent) -> None:
        draw(conversation, event)
        if isinstance(event, kind):
            then(conversation, event)

    app.watch_.sink = sink


def transcript_text(transcript: Transcript) -> str:
    """What the transcript's entries say, as drawn at 120 columns."""
    context = transcript.context(120)
    return "\n".join(strip.text for item in transcript.history.items for strip in item.render(context).lines)


def live_panes(transcript: Transcript, status: str | None = None) -> list[LivePane]:
    """The step in flight's tool panes (those with `status`), in the order their calls started."""
    return [pane for pane in transcript.panes.panes.values() if status is None or pane.status == status]


def drawn(app: App[Any]) -> str:
    """What the app's screen draws now: the text of every line, as it goes to the terminal."""
    update = app.screen._compositor.render_update(full=True, screen_stack=app._background_screens)
    assert isinstance(update, LayoutUpdate)  # a full update is always one
    return "\n".join("".join(strip.text for strip in line) for line in update.strips)


async def answer(app: HotloopApp, *keys: str) -> None:
    """Press `keys` on the approval bar once its answers have the focus and its grace is over."""
    bar = app.query_one(ApprovalBar)
    await wait_until(
        lambda: bar.requests and bar.armed and isinstance(app.focused, AnswerList), what="the question to take keys"
    )
    press(app, *keys)


def notified(app: App[Any], text: str) -> bool:
    """Whether a notification (a toast, shown or gone) said `text`."""
    return any(text in str(notification.message) for notification in app._notifications)


async def search_palette(app: App[Any], query: str, best: str) -> None:
    """Open the command palette, type `query`, and wait until `best` is the highlighted first match."""
    press(app, "ctrl+p")
    await wait_until(lambda: isinstance(app.screen, CommandPalette) and isinstance(app.focused, CommandInput))
    press(app, *query)
    commands = app.screen.query_one(CommandList)

    def highlighted() -> str:
        index = commands.highlighted
        return str(commands.get_option_at_index(index).prompt) if index is not None and commands.option_count else ""

    # Results arrive from the palette's search task, however long that takes.
    await wait_until(
        lambda: app.screen.query_one(CommandInput).value == query and highlighted().startswith(best),
        what=f"the palette to offer {best!r} for {query!r}",
    )


async def held_toasts(app: App[Any], count: int = 1) -> list[Toast]:
    """The screen's toasts once `count` are up, kept there: a toast goes a few seconds after it is mounted, which a
    busy machine can spend before a picture or a check. Their timers stop as soon as they run."""
    await wait_until(lambda: sum(bool(toast._timers) for toast in app.screen.query(Toast)) >= count, what="the toasts")
    toasts = list(app.screen.query(Toast))
    for toast in toasts:
        toast._notification.timeout = 3600  # and no refresh of the notifications reaps it
        for timer in toast._timers:
            timer.pause()
    return toasts


async def sessions_sidebar(app: HotloopApp) -> SessionsSidebar:
    """The sessions sidebar (ctrl+b) once its list is composed: it is in the DOM before its children are."""
    await wait_until(lambda: bool(app.query("SessionsSidebar SessionList")), what="the sessions sidebar's list")
    return app.query_one(SessionsSidebar)
