"""The fault matrix's machinery for `hotloop watch` (faults_doors.py: "the watch: keys, sizes, dropped upstreams").

Each row starts tests/watch_upstream.py (a real server that misbehaves on purpose) and `hotloop watch --upstream
URL --json` as processes of their own, in the row's folder; this process is the agent, with the official OpenAI SDK
(raw bytes where the attack is a body no parser reads), and Ctrl-C ends the watch, as it ends a user's. A row checks
what the agent got through the watch against what the upstream sends it directly, the watch's lines, its logs (every
step ended, each valid for `sessions show`), what it wrote, and how much memory it ever held (its VmHWM).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import openai
from faults import HERE, HOTLOOP, LIMIT, PYTHON, Custom, Row, Trial, execute, log_valid, shown
from faults_custom import home

from hotloop.agent.events import StepFinished, StepStarted, TurnFinished, TurnStarted, decode

UPSTREAM = HERE.parent / "tests" / "watch_upstream.py"
sys.path.insert(0, str(UPSTREAM.parent))
KEY = "sk-planted-fault-0123456789abcdef"
OTHER = "sk-another-fault-fedcba9876543210"  # a second client's, sent into the conversation the first opened
BLOCK = 1 << 20
PEAK_MB = 200  # the watch's VmHWM after the size row's requests: a 300 MB one made it over 379 MB before


@dataclass
class Watched:
    """One `hotloop watch --json` in front of the upstream, and what it printed and wrote once it ended."""

    root: Path
    env: dict[str, str]
    upstream: str  # the upstream's /v1 URL, to ask it directly
    url: str  # the watch's /v1 URL
    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    peak_mb: float = 0.0
    out: str = ""
    err: str = ""
    code: int | None = None

    def lines(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.out.splitlines() if line.startswith("{")]

    def said(self) -> list[str]:
        """The watch's notices: what a user of `--json` (or the table) reads of each fault."""
        return [f"{line['level']}: {line['message']}" for line in self.lines() if line["type"] == "notice"]

    def logs(self) -> list[Path]:
        return sorted((self.root / "data" / "sessions").glob("*.jsonl"))


Step = Callable[[Watched], None]  # what it finds goes to the row's problems and notes


def watch_row(name: str, agent: Step, check: Step) -> Custom:
    """A row: the watch in front of the upstream, `agent` (the requests) through it, then Ctrl-C, `check` on what the
    watch printed and wrote, and the checks every row makes."""

    def make(folder: Path) -> Row:
        watched = run(folder, name, agent)
        check(watched)
        if watched.code != 0:
            watched.problems.append(f"exit {watched.code}, documented 0 for a watch ended by Ctrl-C")
        watched.problems += open_steps(watched)
        shows = [Trial(watched.root, watched.root, log=log) for log in watched.logs()]
        valid = sorted({log_valid(show, watched.env) for show in shows}, key=lambda said: said == "yes")
        notes = [*watched.notes, f"the watch's peak memory: {watched.peak_mb:.0f} MB"]
        saw = [shown(line) for line in watched.said()[:4]]
        row = Row(name, saw, str(watched.code), valid[0] if valid else "no session", "-", False, 0.0, notes)
        row.problems = watched.problems
        outputs = [(watched.out, watched.err), *(pair for show in shows for pair in show.outputs)]
        row.traceback = any("Traceback" in out + err for out, err in outputs)
        return row

    return Custom(name, make)


def run(folder: Path, name: str, agent: Step) -> Watched:
    root, env = home(folder, name)
    upstream = subprocess.Popen((PYTHON, str(UPSTREAM)), stdout=subprocess.PIPE, start_new_session=True)
    try:
        assert upstream.stdout is not None
        base = upstream.stdout.readline().decode().strip()
        out, err = root / "watch.out", root / "watch.err"
        with out.open("wb") as stdout, err.open("wb") as stderr:
            command = (*HOTLOOP, "watch", "--upstream", base, "--json")
            watch = subprocess.Popen(command, cwd=root, env=env, stdout=stdout, stderr=stderr, start_new_session=True)
            try:
                watched = Watched(root, env, f"{base}/v1", f"{listening(err, watch)}/v1")
                agent(watched)
                watched.peak_mb = peak_mb(watch.pid)
                watch.send_signal(signal.SIGINT)  # Ctrl-C: how a watch without a command ends
                watched.code = watch.wait(timeout=LIMIT)
            finally:
                if watch.poll() is None:
                    os.killpg(watch.pid, signal.SIGKILL)
                    watch.wait()
        watched.out, watched.err = out.read_text(errors="replace"), err.read_text(errors="replace")
        return watched
    finally:
        os.killpg(upstream.pid, signal.SIGTERM)
        upstream.wait()


