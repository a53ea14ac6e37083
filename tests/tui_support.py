"""Helpers for driving the real app against the embedded simulator."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from textual.pilot import Pilot

from hotloop.config import load_config
from hotloop.tui.app import HotloopApp
from hotloop.tui.widgets.prompt_input import PromptInput

# Titles off: a title request would add to the requests the tests count; titles have tests of their own.
FAST_SIM = "[routing]\ntitles = false\n[sim]\nttft_ms = 0\nprefill_us_per_token = 0\ndecode_ms_per_token = 0\n"


def write_config(home: Path, steps: list[dict[str, Any]] | None = None, decode_ms: float = 0, sim: str = "") -> None:
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
    while app.agent is None:
        if app.status.state == "not connected":
            raise RuntimeError("the app could not connect")
        await asyncio.sleep(0.02)


async def idle(app: HotloopApp, pilot: Pilot[None]) -> None:
    """Wait for the turn in flight to end and the screen to settle."""
    while app.turn_running:
        await asyncio.sleep(0.02)
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


async def send(app: HotloopApp, pilot: Pilot[None], prompt: str) -> None:
    app.query_one(PromptInput).load_text(prompt)
    app.query_one(PromptInput).focus()
    await pilot.press("enter")


async def wait_until(condition: Callable[[], object], timeout: float = 15.0) -> None:
    """Polls `condition` until it holds; generous because the CI machine has two busy cores."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise TimeoutError("condition not reached")
        await asyncio.sleep(0.01)
