"""The one thread that writes every session log of the process, so no caller waits on a disk.

A caller hands over work (`submit`) and goes on; the thread runs it in order, and runs work given a
time (`later`) once that time has come. One thread for the process, not one per log: the watch opens
a log per conversation, and starting a thread costs ~0.35 ms on the caller where a hand-over costs
~0.1 µs; one thread also wakes once for whatever several logs handed over meanwhile.
"""

from __future__ import annotations

import atexit
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable

Job = Callable[[], None]
DRAIN_AT_EXIT = 10.0  # seconds an exiting process gives the thread to write what it was handed


class Writer:
    """Runs jobs in the order handed over, on a daemon thread started by the first one."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[tuple[float, Job]] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
        self.later(0.0, job)

    def later(self, due: float, job: Job) -> None:
        """Run `job` once `time.monotonic()` has reached `due`, after what was handed over before it."""
        if self._thread is None:
            self._start()
        self._queue.put((due, job))

    def done(self, timeout: float) -> bool:
        """Wait, at most `timeout` seconds, until what was handed over so far has run; whether it has."""
        ran = threading.Event()
        self.submit(ran.set)
        return ran.wait(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="hotloop-session-writer", daemon=True)
                self._thread.start()
                # A daemon thread stops dead at exit: what it holds is written first (SIGTERM, a return from main).
                atexit.register(self.done, DRAIN_AT_EXIT)

    def _run(self) -> None:
        waiting: list[tuple[float, int, Job]] = []
        order = itertools.count()
        while True:
            timeout = max(waiting[0][0] - time.monotonic(), 0.0) if waiting else None
            try:
                due, job = self._queue.get(timeout=timeout)
            except queue.Empty:
                pass
            else:
                if due <= 0.0:
                    job()
                else:
                    heapq.heappush(waiting, (due, next(order), job))
            while waiting and waiting[0][0] <= time.monotonic():
                heapq.heappop(waiting)[2]()


WRITER = Writer()