def listening(err: Path, watch: subprocess.Popen[bytes]) -> str:
    """The root URL the watch's first line says it listens at, once it has said it."""
    deadline = time.monotonic() + LIMIT
    while time.monotonic() < deadline and watch.poll() is None:
        said = err.read_text(errors="replace")
        if " → " in said:
            return said.split("listening on ", 1)[1].split(" ", 1)[0]
        time.sleep(0.05)
    raise RuntimeError(f"hotloop watch never listened: {err.read_text(errors='replace')}")


def peak_mb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) / 1024


def open_steps(watched: Watched) -> list[str]:
    """Every watched step and turn that began, ended: none left "streaming"."""
    problems = []
    for log in watched.logs():
        events = [decode(line) for line in log.read_bytes().splitlines()[1:]]
        counts = [sum(isinstance(e, kind) for e in events) for kind in (StepStarted, StepFinished, TurnStarted)]
        ended = sum(isinstance(e, TurnFinished) for e in events)
        if counts[0] != counts[1] or counts[2] != ended:
            problems.append(f"{log.name}: {counts[0]} steps and {counts[2]} turns began, {counts[1]} and {ended} ended")
    return problems


def client(base_url: str, key: str = KEY) -> openai.OpenAI:
    return openai.OpenAI(base_url=base_url, api_key=key, max_retries=0, timeout=LIMIT)


def posted(base_url: str, content: Any, headers: dict[str, str] | None = None) -> tuple[int, bytes, dict[str, str]]:
    """`content` POSTed as it is (bytes, or an iterator of them): the status, the body and the headers."""
    with client(base_url) as api:
        answer = api.post(
            "/chat/completions",
            cast_to=openai.HttpxBinaryResponseContent,
            content=content,
            options={"headers": {"Content-Type": "application/json", **(headers or {})}},
        )
        return answer.response.status_code, answer.content, dict(answer.response.headers)


def answered(base_url: str, model: str, stream: bool) -> bytes:
    """The answer's bytes as the SDK got them, unparsed."""
    with client(base_url) as api:
        messages: Any = [{"role": "user", "content": "hi"}]
        with api.chat.completions.with_streaming_response.create(model=model, messages=messages, stream=stream) as got:
            return b"".join(got.iter_bytes())


# ---- JSON nested 100,000 deep ----


def deep_everywhere(watched: Watched) -> None:
    """A request body, a whole answer and an SSE event nested 100,000 levels: each answered as it is without the watch."""
    from watch_upstream import deep

    body = b'{"model":"fine","stream":true,"messages":[{"role":"user","content":' + deep() + b"}]}"
    asks: dict[str, Callable[[str], object]] = {
        "a request body": lambda base: posted(base, body)[:2],
        "a whole answer": lambda base: answered(base, "deep", False),
        "an SSE event": lambda base: answered(base, "deep", True),
    }
    for where, ask in asks.items():
        direct, through = ask(watched.upstream), ask(watched.url)
        if through != direct:
            watched.problems.append(f"{where}: the agent got other bytes or another status through the watch")
    watched.notes.append("the agent got the upstream's 200 and its bytes, three times")


def nesting_said(watched: Watched) -> None:
    lines = watched.said()
    named = [line for line in lines if "nested too deep" in line or "nested deeper than" in line]
    if not len(named) == len(lines) == 3:
        watched.problems.append(f"{len(lines)} lines, {len(named)} of them naming the nesting, not 3 and 3")


# ---- a key sent and echoed back ----


def echoed_keys(watched: Watched) -> None:
    """The key in the headers, echoed in a stream, a whole answer, a tool call and a refusal; another client's key in
    a tool result of the first one's conversation. The agent must get its key back: the watch masks what it writes."""
    asked: Any = [{"role": "user", "content": f"log in with {KEY}"}]
    with client(watched.url) as api, client(watched.url, OTHER) as other:
        chunks = api.chat.completions.create(model="echo", messages=asked, stream=True)
        said = "".join(chunk.choices[0].delta.content or "" for chunk in chunks if chunk.choices)
        message = api.chat.completions.create(model="echo", messages=asked).choices[0].message
        [call] = message.model_dump()["tool_calls"] or []
        result = {"role": "tool", "tool_call_id": call["id"], "content": f"logged in as {OTHER}"}
        following: Any = [*asked, message.model_dump(exclude_none=True), result]
        other.chat.completions.create(model="fine", messages=following)
        try:
            api.chat.completions.create(model="refuse", messages=asked)
            refused = ""
        except openai.AuthenticationError as error:
            refused = str(error)
    if not all(KEY in text for text in (said, message.content or "", call["function"]["arguments"], refused)):
        watched.problems.append("the agent did not get its key back whole: the watch altered what it forwarded")


