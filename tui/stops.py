"""A service's stop or a closed terminal quits an app as its quit key does, so every session's log is whole.

Left to their defaults, SIGTERM and SIGHUP end the process where it stands: the turn in flight gets no end in
its log and what the log's writer holds is lost. A signal the process was started ignoring (`nohup`'s SIGHUP)
stays ignored.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable

STOPS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def quit_on_stops(quit: Callable[[], object]) -> None:
    """Each of `STOPS` calls `quit` on the running loop, until `forget_stops`."""
    loop = asyncio.get_running_loop()
    for stop in STOPS:
        if signal.getsignal(stop) is not signal.SIG_IGN:
            loop.add_signal_handler(stop, quit)


def forget_stops() -> None:
    loop = asyncio.get_running_loop()
    for stop in STOPS:
        loop.remove_signal_handler(stop)
