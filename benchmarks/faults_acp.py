"""The fault matrix's rows for `hotloop acp` (faults_doors.py, section "hotloop acp"): a client that misbehaves.

Each row runs the real `python -m hotloop acp` as an editor would, its stdin and stdout pipes, and writes raw
lines to it (`Client`): lines that are no request, stdin that ends (empty, or mid-prompt), a command padded to
hide its end put to the client as a question, a question answered with garbage, a saved session whose log names
Anthropic's API at a server of its own. The client answers every other question "reject once". A row checks each
reply, the process's exit code (0 when stdin ends), what it left in the workspace and the log, and that no
traceback reached its stderr.
"""

from __future__ import annotations

import json
import os
import queue
import socket
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from faults import (
    DONE,
    HOTLOOP,
    LIMIT,
    Custom,
    Row,
    Trial,
    latest_log,
    log_valid,
    prepared,
    reaped,
    resumable,
    shown,
    what_matters,
)
from faults_acting import shell

INITIALIZE = {"method": "initialize", "params": {"protocolVersion": 1}}
REJECT = {"result": {"outcome": {"outcome": "selected", "optionId": "reject_once"}}}
PADDED = "echo checking build status" + " " * 300 + "\n" * 60 + "touch HIDDEN"
DEEP = 100_000
# (the line, the JSON-RPC error code its reply must carry)
HOSTILE: list[tuple[bytes, int]] = [
    (b"[1,2,3]", -32600),
    (b'{"jsonrpc": "2.0", "id": 1, "method": ', -32700),
    (b'{"jsonrpc": "2.0", "id": 2, "method": "\xff"}', -32700),
    (b'{"jsonrpc": "2.0", "id": {"a": 1}, "method": "initialize"}', -32600),
    (b'{"jsonrpc": "2.0", "id": 3, "method": 5}', -32600),
    (b'{"jsonrpc": "2.0", "id": 4, "method": "session/new", "params": [1]}', -32602),
    (b'{"jsonrpc": "2.0", "id": 5, "method": "no/such/method", "params": {}}', -32601),
    (b"[" * DEEP + b"]" * DEEP, -32700),
    (b'{"jsonrpc": "2.0", "id": 6, "method": "initialize", "params": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}",
     -32700),
]  # fmt: skip


class Client:
    """`hotloop acp` on pipes, its stdout read line by line in a thread, its stderr in a file; questions rejected."""

    def __init__(
        self, root: Path, env: dict[str, str], stdin: int | None = subprocess.PIPE, answer: Any = REJECT
    ) -> None:
        self.stderr = root / "acp-stderr.txt"
        with self.stderr.open("ab") as errors:
            self.process = subprocess.Popen(
                (*HOTLOOP, "acp"), cwd=root, env=env, stdin=stdin, stdout=subprocess.PIPE, stderr=errors,
                start_new_session=True,
            )  # fmt: skip
        self.messages: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.asked: list[dict[str, Any]] = []
        self.answer = answer  # what a question gets: a reply's `result` and/or `error`
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.messages.put(json.loads(line))
        self.messages.put(None)

    def send(self, line: bytes) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def request(self, request_id: Any, message: dict[str, Any]) -> None:
        self.send(json.dumps({"jsonrpc": "2.0", "id": request_id, **message}).encode())

    def until(self, request_id: Any) -> list[dict[str, Any]]:
        """The messages up to the reply to `request_id`, that reply last; a question on the way is rejected."""
        seen: list[dict[str, Any]] = []
        while True:
            message = self.messages.get(timeout=LIMIT)
            if message is None:
                raise EOFError(f"stdout ended before the reply to {request_id!r}")
            seen.append(message)
            if message.get("method") == "session/request_permission":
                self.asked.append(message)
                self.send(json.dumps({"jsonrpc": "2.0", "id": message["id"], **self.answer}).encode())
            elif "method" not in message and message.get("id") == request_id:
                return seen

    def ended(self) -> int | None:
        """Stdin closed: the exit code, or None if the agent hadn't ended after LIMIT seconds (then killed)."""
        if self.process.stdin is not None:
            self.process.stdin.close()
        return reaped(self.process)

    def open_session(self, workspace: Path) -> str:
        self.request("init", INITIALIZE)
        self.until("init")
        self.request("new", {"method": "session/new", "params": {"cwd": str(workspace), "mcpServers": []}})
        return str(self.until("new")[-1]["result"]["sessionId"])

    def prompt(self, request_id: Any, session_id: str, text: str) -> None:
        said = [{"type": "text", "text": text}]
        self.request(request_id, {"method": "session/prompt", "params": {"sessionId": session_id, "prompt": said}})


Drive = Callable[[Path, Path, dict[str, str]], tuple[int | None, list[str], list[str]]]  # → exit, saw, problems


def acp_row(name: str, steps: list[dict[str, Any]], drive: Drive) -> Custom:
    """A row that drives `hotloop acp` its own way; its log (if one is left) is checked and resumed as a CLI row's."""

    def make(folder: Path) -> Row:
        root, workspace, env = prepared(folder, name, steps)
        code, saw, problems = drive(root, workspace, env)
        stderr = (root / "acp-stderr.txt").read_text(errors="replace")
        trial = Trial(root, workspace, stderr=stderr, log=latest_log(root), outputs=[("", stderr)])
        row = Row(name, saw + what_matters(stderr), "HUNG" if code is None else str(code), "no session", "no session",
                  False, 0.0, problems=problems)  # fmt: skip
        if code != 0:
            row.problems.append(f"exit {code} when stdin ended, not 0")
        if trial.log is not None:
            row.log, row.resumable = log_valid(trial, env), resumable(trial, env, "")
        row.traceback = any("Traceback" in out + err for out, err in trial.outputs)
        return row

    return Custom(name, make)


