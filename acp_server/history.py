"""hotloop's saved sessions over ACP: `session/list` lists them, `session/load` replays one before it goes on.

A listing holds hotloop's own sessions (not watched ones), those run in the client's `cwd` when it names one,
the one written to last first, each with its title and the time it was last written. A replay turns the log
back into the updates a client would have seen: each prompt as a `user_message_chunk`, the answer and the
reasoning as chunks, and each tool call once, as a `tool_call` with its final status and content (the diff an
edit or a write made, the call's result). Figures go through the session's own `Updates`, so the ledger in
`_meta` is the whole session's, as its log holds it, and the dollars spent go on counting from there.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from acp import text_block, tool_content, tool_diff_content, update_user_message_text
from acp.schema import SessionInfo, ToolCallLocation, ToolCallStart

from hotloop import paths
from hotloop.acp_server.updates import KINDS, Content, Update, Updates, tail, title_of
from hotloop.agent.events import AgentEvent, Compacted, StepFinished, ToolFinished, ToolStarted, TurnStarted
from hotloop.providers.events import ReasoningDelta, TextDelta, ToolCallReady
from hotloop.sessions.store import SessionError, list_sessions, read_header

PAGE = 100  # sessions a `session/list` answer holds; the cursor is where the next page starts


@dataclass(frozen=True)
class Page:
    sessions: list[SessionInfo]
    next_cursor: str | None


def listed(cwd: str | None, cursor: str | None) -> Page:
    """hotloop's sessions (in `cwd` if given), the one written to last first, a page from `cursor` on."""
    infos: list[tuple[float, SessionInfo]] = []
    for summary in list_sessions(paths.sessions_dir()).sessions:
        if summary.origin:
            continue  # another agent's session, watched: not one hotloop can go on with
        try:
            header = read_header(summary.path)[0]
            written = summary.path.stat().st_mtime
        except (SessionError, OSError):
            continue
        if cwd is not None and header.workspace != cwd:
            continue
        title = summary.title or (summary.prompts[0] if summary.prompts else None)
        updated = datetime.fromtimestamp(written, UTC).isoformat().replace("+00:00", "Z")
        meta = {"hotloop": {"provider": summary.provider, "model": summary.model, "turns": summary.turns}}
        info = SessionInfo(
            session_id=summary.id, cwd=header.workspace, title=title, updated_at=updated, field_meta=meta
        )
        infos.append((written, info))
    infos.sort(key=lambda pair: pair[0], reverse=True)
    start = int(cursor) if cursor is not None and cursor.isdigit() else 0
    page = [info for _, info in infos[start : start + PAGE]]
    more = start + PAGE < len(infos)
    return Page(page, str(start + PAGE) if more else None)


def replayed(events: list[AgentEvent], updates: Updates) -> list[Update]:
    """A saved session's events as the updates that show it again, in the order they happened."""
    finished = {event.call_id: event for event in events if isinstance(event, ToolFinished)}
    announced: set[str] = set()
    shown: list[Update] = []
    for event in events:
        if isinstance(event, TurnStarted):
            shown.append(update_user_message_text(event.prompt))
        elif isinstance(event, TextDelta | ReasoningDelta):
            shown.extend(updates(event))
        elif isinstance(event, ToolCallReady | ToolStarted) and event.call_id not in announced:
            announced.add(event.call_id)
            outcome = finished.get(event.call_id)
            shown.append(_call(event.call_id, event.name, event.arguments, outcome, updates))
        elif isinstance(event, StepFinished | Compacted):
            shown.extend(update for update in updates(event) if update.session_update != "usage_update")
        else:
            updates.pricer.learn(event)  # the provider and model each step was priced as
    context = updates.context()
    if context is not None:
        shown.extend(updates.usage_now(context))
    return shown


def _call(call_id: str, name: str, arguments: str, outcome: ToolFinished | None, updates: Updates) -> ToolCallStart:
    """A call as it ended: completed or failed (a call the log never saw end failed), with what it made."""
    try:
        parsed = json.loads(arguments) if arguments else {}
    except ValueError:
        parsed = {}
    args: dict[str, Any] = parsed if isinstance(parsed, dict) else {}
    path = args.get("path")
    where = updates.inside(path) if isinstance(path, str) else None
    ok = outcome is not None and outcome.status == "ok"
    content: list[Content] = []
    if ok and name in ("edit_file", "write_file") and isinstance(path, str):
        content.append(_change(str(where) if where is not None else path, name, args))
    result = outcome.result if outcome is not None else "the session ended before this call did"
    content.append(tool_content(text_block(tail(result))))
    return ToolCallStart(
        session_update="tool_call",
        tool_call_id=call_id,
        title=title_of(name, args),
        kind=KINDS.get(name, "other"),
        status="completed" if ok else "failed",
        content=content,
        locations=[ToolCallLocation(path=str(where))] if where is not None else None,
        raw_input=args or None,
    )


def _change(path: str, name: str, args: dict[str, Any]) -> Content:
    """The change an edit or a write made, from its arguments (the file may have changed since)."""
    if name == "write_file":
        content = args.get("content")
        return tool_diff_content(path, content if isinstance(content, str) else "", None)
    old, new = args.get("old_string"), args.get("new_string")
    return tool_diff_content(path, new if isinstance(new, str) else "", old if isinstance(old, str) else "")


def session_path(session_id: str) -> Path:
    """The log of the hotloop session `session_id` (the id `session/list` gave), or a SessionError."""
    for path in paths.sessions_dir().glob(f"*_{session_id}.jsonl") if session_id.isalnum() else []:
        return path
    raise SessionError(f"no hotloop session {session_id!r} (session/list lists them)")
