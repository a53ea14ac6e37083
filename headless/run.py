"""`hotloop run`: prompts as consecutive turns of one session, printed as they stream.

A `Slash` among the prompts (`/provider`, `/model`, `/tier`) switches before the next turn, `/compact` compacts;
every switch is checked before the first turn runs, so a typo fails at once. At the end, a
line on stderr names the session saved and how to continue it. When stdout's reader goes away
(`| head`), the turn is cancelled as Ctrl-C would cancel it, and the run exits 141 as SIGPIPE
would have it, quietly: no line for the cancel nor the session saved (the printer's docstring);
a session whose only step was cut before the provider billed it is not kept.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

from hotloop.agent.events import AgentEvent, Notice
from hotloop.config import Config, load_config, resolve
from hotloop.core.session import SIDE_JOB_GRACE, Session, SessionOptions
from hotloop.core.slash import SWITCHES, Slash
from hotloop.headless.printer import Printer
from hotloop.headless.saved import say_saved


async def run(options: SessionOptions, prompts: list[str | Slash], json_lines: bool = False) -> int:
    """Run the prompts as consecutive turns; 0 if every turn ended normally, else 1."""
    config = load_config()
    printer = Printer(json_lines=json_lines, secrets=config.secrets())

    def show(event: AgentEvent) -> None:
        # The log exists from the first turn (or a resume) on: --json's first line carries its id.
        if session.log is not None:
            printer.session_id = session.log.id
        printer(event)

    session = Session(config, options, show)
    printer.pricer = (
        session.config.pricer()
    )  # the config as the session points it: a --base-url server is priced as one
    if options.resume is None:
        check_switches(session.config, resolve(session.config, session.choice).settings.name, prompts)
    try:
        await session.open()
        failed = await _while_read(printer, _run_prompts(session, prompts))
    finally:
        await session.close(SIDE_JOB_GRACE)
        if session.logs.problem is not None:
            printer(Notice(level="warning", message=session.logs.problem))
        printer.close()
        if not printer.closed:
            say_saved(session.logs.last, options.workspace)
    if printer.closed:
        return 141
    # A step the output limit cut off, or a call no one could approve, left work undone even if the turn went on.
    return 1 if failed or session.cut_off_steps or session.unapproved_calls else 0


async def _while_read(printer: Printer, work: Coroutine[Any, Any, bool]) -> bool:
    """`work`'s result; cancelled once stdout's reader goes away, and then True."""
    task = asyncio.ensure_future(work)
    printer.on_closed = task.cancel
    try:
        return await task
    except asyncio.CancelledError:
        current = asyncio.current_task()
        if not printer.closed or (current is not None and current.cancelling()):
            raise  # cancelled from outside (Ctrl-C): not ours to swallow
        return True


async def _run_prompts(session: Session, prompts: list[str | Slash]) -> bool:
    """Run the turns and switches in order; True if a turn failed (the rest would only fail again) or a compaction
    did (the conversation went on as it was)."""
    assert session.agent is not None
    failed = False
    for prompt in prompts:
        if isinstance(prompt, Slash) and prompt.name == "/compact":
            failed |= await session.compact() is None
        elif isinstance(prompt, Slash):
            await session.switch(prompt.choice(session.agent.provider.name))
        elif (await session.turn(prompt)).reason == "error":
            return True
    return failed


def check_switches(config: Config, provider: str, prompts: list[str | Slash]) -> None:
    """Fail before the first turn if a switch among the prompts names a provider, model or tier that can't be used."""
    for prompt in prompts:
        if isinstance(prompt, Slash) and prompt.name in SWITCHES:
            provider = resolve(config, prompt.choice(provider)).settings.name