def nowhere(watched: Watched) -> None:
    """Neither key in the watch's stdout or stderr, any file of the data folder, or any export of its sessions."""
    exports = []
    for log in watched.logs():
        for fmt in ("md", "json", "html", "atif"):
            session = log.stem.rpartition("_")[2]
            code, out, err = execute(
                (*HOTLOOP, "sessions", "export", session, "--format", fmt), watched.root, watched.env
            )
            exports.append(out + err)
            if code != 0:
                watched.problems.append(f"export {fmt} of {session} exited {code}")
    texts = {"stdout": watched.out, "stderr": watched.err, "exports": "".join(exports)}
    texts |= {p.name: p.read_text(errors="replace") for p in (watched.root / "data").rglob("*") if p.is_file()}
    leaks = [where for where, text in texts.items() if KEY in text or OTHER in text]
    if leaks:
        watched.problems.append(f"a key in: {', '.join(leaks)}")
    masked = sum(line.count("[redacted]") for line in watched.out.splitlines())
    watched.notes.append(f"both keys masked: [redacted] {masked} times in --json, in none of {len(texts)} outputs")


# ---- 30, 100 and 300 MB requests ----


HEAD, TAIL = b'{"model":"fine","stream":true,"messages":[{"role":"user","content":"', b'"}]}'
SIZES = (30, 100, 300)  # MB of prompt: the first within what the watch reads, the others past it


def huge_requests(watched: Watched) -> None:
    """Each sent a megabyte at a time with its Content-Length: the upstream must get every byte of each."""
    for megabytes in SIZES:
        parts = [HEAD, *[b"x" * BLOCK] * megabytes, TAIL]
        digest = hashlib.sha256()
        for part in parts:
            digest.update(part)
        length = sum(map(len, parts))
        status, _, headers = posted(watched.url, iter(parts), {"Content-Length": str(length)})
        got = (headers.get("x-received-bytes"), headers.get("x-received-sha256"))
        if status != 200 or got != (str(length), digest.hexdigest()):
            watched.problems.append(f"{megabytes} MB: status {status}, the upstream got {got[0]} bytes, not the same")
    watched.notes.append(f"{', '.join(map(str, SIZES))} MB requests forwarded byte for byte (the upstream's SHA-256)")


def kept_bounded(watched: Watched) -> None:
    """Two lines (the requests past the read limit), the watch's peak memory under PEAK_MB, no big file written."""
    unread = [line for line in watched.said() if "forwarded unread" in line]
    if len(unread) != 2 or len(watched.said()) != 2:
        watched.problems.append(f"{len(watched.said())} lines, {len(unread)} saying a request went unread, not 2")
    if watched.peak_mb > PEAK_MB:
        watched.problems.append(f"the watch's memory peaked at {watched.peak_mb:.0f} MB, over {PEAK_MB}")
    files = [p for p in (watched.root / "data").rglob("*") if p.is_file()]
    biggest = max((p.stat().st_size for p in files), default=0)
    if biggest > 1_000_000:
        watched.problems.append(f"the data folder holds a file of {biggest:,} bytes")
    watched.notes.append(f"its biggest file (a log or a summary): {biggest:,} bytes")


# ---- an upstream that drops mid-stream ----


def dropped(watched: Watched) -> None:
    """The stream cut after two chunks: the agent must see the same bytes and the same error as without the watch."""
    seen = []
    for base in (watched.upstream, watched.url):
        got, error = b"", ""
        try:
            with (
                client(base) as api,
                api.chat.completions.with_streaming_response.create(
                    model="drop", messages=[{"role": "user", "content": "hi"}], stream=True
                ) as answer,
            ):
                for block in answer.iter_bytes():
                    got += block
        except Exception as raised:
            error = f"{type(raised).__name__}: {raised}"
        seen.append((got, error))
    (direct, direct_error), (through, through_error) = seen
    if through != direct or through_error != direct_error or not direct_error:
        watched.problems.append(f"through the watch: {shown(through_error)}; directly: {shown(direct_error)}")
    watched.notes.append(f"the agent's SDK said, as without the watch: {shown(through_error, 80)}")


def drop_said(watched: Watched) -> None:
    lines = watched.said()
    if len(lines) != 1 or "broke off mid-stream" not in lines[0] or watched.upstream[:-3] not in lines[0]:
        watched.problems.append(f"{len(lines)} lines, not one naming the upstream and the drop")
    elif "message:" in lines[0]:
        watched.problems.append("the line quotes aiohttp's `400, message:`")
    turns = [e for log in watched.logs() for e in map(decode, log.read_bytes().splitlines()[1:])]
    if [e.reason for e in turns if isinstance(e, TurnFinished)] != ["error"]:
        watched.problems.append("the log's turn did not end as an error")
