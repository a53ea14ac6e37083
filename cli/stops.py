"""A command's loop stopped by SIGTERM, SIGHUP or SIGINT the way Ctrl-C stops it.

The signal cancels the main task, so every `finally` on the way out runs: the pass-through stops
accepting and finishes the requests it has, each session's log is closed, nothing completed is
lost. Left to their defaults, SIGTERM and SIGHUP would end the process where it stood, with what
the log had buffered. A signal the process was started ignoring (`nohup`'s SIGHUP, a background
job's SIGINT) stays ignored. A second signal while it winds down ends the process at once, as the
signal's default would.
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Coroutine
from typing import Any, TypeVar

STOPS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
T = TypeVar("T")


class Stopped(Exception):
    """The command was stopped by a signal; `name` says which (`SIGTERM`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum
        self.name = signal.Signals(signum).name


def run_stoppable(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)`, or `Stopped` once `main` has wound down after one of `STOPS`."""
    caught: list[int] = []

    async def guarded() -> T:
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        assert task is not None

        def stop(signum: int) -> None:
            if caught:
                signal.signal(signum, signal.SIG_DFL)
                os.kill(os.getpid(), signum)
                return
            caught.append(signum)
            task.cancel()

        for signum in STOPS:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # `nohup`, or a background job's SIGINT: still ignored
                loop.add_signal_handler(signum, stop, signum)
        try:
            result = await main
        except asyncio.CancelledError:
            if caught:
                raise Stopped(caught[0]) from None
            raise
        if caught:
            raise Stopped(caught[0])
        return result

    return asyncio.run(guarded())
