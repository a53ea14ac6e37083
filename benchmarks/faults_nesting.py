"""The fault matrix's machinery for JSON nested past any parser (faults_doors.py: "JSON nested past any parser").

The attack is `[[[[…]]]]` 100,000 levels deep: in a stream's first chunk, an error body and a tool call's
arguments (the simulator's `deep_json` fault and a scenario's verbatim arguments), in an MCP server's answer and
tool list (tests/mcp_faults.py `deep-json`, `deep-tool-list`), in hotloop's config and in a line of a session
log, and in the requests a hostile client sends `hotloop sim serve`. Every row wants one line that says what was
refused ("nested deeper than 200 levels") and where, the documented exit code, and no traceback.
"""

from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

from faults import (
    DONE,
    HOTLOOP,
    LIMIT,
    Custom,
    Row,
    Trial,
    config_text,
    environment,
    execute,
    latest_log,
    row_folder,
    shown,
)
from faults_acting import logged

from hotloop.agent.events import ToolFinished

DEEP = 100_000
SAID = "nested deeper than 200 levels"
SIM_SAID = "nested deeper than the parser can read"  # the simulator takes what json.loads can (sim/json_depth.py)
LOOK = {"name": "list_dir", "arguments": {"path": "."}}


def nested(depth: int = DEEP) -> str:
    return "[" * depth + "]" * depth


def one_line(words: str) -> Callable[[Trial], list[str]]:
    """Exactly one stderr line holds `words`, and it is short: the refusal said, not the document quoted."""

    def check(trial: Trial) -> list[str]:
        lines = [line for line in trial.stderr.splitlines() if words in line]
        if len(lines) != 1:
            return [f"{len(lines)} lines say {words!r}, not one"]
        return [] if len(lines[0]) < 300 else [f"the line is {len(lines[0]):,} characters long"]

    return check


def results_said(*expected: tuple[str, str, str]) -> Callable[[Trial], list[str]]:
    """Each (tool, status, words) is a call the log ended with that status and a result holding those words."""

    def check(trial: Trial) -> list[str]:
        ended = [(event.name, event.status, event.result) for event in logged(trial, ToolFinished)]
        problems = [
            f"no {tool} ended {status} with {words!r}"
            for tool, status, words in expected
            if not any(name == tool and got == status and words in result for name, got, result in ended)
        ]
        return problems or [f"note: {shown(result, 90)}" for _, status, result in ended if status == "error"]

    return check


def deep_log_line(workspace: Path, root: Path) -> None:
    """Setup: a session hotloop ran here, a `turn_started` line nested 100,000 deep appended to its log."""
    (root / "setup.json").write_text(json.dumps([DONE]))
    (root / "setup.toml").write_text(config_text(root / "setup.json"))
    env = environment(root) | {"HOTLOOP_CONFIG": str(root / "setup.toml")}
    code, out, err = execute((*HOTLOOP, "run", "hello"), workspace, env)
    (root / "setup.txt").write_text(f"{code}\n{out}{err}")
    log = latest_log(root)
    if log is not None:
        with log.open("a") as file:
            file.write('{"type":"turn_started","turn":9,"prompt":"x","ts":1.0,"extra":' + nested() + "}\n")


def deep_line_skipped(trial: Trial) -> list[str]:
    setup = (trial.root / "setup.txt").read_text()
    if not setup.startswith("0\n"):
        return [f"setup failed: {shown(setup)}"]
    said = one_line(f"{SAID}, skipped")(trial)
    return said or ["note: the planted line stays in the log (the log-valid column reads it); the rest loads"]


# ---- hotloop sim serve, as a hostile client meets it ----

HISTORY = [
    {"role": "user", "content": "hi"},
    {
        "role": "assistant",
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": nested()}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "x"},
]
SENDS = [
    ("/v1/chat/completions", '{"model":"sim-balanced","messages":' + nested() + "}"),
    ("/v1/responses", '{"model":"sim-balanced","input":' + nested() + "}"),
    ("/v1/messages", '{"model":"sim-balanced","max_tokens":9,"messages":' + nested() + "}"),
    ("/v1/chat/completions", json.dumps({"model": "sim-balanced", "messages": HISTORY})),
]
HELLO = json.dumps({"model": "sim-balanced", "messages": [{"role": "user", "content": "hi"}]})


def post(root: str, path: str, body: str) -> tuple[int, str]:
    headers = {"content-type": "application/json", "anthropic-version": "2023-06-01"}
    request = urllib.request.Request(root + path, data=body.encode(), headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=LIMIT) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def sim_serve_row(name: str, *flags: str) -> Custom:
    """`hotloop sim serve`, sent four requests nested 100,000 deep (three bodies, arguments in a history), then a
    plain one, then Ctrl-C: a 400 saying so for each, a 200 after them, exit 0."""

    def make(folder: Path) -> Row:
        root = row_folder(folder, name)
        root.mkdir(parents=True)
        command = (*HOTLOOP, "sim", "serve", "--port", "0", *flags)
        server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        problems, saw = [], []
        try:
            assert server.stdout is not None
            announced = server.stdout.readline().decode()
            base = announced.split(" on ", 1)[1].split("/v1", 1)[0]
            for path, body in SENDS:
                status, text = post(base, path, body)
                message = json.loads(text).get("error", {}).get("message", "") if text.startswith("{") else text
                saw.append(f"{path}: {status} {message}")
                if status != 400 or not message.endswith(SIM_SAID):
                    problems.append(f"{path} answered {status}: {shown(message, 80)}")
            status, _ = post(base, "/v1/chat/completions", HELLO)
            if status != 200:
                problems.append(f"a plain request after them answered {status}")
        finally:
            server.send_signal(signal.SIGINT)
            try:
                out, err = server.communicate(timeout=LIMIT)
            except subprocess.TimeoutExpired:
                server.kill()
                out, err = server.communicate()
        code = server.returncode
        if code != 0:
            problems.append(f"exit {code}, documented 0 for a server stopped by Ctrl-C")
        said = (out + err).decode("utf-8", "replace")
        row = Row(name, [shown(line) for line in saw], str(code), "no session", "no session", "Traceback" in said, 0.0)
        row.problems = problems
        return row

    return Custom(name, make)
