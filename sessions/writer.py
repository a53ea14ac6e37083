"""The one thread that writes every session log of the process, so no caller waits on a disk.

A caller hands over work (`submit`) and goes on; the thread runs it in order, and runs work given a
time (`later`) once that time has come. One thread for the process, not one per log: the watch opens
a log per conversation, and starting a thread costs ~0.35 ms on the caller where a hand-over costs
~0.1 µs; one thread also wakes once for whatever several logs handed over meanwhile.

Handed over on an event loop, the work waits for the loop's next turn to ring the thread (a loop that runs
one more turn never strands it), and the thread, woken, gathers for `GATHER` without the GIL before it
takes the work: a watch serving 8 or 32 streams hands over three times a request, and each wake takes
the GIL from the loop (a context switch both ways, and the loop waiting for its turn). What the loop
hands over meanwhile goes with that wake (and a log's hand-overs in one job, one write: `SessionLog`).
Taken at once, the thread's wakes were ~15% of the watch's CPU (an A/B against writing on the loop);
gathered for 10 ms, the watch switches context 3.6 times a request, not 5.1 (the hop: 3.3), and took
1.57× the hop's CPU where it took 1.66× (`benchmarks/passthrough.py`, one run beside the other); gathered
for 20 ms, 2.5% less CPU again (8 streams, 14 rounds interleaved with the same code at 10 ms; 50 ms took
no more off), for twice the hand-overs SIGKILL can lose.
Elsewhere (no loop), and when a caller waits (`done`, `settled`), the thread takes the work at once.
"""

from __future__ import annotations

import asyncio
import atexit
import collections
import contextlib
import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable

Job = Callable[[], None]
DRAIN_AT_EXIT = 10.0  # seconds an exiting process gives the thread to write what it was handed
GATHER = 0.02  # seconds a wake on an event loop's ring gathers hand-overs: what SIGKILL can lose


class Writer:
    """Runs jobs in the order handed over, on a daemon thread started by the first one."""

    def __init__(self) -> None:
        self._jobs: collections.deque[tuple[float, Job]] = collections.deque()
        self._bell: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._hurry = threading.Event()  # a caller waits, or no loop rang: the work is taken without gathering
        # The loop whose next turn wakes the thread: what it hands over meanwhile goes with that wake-up.
        self._ringing: asyncio.AbstractEventLoop | None = None
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def submit(self, job: Job) -> None:
        self.later(0.0, job)

    def later(self, due: float, job: Job) -> None:
        """Run `job` once `time.monotonic()` has reached `due`, after what was handed over before it."""
        if self._thread is None:
            self._start()
        self._jobs.append((due, job))
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop in this thread: nothing would ring later
            self._ring_now()
            return
        # Kept per loop: a loop stopped before its next turn never rings, and must not silence the others.
        if self._ringing is not loop:
            self._ringing = loop
            loop.call_soon(self._bell.put, None)

    def _ring_now(self) -> None:
        self._hurry.set()
        self._bell.put(None)

    def done(self, timeout: float) -> bool:
        """Wait, at most `timeout` seconds, until what was handed over so far has run; whether it has."""
        ran = threading.Event()
        self.submit(ran.set)
        self._ring_now()  # a caller on the loop waits here, so the loop's next turn would never come
        return ran.wait(timeout)

    async def settled(self) -> None:
        """Until what was handed over so far has run, without holding the loop meanwhile."""
        loop = asyncio.get_running_loop()
        ran: asyncio.Future[None] = loop.create_future()

        def settle() -> None:
            if not ran.done():  # the waiter may have given up (its bound)
                ran.set_result(None)

        def wake() -> None:
            loop.call_soon_threadsafe(settle)

        self.submit(wake)
        self._ring_now()
        await ran

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
        jobs = self._jobs
        while True:
            timeout = max(waiting[0][0] - time.monotonic(), 0.0) if waiting else None
            with contextlib.suppress(queue.Empty):
                self._bell.get(timeout=timeout)
                self._hurry.wait(GATHER)
            self._hurry.clear()
            # Cleared before the jobs are taken: one handed over from here on rings again (at worst, once too many).
            self._ringing = None
            while jobs:
                due, job = jobs.popleft()
                if due <= 0.0:
                    job()
                else:
                    heapq.heappush(waiting, (due, next(order), job))
            while waiting and waiting[0][0] <= time.monotonic():
                heapq.heappop(waiting)[2]()


WRITER = Writer()
