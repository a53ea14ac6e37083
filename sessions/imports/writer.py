"""An imported conversation written as a hotloop session log, with the events hotloop's agent emits.

The log's id is derived from the agent's name and the source's session id (and a sub-agent's key), and its
file is named by the source's start: a re-import writes the same path, replacing the earlier import once the
new one is whole (written beside it, then renamed), so importing twice never makes two sessions.

A step's cache verdict comes from `CacheExplainer` where the source kept the request's shape (both this
step's and the last); where it kept only usage, `usage_verdict` says what the figures show and what they
can't.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import msgspec

from hotloop import __version__
from hotloop.agent.cache_explainer import ANTHROPIC_TTL, SLACK_TOKENS, CacheExplainer
from hotloop.agent.events import AgentEvent, ToolStatus, TurnEnd, TurnFinished, TurnStarted
from hotloop.agent.recorder import StepRecorder
from hotloop.agent.step import StepAccumulator
from hotloop.providers.events import CUT_SHORT, ReasoningDelta, TextDelta, ToolCallReady
from hotloop.sessions.imports.model import Imported, Step, Turn
from hotloop.sessions.log import FORMAT_VERSION, SessionHeader, SessionLog, is_in_use
from hotloop.sessions.summary import Summary, summary_path


@dataclass(frozen=True)
class Written:
    id: str
    path: Path
    steps: int
    replaced: bool  # an earlier import of the same source was replaced


def stable_id(agent: str, source_id: str, side_key: str = "") -> str:
    """The session id of an import: the same source always gets the same one."""
    return hashlib.blake2b(f"{agent}\0{source_id}\0{side_key}".encode(), digest_size=4).hexdigest()


def write_session(
    imported: Imported, folder: Path, *, side_of: str = "", secrets_to_mask: Iterable[str] = ()
) -> Written:
    """Write `imported` into `folder` as a session log, replacing an earlier import of it.

    Raises OSError when the folder can't be written, ValueError when the earlier import is open in a hotloop
    process or another import of the same source is under way.
    """
    session_id = stable_id(imported.agent, imported.source_id, imported.side_key)
    earlier = sorted(folder.glob(f"*_{session_id}.jsonl")) if folder.is_dir() else []
    for path in earlier:
        if is_in_use(path):
            raise ValueError(f"session {session_id} is open in another hotloop process; not replaced")
    folder.mkdir(mode=0o700, parents=True, exist_ok=True)
    started = imported.started if imported.started is not None else 0.0
    final = folder / f"{_stamp(started)}_{session_id}.jsonl"
    partial = folder / f".{session_id}.importing"
    header = SessionHeader(
        session_id,
        FORMAT_VERSION,
        started,
        __version__,
        imported.provider,
        imported.model,
        imported.workspace,
        base_url=imported.base_url,
        origin=imported.origin,
        side_of=side_of,
    )
    log = _open(partial, session_id, header, secrets_to_mask)
    try:
        steps = _Emitter(log, imported).all()
    finally:
        log.close()
    for path in earlier:
        if path != final:
            path.unlink(missing_ok=True)
            summary_path(path).unlink(missing_ok=True)
    os.replace(summary_path(partial), summary_path(final))
    os.replace(partial, final)
    return Written(session_id, final, steps, bool(earlier))


def _open(path: Path, session_id: str, header: SessionHeader, secrets: Iterable[str]) -> SessionLog:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # truncated only once held: two imports of one source
    except BlockingIOError:
        os.close(fd)
        raise ValueError(f"session {session_id} is being imported by another process") from None
    os.ftruncate(fd, 0)
    line = msgspec.json.encode(header) + b"\n"
    os.write(fd, line)
    summary = Summary(costed=True, size=len(line))
    summary.learn(header.provider, header.base_url)
    return SessionLog(path, session_id, fd, summary, secrets)


class _Emitter:
    """Emits one conversation's turns as the agent's events, each at its recorded time."""

    def __init__(self, log: SessionLog, imported: Imported) -> None:
        self._log = log
        self._imported = imported
        self._lifetimes = bool(imported.wire.traits.cache.lifetimes)  # a cached prefix lives a known time
        self._explainer = CacheExplainer()
        self._previous: Step | None = None
        self._steps = 0

    def all(self) -> int:
        for number, turn in enumerate(self._imported.turns, 1):
            self._turn(number, turn)
        return self._steps

    def _emit(self, event: AgentEvent) -> None:
        self._log.write(event)

    def _turn(self, number: int, turn: Turn) -> None:
        at = turn.at if turn.at is not None else _first_time(turn)
        self._emit(TurnStarted(turn=number, prompt=turn.prompt, ts=at))
        end = at
        for index, step in enumerate(turn.steps, 1):
            end = self._step(number, index, step) or end
        last = turn.steps[-1] if turn.steps else None
        reason: TurnEnd
        if last is None:
            reason = "interrupted"
        elif last.calls and all(call.result is None for call in last.calls):
            reason = "interrupted"  # the source ends before the calls it asked for
        else:
            reason = "cut_off" if last.finish_reason in CUT_SHORT else "answer"
        self._emit(TurnFinished(turn=number, reason=reason, steps=len(turn.steps), wall=end - at, ts=end))

    def _step(self, turn: int, index: int, step: Step) -> float:
        """Emit the step; its end (the last tool result's time, else the response's)."""
        self._steps += 1
        started = step.started if step.started is not None else step.ended or 0.0
        ended = step.ended if step.ended is not None else started
        fingerprint = None
        if step.segments is not None:
            fingerprint = self._explainer.fingerprint_wire(step.segments, self._imported.provider, step.model, started)
        else:
            self._explainer = CacheExplainer()  # a request whose shape is unknown: no earlier one to compare with
        recorder = StepRecorder(self._emit, self._imported.wire, turn, index)
        recorder.start(self._imported.provider, step.model, fingerprint, ts=started)
        for text in step.reasoning:
            self._emit(ReasoningDelta(text=text, ts=ended))
        for text in step.text:
            self._emit(TextDelta(text=text, ts=ended))
        for n, call in enumerate(step.calls):
            self._emit(ToolCallReady(index=n, call_id=call.call_id, name=call.name, arguments=call.arguments, ts=ended))
        note = self._explainer.explain(step.usage, [], self._lifetimes) if fingerprint is not None else ""
        note = note or usage_verdict(self._previous, step, self._lifetimes)
        self._previous = step
        # No transcript records a first token's time: the stream holds the usage and the stop, no TTFT or rate.
        stream = StepAccumulator(started=started, usage=step.usage, finish_reason=step.finish_reason)
        recorder.respond(stream, ended, note, ts=ended)
        end = ended
        for call in step.calls:
            if call.result is None:
                continue
            begun = call.at if call.at is not None else ended
            done = call.done_at if call.done_at is not None else begun
            recorder.tool_started(call.call_id, call.name, call.arguments, ts=begun)
            status: ToolStatus = "error" if call.is_error else "ok"
            recorder.tool_finished(call.call_id, call.name, status, call.result, (begun, max(done, begun)), ts=done)
            recorder.phase.count += 1
            end = max(end, done)
        recorder.finish(end, ts=end)
        return end


def _first_time(turn: Turn) -> float:
    return next((step.started or step.ended or 0.0 for step in turn.steps), 0.0)


def usage_verdict(previous: Step | None, step: Step, lifetimes: bool) -> str:
    """What two steps' usage alone says of a cache shortfall: the fall, the idle gap, and what stays unknown."""
    if previous is None or previous.usage is None or step.usage is None:
        return ""
    before, now = previous.usage, step.usage
    if before.prompt_total is None or now.prompt_total is None or now.cache_read is None:
        return ""
    cached = min(before.prompt_total, now.prompt_total)
    if before.cache_write is not None:
        cached = min(cached, (before.cache_read or 0) + before.cache_write)
    if cached - now.cache_read <= SLACK_TOKENS:
        return ""
    fell = f"cache read fell from {cached:,} to {now.cache_read:,}"
    idle = step.started - previous.ended if step.started is not None and previous.ended is not None else None
    if idle is not None and idle > ANTHROPIC_TTL:
        lifetime = "the 5-minute lifetime" if lifetimes else "an idle prefix's usual 5 to 10 minutes"
        return (
            f"{fell} after {_spoken(idle)} idle: consistent with {lifetime}"
            " (the source keeps no requests, so a changed prefix can't be ruled out)"
        )
    return (
        f"{fell} after {_spoken(idle or 0.0)}: the source keeps only usage, so what changed"
        " (tools, the system prompt, an earlier message) or whether the server evicted it can't be told"
    )


def _spoken(seconds: float) -> str:
    return f"{seconds / 60:,.0f} min" if seconds >= 90 else f"{seconds:,.1f} s"


def _stamp(started: float) -> str:
    """The file name's time, as a live session's; a time the platform can't represent names the epoch."""
    try:
        return datetime.fromtimestamp(started).strftime("%Y%m%dT%H%M%S")
    except (ValueError, OverflowError, OSError):
        return "19700101T000000"
