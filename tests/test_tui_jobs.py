"""The main screen and the history view hold their jobs as parts, not as bases (issue 37, item 3).

The parts' workers are still the screen's: Esc, which cancels the screen's "turn" group, stops a
/compact as it stops a turn. The real app on the embedded simulator; every wait is bounded.
"""

from __future__ import annotations

import inspect
from pathlib import Path

from hotloop.tui.items import AnswerItem, CompactionItem
from hotloop.tui.screens.main import MainScreen
from hotloop.tui.screens.watch import WatchScreen
from hotloop.tui.widgets.history_view import HistoryView

from support import present
from tui_support import idle, press, running_app, send, wait_until, write_config


def test_the_screens_and_the_history_view_have_no_base_of_hotloops_own_and_stay_under_the_cap() -> None:
    """Each holds its parts (slash commands, sessions, server panel, cursor): no hotloop class among its bases, and
    the class itself under 350 lines."""
    for cls in (MainScreen, WatchScreen, HistoryView):
        assert [base for base in cls.__mro__[1:] if base.__module__.startswith("hotloop")] == [], cls
        assert len(inspect.getsourcelines(cls)[0]) < 350, cls


async def test_escape_stops_a_slash_compact_as_it_stops_a_turn(isolated_home: Path) -> None:
    """A /compact runs in the screen's "turn" group: Esc cancels it, the status bar is ready again, the
    conversation is what it was, and the next prompt gets its answer."""
    # The conversation's own steps answer at once; the compaction's summary takes 2 s a token, longer than any test.
    write_config(isolated_home, [{"text": "first answer", "decode_ms": 0}, {"text": "second answer", "decode_ms": 0}])
    with (isolated_home / "config.toml").open("a") as config:
        config.write('[cache]\nprewarm = "off"\n')
    text = (isolated_home / "config.toml").read_text().replace("decode_ms_per_token = 0", "decode_ms_per_token = 2000")
    (isolated_home / "config.toml").write_text(text)
    async with running_app() as (app, pilot):
        await send(app, pilot, "hello")
        await idle(app, pilot)
        before = list(present(app.agent).messages)
        await send(app, pilot, "/compact")
        await wait_until(lambda: app.main.turn_running and app.main.status.state == "compacting…", what="/compact")
        press(app, "escape")
        await wait_until(lambda: not app.main.turn_running and app.main.status.state == "ready", what="the cancel")
        assert not any(isinstance(item, CompactionItem) for item in app.main.transcript.history.items)
        assert present(app.agent).messages == before
        await send(app, pilot, "go on")
        await idle(app, pilot)
        answers = [item for item in app.main.transcript.history.items if isinstance(item, AnswerItem)]
        assert answers[-1].text == "second answer"
