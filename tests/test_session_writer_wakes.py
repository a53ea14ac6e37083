"""The writer thread wakes once for what a turn of an event loop hands over, at once for a caller that waits on
it or has no loop, and runs everything it was handed, in order."""

from __future__ import annotations

import asyncio
import functools
import threading

from hotloop.sessions.writer import Writer

BOUND = 30.0


async def test_what_one_turn_of_the_loop_hands_over_runs_after_the_turn_in_order() -> None:
    """Jobs handed over on the loop wait for the loop's next turn (the thread is not woken once a job, taking the
    GIL from the loop each time), then all run, in the order handed over, on the writer thread."""
    writer = Writer()
    ran: list[int] = []
    threads: set[str] = set()
    last = threading.Event()

    def job(number: int) -> None:
        ran.append(number)
        threads.add(threading.current_thread().name)

    for number in range(100):
        writer.submit(functools.partial(job, number))
    writer.submit(last.set)
    # Still in the turn that handed them over: a thread woken by a hand-over would have run them meanwhile.
    assert not last.wait(0.2)
    assert ran == []
    await asyncio.sleep(0)  # the loop's next turn
    assert await asyncio.get_running_loop().run_in_executor(None, last.wait, BOUND)
    assert ran == list(range(100))
    assert threads == {"hotloop-session-writer"}


async def test_a_caller_on_the_loop_that_waits_for_the_writer_is_not_left_waiting() -> None:
    """`done` called on the loop (a log's flush or close) blocks the loop's next turn: the thread is woken at once,
    and what was handed over before it has run when it returns."""
    writer = Writer()
    ran: list[str] = []
    writer.submit(lambda: ran.append("first"))
    writer.later(0.0, lambda: ran.append("second"))
    assert writer.done(BOUND)
    assert ran == ["first", "second"]


def test_a_hand_over_without_a_loop_wakes_the_thread_at_once() -> None:
    """From a thread with no event loop (a script, the writer thread itself), a hand-over wakes the thread, with
    nothing else to wait for; work the thread hands itself runs too."""
    writer = Writer()
    first, second = threading.Event(), threading.Event()

    def both() -> None:
        first.set()
        writer.submit(second.set)

    writer.submit(both)
    assert first.wait(BOUND)
    assert second.wait(BOUND)


async def test_work_handed_over_while_the_thread_runs_is_not_stranded() -> None:
    """A job handed over on the loop while the thread is busy with earlier ones runs too: 2,000 jobs over 200
    turns of the loop, each turn's own wake-up or the running thread's, all run."""
    writer = Writer()
    count = 0
    last = threading.Event()

    def job() -> None:
        nonlocal count
        count += 1

    for _ in range(200):
        for _ in range(10):
            writer.submit(job)
        await asyncio.sleep(0)
    writer.submit(last.set)
    await asyncio.sleep(0)
    assert await asyncio.get_running_loop().run_in_executor(None, last.wait, BOUND)
    assert count == 2000


def test_a_loop_that_stops_before_its_next_turn_leaves_the_others_their_wake_up() -> None:
    """A loop that hands over and stops before the turn that would wake the thread (its wake-up never comes) holds
    up neither a hand-over from another loop nor one from a thread without a loop."""
    writer = Writer()
    stranded, later, plain = threading.Event(), threading.Event(), threading.Event()

    async def hand_over_and_stop() -> None:
        writer.submit(stranded.set)
        asyncio.get_running_loop().stop()

    stopped = asyncio.new_event_loop()
    try:
        handed = stopped.create_task(hand_over_and_stop())
        stopped.run_forever()
        assert handed.done()
    finally:
        stopped.close()

    async def hand_over() -> None:
        writer.submit(later.set)
        await asyncio.sleep(0)

    asyncio.run(hand_over())
    assert later.wait(BOUND) and stranded.is_set()  # the other loop's wake-up took the stranded job too
    writer.submit(plain.set)
    assert plain.wait(BOUND)
