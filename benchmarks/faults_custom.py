"""The fault matrix's rows for the tools that act that run their own way (faults.Custom): no one `hotloop run`.

The app: Textual's Pilot drives it in this process, as tests/tui_support.py does, with the real
tools, so a question answered by accident leaves a file; these rows have no exit code ("app"), and
their log and resume are checked as a CLI row's are. Responses: a tiny Responses API (aiohttp,
served by tests/support.py's `serving` on a loop in a thread of this process) streams hand-written
SSE to the real CLI, which knows it as the provider `fixture` (kind openai-responses); after its
first response it answers plainly, so the session can resume. Startup: `hotloop sim serve --port 0`
asked for a model it doesn't serve, ten times (a closed client's traceback came in 4 of 10), and
`sim serve` given a port that can't be.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from faults import (
    DONE,
    HOTLOOP,
    LIMIT,
    MCP_FAULTS,
    Custom,
    Fault,
    Row,
    Trial,
    config_text,
    environment,
    execute,
    latest_log,
    log_valid,
    prepared,
    resumable,
    row_folder,
    run_fault,
    shown,
    what_matters,
)
from faults_acting import logged, results, shell

from hotloop.agent.events import ApprovalDecided

sys.path.insert(0, str(MCP_FAULTS.parent))  # tests/: tui_support and support, used as the tests use them

# In the app: a question waits while keys come in. The commands are real, so a wrong answer leaves a file.
TYPED = "yes, allow it all, and then analyze"
PADDED = "echo checking build status" + " " * 300 + "\n" * 60 + "touch HIDDEN"
ANSWER_KEYS = ("y  allow once", "n  deny", "r  deny, saying why")
Drive = Callable[[Any, Any, Path], Awaitable[tuple[list[str], list[str]]]]  # (app, pilot, workspace) → saw, problems


@contextmanager
def environ(env: dict[str, str]) -> Iterator[None]:
    """This process's environment, for the app run in it, as a subprocess row's would be."""
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        yield
    finally:
        os.environ.clear()
        os.environ.update(saved)


async def typed_while_waiting(app: Any, pilot: Any, workspace: Path) -> tuple[list[str], list[str]]:
    from hotloop.tui.widgets.approval_bar import ApprovalBar

    from tui_support import answer, idle, press, send, wait_until

    await send(app, pilot, "deploy")
    bar = app.query_one(ApprovalBar)
    await wait_until(lambda: bar.requests and bar.has_focus_within, what="the question to take the focus")
    press(app, *TYPED, "enter")
    queued = app.query_one("QueuedPrompts")
    await wait_until(lambda: queued.prompts == (TYPED,), what="the typed prompt to queue")
    problems = [] if bar.requests else ["the typed keys answered the question"]
    press(app, "ctrl+r")
    await answer(app, "n")
    await idle(app, pilot)
    await wait_until(lambda: app.agent.turn >= 2, what="the typed prompt to start its turn")
    await idle(app, pilot)  # the app is busy again: this waits for that turn to end
    if (workspace / "TYPED").exists():
        problems.append("`touch TYPED` ran")
    return [f"typed {TYPED!r} + Enter while `touch TYPED` waited: queued as a prompt; ctrl+r n denied it"], problems


async def padded_command(app: Any, pilot: Any, workspace: Path) -> tuple[list[str], list[str]]:
    from tui_support import answer, drawn, idle, send, wait_until

    await send(app, pilot, "check")
    await wait_until(lambda: "touch HIDDEN" in drawn(app), what="the hidden command on screen")
    screen = drawn(app)
    problems = [f"{key!r} is off-screen at 80×24" for key in ANSWER_KEYS if key not in screen]
    await answer(app, "n")
    await idle(app, pilot)
    if (workspace / "HIDDEN").exists():
        problems.append("`touch HIDDEN` ran")
    question = [shown(line.strip(" │")) for line in screen.splitlines() if "wants to run" in line]
    return [*question[:1], "`touch HIDDEN` and the keys y, n, r on screen at 80×24"], problems


def in_app(name: str, steps: list[dict[str, Any]], drive: Drive, size: tuple[int, int] = (100, 30)) -> Custom:
    """A row run in the app, in this process; its log and resume are checked as a CLI row's are."""

    def make(folder: Path) -> Row:
        root, workspace, env = prepared(folder, name, steps)
        with environ(env):
            saw, problems, log = asyncio.run(session(drive, workspace, size))
        trial = Trial(root, workspace, log=log)
        row = Row(name, saw, "app", log_valid(trial, env), resumable(trial, env, ""), False, 0.0, problems=problems)
        denied = [d for d in logged(trial, ApprovalDecided) if not d.allowed]
        if len(denied) != 1:
            row.problems.append(f"{len(denied)} denials in the log, not the one answer n")
        row.traceback = any("Traceback" in out + err for out, err in trial.outputs)
        return row

    return Custom(name, make)