def hostile_lines(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    client, problems = Client(root, env), []
    for number, (line, code) in enumerate(HOSTILE):
        client.send(line)
        client.request(f"next {number}", INITIALIZE)
        *before, answer = client.until(f"next {number}")
        codes = [m["error"]["code"] for m in before if "error" in m]
        if codes != [code] or "result" not in answer:
            problems.append(f"{shown(line.decode(errors='replace'), 40)}: errors {codes}, not [{code}], then {answer}")
    return (
        client.ended(),
        [f"{len(HOSTILE)} hostile lines, each answered with its error, each next request answered"],
        problems,
    )


def dev_null(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    with open(os.devnull, "rb") as empty:
        client = Client(root, env, stdin=empty.fileno())
        code = client.ended()
    said = client.messages.get(timeout=LIMIT)
    return code, ["hotloop acp < /dev/null"], [] if said is None else [f"wrote {shown(str(said))} to stdout"]


def mid_prompt(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    client = Client(root, env)
    session_id = client.open_session(workspace)
    client.prompt(1, session_id, "hello")
    first = client.until(1)[-1]["result"]["stopReason"]
    client.prompt(2, session_id, "write at length")
    while (message := client.messages.get(timeout=LIMIT)) is not None and message.get("method") != "session/update":
        pass  # the second answer has started
    assert client.process.stdin is not None
    client.process.stdin.close()
    second = client.until(2)[-1]["result"]["stopReason"]
    problems = [] if (first, second) == ("end_turn", "cancelled") else [f"stop reasons {first}, {second}"]
    return client.ended(), [f"stdin closed mid-answer: the prompt answered {second}"], problems


def padded(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    client = Client(root, env)
    client.prompt(1, client.open_session(workspace), "check the build")
    client.until(1)
    code, problems = client.ended(), []
    titles = [str(m["params"]["toolCall"].get("title")) for m in client.asked]
    if len(titles) != 1 or "\n" in titles[0] or "⋮ 59 empty lines" not in titles[0]:
        problems.append(f"the question's titles: {titles!r}")
    elif not titles[0].endswith("touch HIDDEN") or "(echo, touch)" not in titles[0]:
        problems.append(f"the question hides its end: {titles[0]!r}")
    if (workspace / "HIDDEN").exists():
        problems.append("`touch HIDDEN` ran")
    return code, [f"asked: {shown(title, 100)}" for title in titles] + ["rejected; nothing ran"], problems


def garbled_answer(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    client = Client(root, env, answer={"result": {"outcome": 5}})
    client.prompt(1, client.open_session(workspace), "make X")
    stop = client.until(1)[-1].get("result", {}).get("stopReason")
    code, problems = client.ended(), []
    if stop != "end_turn" or len(client.asked) != 1:
        problems.append(f"the prompt answered {stop}, after {len(client.asked)} questions")
    if (workspace / "X").exists():
        problems.append("`touch X` ran")
    return code, ['a question answered {"outcome": 5}: denied, nothing ran'], problems


def loaded_elsewhere(root: Path, workspace: Path, env: dict[str, str]) -> tuple[int | None, list[str], list[str]]:
    """A saved session, its log edited to name Anthropic's API at a server here, loaded with an Anthropic key set."""
    client = Client(root, env)
    session_id = client.open_session(workspace)
    client.prompt(1, session_id, "hello")
    saved = client.until(1)[-1]["result"]["_meta"]["hotloop"]["session"]
    client.ended()
    listener = socket.create_server(("127.0.0.1", 0))
    log = latest_log(root)
    assert log is not None
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    lines[0]["base_url"] = f"http://127.0.0.1:{listener.getsockname()[1]}"
    for line in lines:
        if line.get("type") == "step_started":
            line.update(provider="anthropic", model="claude-sonnet-4-5")
    log.write_text("".join(json.dumps(line) + "\n" for line in lines))
    later = Client(root, env | {"ANTHROPIC_API_KEY": "sk-ant-not-a-real-key"})
    later.request("init", INITIALIZE)
    later.until("init")
    later.request(
        "load", {"method": "session/load", "params": {"cwd": str(workspace), "sessionId": saved, "mcpServers": []}}
    )
    loaded = later.until("load")[-1]
    later.prompt(2, saved, "hello again")
    answer = later.until(2)[-1]
    code, problems = later.ended(), []
    listener.setblocking(False)
    try:
        listener.accept()
        problems.append("something connected to the server the log names")
    except BlockingIOError:
        pass
    listener.close()
    if "result" not in loaded or answer.get("result", {}).get("stopReason") != "end_turn":
        problems.append(f"load answered {shown(str(loaded), 80)}, the prompt {shown(str(answer), 80)}")
    return code, ["a log naming anthropic at 127.0.0.1, loaded with ANTHROPIC_API_KEY set"], problems


ACP_ROWS = [
    acp_row("acp: hostile lines, then a request", [DONE], hostile_lines),
    acp_row("acp: stdin is /dev/null", [DONE], dev_null),
    acp_row("acp: stdin closed mid-prompt", [DONE, {"text": "word " * 4000, "decode_ms": 5}, DONE], mid_prompt),
    acp_row("acp: a command padded to hide its end", [shell(PADDED), DONE], padded),
    acp_row("acp: a question answered with garbage", [shell("touch X"), DONE], garbled_answer),
    acp_row("acp: a loaded log names Anthropic elsewhere", [DONE, DONE, DONE], loaded_elsewhere),
]
