"""After `/fork` the screens show the fork's own totals: its parent's turns were the parent's spend."""

from __future__ import annotations

import json
from pathlib import Path

from hotloop.agent.events import StepFinished
from hotloop.sessions.export import export
from hotloop.sessions.store import list_sessions, read_session

from tui_support import idle, running_app, send, wait_until, write_config


async def test_a_forks_status_bar_counts_the_forks_own_steps_as_the_sessions_list_does(isolated_home: Path) -> None:
    write_config(isolated_home)
    async with running_app() as (app, pilot):
        for prompt in ("read README.md then grep for TODO", "read notes.txt"):
            await send(app, pilot, prompt)
            await idle(app, pilot)
        assert app.session.log is not None
        parent = app.session.log.path
        await send(app, pilot, "/fork 2")
        await wait_until(lambda: app.session.log is not None and app.session.log.path != parent, what="the fork")
        assert app.main.status.totals.steps == 0  # nothing asked in the fork yet
        await send(app, pilot, "what did you find?")
        await idle(app, pilot)
        fork = app.session.log.path
        totals = app.main.status.totals
    logged = read_session(fork)
    own = [
        e.usage
        for e in logged.events
        if isinstance(e, StepFinished) and e.ts >= logged.header.started and e.usage is not None
    ]
    assert own and totals.steps == len(own)
    assert totals.prompt == sum(usage.prompt_total or 0 for usage in own)
    assert totals.output == sum(usage.output or 0 for usage in own)
    listed = next(s for s in list_sessions(isolated_home / "data" / "sessions").sessions if s.path == fork)
    assert listed.tokens == totals.prompt + totals.output


async def test_a_forks_export_counts_its_own_spend_and_names_the_parents_apart(isolated_home: Path) -> None:
    """`sessions show`/export of a fork added the parent's steps to its cost; they are the parent's, labelled so."""
    from hotloop.cli import main

    write_config(isolated_home)
    async with running_app() as (app, pilot):
        await send(app, pilot, "read README.md then grep for TODO")
        await idle(app, pilot)
        assert app.session.log is not None
        parent = app.session.log.path
        await send(app, pilot, "/fork 1")
        await wait_until(lambda: app.session.log is not None and app.session.log.path != parent, what="the fork")
        await send(app, pilot, "what did you find?")
        await idle(app, pilot)
        fork = app.session.log.path
    exported = json.loads(export(read_session(fork), "json"))
    own = [
        e
        for e in read_session(fork).events
        if isinstance(e, StepFinished) and e.ts >= read_session(fork).header.started
    ]
    assert exported["cost"]["unpriced_steps"] + exported["cost"]["priced_steps"] == len(own)
    assert exported["parent_cost"]["priced_steps"] == 0  # the simulator is unpriced; the parent's steps are apart
    markdown = export(read_session(fork), "md")
    assert "(the parent's turns, before the fork: price unknown)" in markdown.splitlines()[2]
    assert main(["sessions", "show", fork.stem.rsplit("_", 1)[-1]]) == 0
