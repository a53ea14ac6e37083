"""Pictures of `hotloop watch`: a real Claude Code session as the watch saved it, drawn by the watch screen."""

from __future__ import annotations

import time
from pathlib import Path

from test_snapshots import SnapCompare
from textual.app import App
from textual.pilot import Pilot

from hotloop.sessions.store import read_session
from hotloop.tui.render import theme_palette
from hotloop.tui.screens.watch import WatchScreen
from hotloop.watch import ConversationInfo

SESSION = Path(__file__).parent / "fixtures" / "watched" / "claude_code_2.1.332_watched.jsonl"
ADDRESS = ("http://127.0.0.1:8765", "sim (http://127.0.0.1:8000)")


class Watched(App[None]):
    """The watch screen fed a saved watched session's events, as the pass-through fed them live; its upstream's hour
    at `cost_per_hour` (`--provider` with one configured)."""

    def __init__(self, cost_per_hour: float | None = None) -> None:
        super().__init__()
        self.cost_per_hour = cost_per_hour

    async def on_mount(self) -> None:
        screen = WatchScreen(ADDRESS, time.perf_counter, lambda: theme_palette(self))
        await self.push_screen(screen)
        logged = read_session(SESSION)
        info = ConversationInfo(
            id=logged.header.id,
            agent="claude-cli/2.1.332",
            origin=logged.header.origin,
            parent="",
            title="read README.md and list the files here",
            provider=logged.header.provider,
            model=logged.header.model,
            base_url=logged.header.base_url,
            cost_per_hour=self.cost_per_hour,
            path=str(SESSION),
        )
        for event in logged.events:
            screen.deliver(info, event)


def test_a_watched_claude_code_session(snap_compare: SnapCompare) -> None:
    """Left, the conversation: "read README.md and list the files here", "2 requests · price unknown · claude-cli".
    Right, its transcript: the prompt as Claude Code sent it (its system reminder first), step 1's calls Read
    /tmp/wt/README.md and Bash ls -la, its strip with Claude Code's 11,899-token prefix written (write 11,895), step 2
    reading it back (read 11,895). The top line counts 1 conversation · 2 requests; the status bar sim · sim-fast."""

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.pause()

    assert snap_compare(Watched(), terminal_size=(160, 45), run_before=run_before)


def test_a_watched_claude_code_session_at_80_by_24(snap_compare: SnapCompare) -> None:
    """The same at 80×24: the list keeps its two lines cut at its width (the dollars first: "price unknown ·…"), the
    transcript the rest, the newest step at the foot; the status bar keeps provider and model."""

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.pause()

    assert snap_compare(Watched(), terminal_size=(80, 24), run_before=run_before)


def test_a_watched_session_priced_by_the_hour_at_80_by_24(snap_compare: SnapCompare) -> None:
    """At 80×24, the upstream's hour at $2.50: the top line says where agents point and then the traffic's figures
    whole, "1 conversation · 2 requests · ~$0.0007" (the estimate from the two requests' model time); the upstream,
    which the user gave on the command line, is what gave way. Each step's strip ends with its share (`~$0.0004
    (estimate)`, `~$0.0003`), the list's row with its dollars whole, "~$0.0007 · 2 req…", cut at its width."""

    async def run_before(pilot: Pilot[None]) -> None:
        await pilot.pause()

    assert snap_compare(Watched(cost_per_hour=2.5), terminal_size=(80, 24), run_before=run_before)
