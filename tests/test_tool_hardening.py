"""The built-in tools cannot freeze the event loop, exhaust memory or read outside the workspace.

Real files in a temporary workspace: FIFOs, sockets, sparse 2 GiB files, symlinks swapped
while reads run. A tool that blocked the event loop would hang its test, so every test that
could block has a way out that turns a hang into a failure.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, suppress
from pathlib import Path
from types import FrameType

import pytest

from hotloop.agent.events import ToolFinished
from hotloop.agent.tools.builtins import GREP_FILE_BYTES, GREP_TOTAL_BYTES, builtin_tools
from hotloop.agent.tools.registry import ToolContext, ToolError

from support import make_agent, sim_with_scenario, wait_until

TOOLS = {tool.name: tool for tool in builtin_tools()}
GiB = 1024**3
MiB = 1024**2


async def call(workspace: Path, name: str, **args: object) -> str:
    return await TOOLS[name].handler(dict(args), ToolContext("c1", workspace))


async def refusal(workspace: Path, name: str, **args: object) -> str:
    with pytest.raises(ToolError) as error:
        await call(workspace, name, **args)
    return str(error.value)


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "notes.txt").write_text("a TODO here\n")
    (tmp_path / "secret.txt").write_text("SECRET-MARKER\n")
    return root


@contextmanager
def fifo_unblocked_after(fifo: Path, seconds: float = 5.0) -> Iterator[None]:
    """If a reader is still stuck on `fifo` after `seconds`, open its other end so the test fails, not hangs."""

    def release() -> None:
        with suppress(OSError):  # no reader waiting: nothing to release
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))

    timer = threading.Timer(seconds, release)
    timer.start()
    try:
        yield
    finally:
        timer.cancel()


def sparse_log(path: Path, size: int, lines: int = 1_000) -> None:
    """A file of `lines` text lines (more than the 8 KiB binary probe), then NUL bytes up to `size`."""
    with path.open("wb") as file:
        file.write(b"".join(b"line %d of the log\n" % n for n in range(1, lines + 1)))
        file.truncate(size)


def in_thread_running(function: str) -> bool:
    """Whether some thread is now running `function` (anywhere on its stack)."""
    for frame in sys._current_frames().values():
        current: FrameType | None = frame
        while current is not None:
            if current.f_code.co_name == function:
                return True
            current = current.f_back
    return False


def slow_tree(root: Path, files: int = 4) -> None:
    """Files of 2 MiB of empty lines: a pattern anchored with \\A is tried on each line, some seconds a file."""
    root.mkdir()
    for n in range(files):
        (root / f"empty{n}.txt").write_bytes(b"\n" * GREP_FILE_BYTES)


# --- grep cannot backtrack ---------------------------------------------------------------


@pytest.mark.wall_clock
async def test_a_catastrophic_pattern_is_matched_in_linear_time(workspace: Path) -> None:
    # Python's re needs longer than the age of the universe for the first line; RE2 takes milliseconds.
    (workspace / "as.txt").write_text("a" * 100_000 + "!\n" + "a" * 100_000 + "\n")
    started = time.perf_counter()
    result = await call(workspace, "grep", pattern="(a+)+$", path="as.txt")
    elapsed = time.perf_counter() - started
    assert result == "as.txt:2: " + "a" * 300 + " […99,700 more characters]"
    assert elapsed < 2.0
    (workspace / "as.txt").write_text("a" * 100_000 + "!\n")
    assert await call(workspace, "grep", pattern="(a+)+$") == "no matches for '(a+)+$'"


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [(r"(a)\1", r"invalid escape sequence: \1"), ("(?<=a)b", "invalid perl operator: (?<="), ("(", "missing )")],
)
async def test_patterns_re2_cannot_run_get_a_clear_error(workspace: Path, pattern: str, reason: str) -> None:
    message = await refusal(workspace, "grep", pattern=pattern)
    assert message.startswith(f"invalid regular expression {pattern!r}: {reason}")
    assert "RE2 syntax, which has no backreferences such as \\1 and no lookaround" in message


async def test_a_pattern_too_large_to_search_quickly_is_refused(workspace: Path) -> None:
    message = await refusal(workspace, "grep", pattern=r"(\pL|x){200}y")
    assert "is too large: RE2 compiles it to 239,605 instructions, grep allows 50,000" in message


async def test_grep_keeps_its_line_semantics(workspace: Path) -> None:
    (workspace / "crlf.txt").write_bytes(b"first\r\nsecond line\r\nthird\n")
    assert (
        await call(workspace, "grep", pattern="(line|third)$", path="crlf.txt")
        == "crlf.txt:2: second line\ncrlf.txt:3: third"
    )
    assert await call(workspace, "grep", pattern="^s", path="crlf.txt") == "crlf.txt:2: second line"
    assert await call(workspace, "grep", pattern=r"\At", path="crlf.txt") == "crlf.txt:3: third"
    assert await call(workspace, "grep", pattern="FIRST", ignore_case=True) == "crlf.txt:1: first"


# --- nothing blocks: FIFOs, sockets, devices -----------------------------------------------


async def test_a_fifo_or_socket_is_refused_at_once_and_grep_walks_past_them(workspace: Path) -> None:
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(workspace / "sock"))
    try:
        with fifo_unblocked_after(fifo):
            for name, kind in [("pipe", "FIFO"), ("sock", "socket")]:
                assert await refusal(workspace, "read_file", path=name) == (
                    f"refused {name!r}: it is a {kind}, not a regular file"
                )
                assert await refusal(workspace, "list_dir", path=name) == (
                    f"refused {name!r}: it is a {kind}, not a directory"
                )
                assert await refusal(workspace, "grep", pattern="x", path=name) == (
                    f"refused {name!r}: it is a {kind}, not a regular file or directory"
                )
            assert await call(workspace, "grep", pattern="TODO") == "notes.txt:1: a TODO here"
            assert "pipe  0 B" in await call(workspace, "list_dir")
    finally:
        server.close()


async def test_a_device_through_a_symlink_is_refused_as_leading_out(workspace: Path) -> None:
    os.symlink("/dev/zero", workspace / "zero")
    for name in ("read_file", "list_dir"):
        assert await refusal(workspace, name, path="zero") == (
            "refused 'zero': it leads outside the workspace through a symlink"
        )
    assert await call(workspace, "grep", pattern="x", glob="zero") == "no matches for 'x'"


# --- bounded memory --------------------------------------------------------------------------

MEASURE = textwrap.dedent(
    """
    import asyncio, sys
    from pathlib import Path
    from hotloop.agent.tools.builtins import read_file
    from hotloop.agent.tools.registry import ToolContext

    context = ToolContext("c1", Path(sys.argv[1]))
    print(asyncio.run(read_file({"path": "huge.log", "limit": 5}, context)))
    # This process's own peak resident memory, in KiB. Not ru_maxrss: Linux keeps it across fork and
    # exec, so it would report the peak of the pytest process this one was forked from.
    print(next(line.split()[1] for line in open("/proc/self/status") if line.startswith("VmHWM:")))
    """
)


def test_reading_five_lines_of_a_2_gib_file_keeps_memory_flat(workspace: Path) -> None:
    sparse_log(workspace / "huge.log", 2 * GiB)
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, str(workspace)], capture_output=True, text=True, timeout=30, check=True
    )
    *text, peak = done.stdout.splitlines()
    assert text == [
        *(f"line {n} of the log" for n in range(1, 6)),
        "",
        "[lines 1-5 of 1,001+ (counted in the first 64 MiB); pass offset and limit to read more]",
    ]
    assert int(peak) < 100 * 1024, f"peak RSS {int(peak) / 1024:.0f} MB"


async def test_reads_of_huge_files_are_bounded_and_say_so(workspace: Path) -> None:
    sparse_log(workspace / "huge.log", 2 * GiB)
    (workspace / "zeros.bin").write_bytes(b"")
    os.truncate(workspace / "zeros.bin", 2 * GiB)
    assert await refusal(workspace, "read_file", path="zeros.bin") == "zeros.bin is a binary file (2,147,483,648 bytes)"
    message = await refusal(workspace, "read_file", path="huge.log", offset=5_000)
    assert message.startswith("offset 5000 is past the first 64 MiB of huge.log (1,001 lines)")
    page = await call(workspace, "read_file", path="huge.log", offset=999, limit=2)
    assert page.startswith("line 999 of the log\nline 1000 of the log\n\n[lines 999-1000 of 1,001+")
    assert await call(workspace, "grep", pattern="line 1000 ") == (
        "huge.log:1000: line 1000 of the log\n[searched only the first 2 MiB of huge.log]"
    )
    (workspace / "one-line.txt").write_text("x" * 2 * MiB)
    page = await call(workspace, "read_file", path="one-line.txt")
    assert page == "x" * MiB + "\n[lines 1-1 of 1; line 1 is cut at 1 MiB; pass offset and limit to read more]"


async def test_grep_stops_at_its_total_byte_budget(workspace: Path) -> None:
    files = GREP_TOTAL_BYTES // GREP_FILE_BYTES + 2
    for n in range(files):
        sparse_log(workspace / f"log{n:02}.txt", 2 * GREP_FILE_BYTES, lines=500)
    result = await call(workspace, "grep", pattern="line 500 ")
    lines = result.splitlines()
    assert lines[: files - 2] == [f"log{n:02}.txt:500: line 500 of the log" for n in range(files - 2)]
    assert lines[-2].startswith("[searched only the first 2 MiB of log00.txt, log01.txt,")
    assert lines[-1] == "[stopped after searching 64 MiB; narrow the path or glob]"


# --- confinement without a race --------------------------------------------------------------


def swapper(link: Path, inside: Path, outside: Path, stop: threading.Event) -> None:
    """Swap `link` between a copy of `inside` and a symlink to `outside`, each swap atomic, until `stop`."""
    spare = link.with_name(link.name + ".new")
    while not stop.is_set():
        os.symlink(outside, spare)
        os.replace(spare, link)
        if inside.is_dir():
            os.symlink(inside.name, spare)  # a symlink that stays inside: allowed, and still racing
        else:
            spare.write_bytes(inside.read_bytes())
        os.replace(spare, link)


async def test_swapping_in_a_symlink_never_leaks_the_file_outside(workspace: Path) -> None:
    outside = workspace.parent / "out"
    outside.mkdir()
    (outside / "f.txt").write_text("SECRET-MARKER\n")
    (workspace / "safe").mkdir()
    (workspace / "safe" / "f.txt").write_text("inside\n")
    (workspace / "swapped.txt").write_text("inside\n")
    os.symlink("safe", workspace / "folder")  # a folder can only be swapped by a rename if it is a symlink
    stop = threading.Event()
    swaps = [
        threading.Thread(
            target=swapper, args=(workspace / "swapped.txt", workspace / "notes.txt", outside / "f.txt", stop)
        ),
        threading.Thread(target=swapper, args=(workspace / "folder", workspace / "safe", outside, stop)),
    ]
    results: list[str] = []

    async def reader(name: str, **args: object) -> None:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            try:
                results.append(await call(workspace, name, **args))
            except ToolError as error:
                results.append(f"error: {error}")

    for thread in swaps:
        thread.start()
    try:
        await asyncio.gather(
            reader("read_file", path="swapped.txt"),
            reader("read_file", path="folder/f.txt"),
            reader("list_dir", path="folder"),
            reader("grep", pattern="SECRET|inside"),
        )
    finally:
        stop.set()
        for thread in swaps:
            thread.join()
    assert not [result for result in results if "SECRET" in result]
    assert any("through a symlink" in result for result in results)  # the swaps did race the reads
    assert any(result.startswith(("inside", "a TODO here")) for result in results)


async def test_symlinks_that_stay_inside_still_work(workspace: Path) -> None:
    (workspace / "src").mkdir()
    (workspace / "src" / "app.py").write_text("x = 1  # TODO\n")
    os.symlink("src/../notes.txt", workspace / "dots")
    os.symlink(workspace / "src", workspace / "absolute")
    os.symlink("absolute/app.py", workspace / "chained")
    os.symlink("../../secret.txt", workspace / "src" / "leak")
    assert await call(workspace, "read_file", path="dots") == "a TODO here\n"
    assert await call(workspace, "read_file", path="chained") == "x = 1  # TODO\n"
    assert await call(workspace, "list_dir", path="absolute") == "app.py  14 B\nleak@"
    assert await refusal(workspace, "read_file", path="absolute/leak") == (
        "refused 'absolute/leak': it leads outside the workspace through a symlink"
    )
    # Linked files are searched under the link's name; linked folders are not entered, links out are skipped.
    assert await call(workspace, "grep", pattern="TODO") == (
        "chained:1: x = 1  # TODO\ndots:1: a TODO here\nnotes.txt:1: a TODO here\nsrc/app.py:1: x = 1  # TODO"
    )
    os.symlink("loop", workspace / "loop")
    assert await refusal(workspace, "read_file", path="loop") == "refused 'loop': too many levels of symbolic links"


# --- a timeout or a cancel stops the tool, and its thread ------------------------------------


@pytest.mark.wall_clock
async def test_cancelling_a_stuck_grep_stops_it_and_its_thread(workspace: Path) -> None:
    slow_tree(workspace / "slow")
    # One worker thread: the read after the cancel can only run once the grep's thread has stopped.
    executor = ThreadPoolExecutor(max_workers=1)
    asyncio.get_running_loop().set_default_executor(executor)
    try:
        search = asyncio.create_task(call(workspace, "grep", pattern=r"\Aneedle", path="slow"))
        await wait_until(lambda: in_thread_running("_matching_lines"))
        search.cancel()
        started = time.perf_counter()
        with pytest.raises(asyncio.CancelledError):
            await search
        assert time.perf_counter() - started < 0.5
        assert await asyncio.wait_for(call(workspace, "read_file", path="notes.txt"), 2) == "a TODO here\n"
        assert time.perf_counter() - started < 2
    finally:
        executor.shutdown(wait=False, cancel_futures=True)


async def test_through_the_agent_loop_a_slow_grep_times_out_and_the_turn_goes_on(workspace: Path) -> None:
    (workspace / "as.txt").write_text("a" * 100_000 + "!\n")
    fifo = workspace / "pipe"
    os.mkfifo(fifo)
    slow_tree(workspace / "slow")
    calls = [
        {"name": "grep", "arguments": {"pattern": "(a+)+$", "path": "as.txt"}},
        {"name": "grep", "arguments": {"pattern": r"\Aneedle", "path": "slow"}},
        {"name": "read_file", "arguments": {"path": "pipe"}},
    ]
    sim = sim_with_scenario(workspace.parent, [{"tool_calls": calls}, {"text": "carried on"}])
    try:
        agent, recorder = make_agent(sim, workspace, tool_timeout=1.0)
        with fifo_unblocked_after(fifo):
            finished = await asyncio.wait_for(agent.run_turn("search"), 30)
    finally:
        sim.stop()
    results = [(event.status, event.result) for event in recorder.of(ToolFinished)]
    assert sorted(results) == [
        ("error", "error: grep timed out after 1 s"),
        ("error", "error: refused 'pipe': it is a FIFO, not a regular file"),
        ("ok", "no matches for '(a+)+$'"),
    ]
    assert finished.reason == "answer" and finished.steps == 2
    await wait_until(lambda: not in_thread_running("_matching_lines"), what="the timed-out grep's thread to stop")