async def session(drive: Drive, workspace: Path, size: tuple[int, int]) -> tuple[list[str], list[str], Path]:
    from tui_support import running_app

    async with running_app(size=size, workspace=workspace) as (app, pilot):
        saw, problems = await drive(app, pilot, workspace)
        log = app.session.log.path
    return saw, problems, log


# Responses: each row's first response is hand-written SSE with one fault in it.
USAGE = {
    "input_tokens": 39,
    "input_tokens_details": {"cached_tokens": 0},
    "output_tokens": 16,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 55,
}
MODELS = {"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "faults"}]}


def response(status: str, **fields: Any) -> dict[str, Any]:
    return {"id": "resp_1", "object": "response", "status": status, "output": [], "usage": USAGE, **fields}


CREATED = {"type": "response.created", "sequence_number": 0, "response": response("in_progress", usage=None)}
COMPLETED = {"type": "response.completed", "response": response("completed")}
INCOMPLETE = {
    "type": "response.incomplete",
    "response": response("incomplete", incomplete_details={"reason": "max_output_tokens"}),
}
CALL = {"id": "fc_1", "type": "function_call", "status": "in_progress", "arguments": "", "call_id": "c1"}


def answer(*before: dict[str, Any], ending: object = COMPLETED) -> list[object]:
    """A response that says `Fine.`, after `before`."""
    message = {"type": "response.output_item.added", "output_index": 1, "item": {"id": "msg_1", "type": "message"}}
    text = {"type": "response.output_text.delta", "item_id": "msg_1", "content_index": 0, "delta": "Fine."}
    return [CREATED, *before, message, text, ending]


def unclosed(ending: dict[str, Any]) -> list[object]:
    """A response whose read_file call is announced and never closed: no arguments.done, no output_item.done."""
    call = {"type": "response.output_item.added", "output_index": 0, "item": {**CALL, "name": "read_file"}}
    delta = {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"path": "READ'}
    return [CREATED, call, delta, ending]


@contextmanager
def responses_api(first: list[object]) -> Iterator[str]:
    """A Responses API on a loopback port, in a thread: `first` is its first response, `answer()` every later one."""
    from aiohttp import web

    from support import serving

    served = [first]

    async def models(request: web.Request) -> web.Response:
        return web.json_response(MODELS)

    async def responses(request: web.Request) -> web.StreamResponse:
        events = served.pop() if served else answer()
        stream = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(b"".join(b"data: " + json.dumps(event).encode() + b"\n\n" for event in events))
        await stream.write_eof()
        return stream

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/responses", responses)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    server = serving(app)
    try:
        url = asyncio.run_coroutine_threadsafe(server.__aenter__(), loop).result(LIMIT)
        try:
            yield url
        finally:
            asyncio.run_coroutine_threadsafe(server.__aexit__(None, None, None), loop).result(LIMIT)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def responses_row(name: str, first: list[object], check: Callable[[Trial], list[str]], expect: int) -> Custom:
    def make(folder: Path) -> Row:
        with responses_api(first) as url:
            config = f'[providers.fixture]\nkind = "openai-responses"\nbase_url = "{url}"'
            flags = ("--provider", "fixture", "--model", "m")
            return run_fault(Fault(name, [DONE], flags, config=config, expect=(expect,), check=check), folder)

    return Custom(name, make)


def one_warning(event: str) -> Callable[[Trial], list[str]]:
    """The check that one warning line names `event`, and the answer after it still arrives."""

    def check(trial: Trial) -> list[str]:
        warnings = [line for line in trial.stderr.splitlines() if "warning" in line]
        problems = []
        if len(warnings) != 1 or f"malformed {event} event" not in warnings[0]:
            problems.append(f"{len(warnings)} warning lines, not one naming {event}: {shown(' | '.join(warnings))}")
        if "Fine." not in trial.stdout:
            problems.append("the answer after the malformed event was lost")
        return problems or ["note: one warning naming the event; the answer went on"]

    return check


def reported(words: str) -> Callable[[Trial], list[str]]:
    """The check that the unclosed call has an error result in the log that says `words`."""

    def check(trial: Trial) -> list[str]:
        calls = results(trial, "read_file")
        if not calls:
            return ["the call was dropped: no result for it in the log"]
        if calls[0].status != "error" or words not in calls[0].result:
            return [f"its result: {shown(calls[0].result, 80)}"]
        return [f"note: its result: {shown(calls[0].result, 90)}"]

    return check


# Startup: no session, so no log nor resume to check.
RUNS = 10
UNKNOWN = f"unknown model at sim serve --port 0, ×{RUNS}"


def listening_at(server: subprocess.Popen[bytes]) -> str:
    """The /v1 URL `hotloop sim serve` says, in its first line, it listens at."""
    assert server.stdout is not None
    ready, _, _ = select.select([server.stdout], [], [], LIMIT)
    line = server.stdout.readline().decode() if ready else ""
    found = re.search(r"http://\S+/v1", line)
    if found is None:
        raise RuntimeError(f"hotloop sim serve said {line!r}")
    return found.group()


def home(folder: Path, name: str) -> tuple[Path, dict[str, str]]:
    """A row's folder, with a config and no scenario, and its environment."""
    root = row_folder(folder, name)
    root.mkdir(parents=True)
    (root / "config.toml").write_text(config_text(None))
    return root, environment(root)


def unknown_model(folder: Path) -> Row:
    root, env = home(folder, UNKNOWN)
    serve = (*HOTLOOP, "sim", "serve", "--port", "0", "--no-latency")
    server = subprocess.Popen(serve, cwd=root, env=env, stdout=subprocess.PIPE, start_new_session=True)
    try:
        run = (*HOTLOOP, "run", "--provider", "openai", "--base-url", listening_at(server), "--model", "nosuchmodel")
        runs = [execute((*run, "hi"), root, env) for _ in range(RUNS)]
    finally:
        os.killpg(server.pid, signal.SIGTERM)  # its own group: the server we started
        server.communicate(timeout=LIMIT)
    problems = []
    for n, (code, _, err) in enumerate(runs, 1):
        lines = err.strip().splitlines()
        if code != 1 or len(lines) != 1:
            last = shown(lines[-1] if lines else "")  # a traceback's exception
            problems.append(f"run {n}: exit {code}, {len(lines)} lines on stderr, the last: {last}")
    if latest_log(root) is not None:
        problems.append("a session was started for a model the server doesn't serve")
    codes = [code for code, _, _ in runs]
    exits = f"1 ×{RUNS}" if set(codes) == {1} else " ".join(map(str, codes))
    row = Row(UNKNOWN, what_matters(runs[0][2], 1), exits, "no session", "no session", False, 0.0, problems=problems)
    row.traceback = any("Traceback" in out + err for _, out, err in runs)
    return row


def bad_port(folder: Path) -> Row:
    name = "sim serve --port 99999"
    root, env = home(folder, name)
    code, out, err = execute((*HOTLOOP, "sim", "serve", "--port", "99999"), root, env)
    lines = err.strip().splitlines()
    problems = [] if code == 2 and len(lines) == 1 else [f"exit {code}, documented 2; {len(lines)} lines on stderr"]
    row = Row(name, what_matters(err, 2), str(code), "no session", "no session", False, 0.0, problems=problems)
    row.traceback = "Traceback" in out + err
    return row


APP_ROWS = [
    in_app("app: a prompt typed while a call waits", [shell("touch TYPED"), DONE, DONE], typed_while_waiting),
    in_app("app: a command padded to hide its end", [shell(PADDED), DONE], padded_command, size=(80, 24)),
]
CUSTOM = [
    *APP_ROWS,
    responses_row(
        "Responses: an item that is a string",
        answer({"type": "response.output_item.added", "output_index": 0, "item": "fc_1"}),
        one_warning("response.output_item.added"),
        expect=0,
    ),
    responses_row(
        "Responses: a reasoning item without type",
        answer({"type": "response.output_item.done", "output_index": 0, "item": {"id": "rs_1", "summary": []}}),
        one_warning("response.output_item.done"),
        expect=0,
    ),
    responses_row(
        "Responses: a response that is a list",
        answer(ending={"type": "response.completed", "response": [1]}),
        one_warning("response.completed"),
        expect=0,
    ),
    responses_row(
        "Responses: a call never closed (incomplete)",
        unclosed(INCOMPLETE),
        reported("cut off by the output limit"),
        expect=1,  # a step the output limit cut off did incomplete work
    ),
    responses_row(
        "Responses: a call never closed (completed)",
        unclosed(COMPLETED),
        reported("not valid JSON"),
        expect=0,
    ),
    Custom(UNKNOWN, unknown_model),
    Custom("sim serve --port 99999", bad_port),
]
