"""The simulator's deterministic "model".

Given the conversation and the tools offered, it either follows a scenario file (one step
per assistant message) or plans from the user's words (`planner.py`): the batches of calls the
task asks for, one a step, then a Markdown answer built from their results (`answers.py`).
It answers hotloop's side jobs here. The same request always gets the same reply, whatever the
protocol or the server it reaches.

A scenario file, and the faults a reply can carry, are `scenario.py`'s.
"""

from __future__ import annotations

import re
from typing import Any

from hotloop.sim.agents import strip_context, title_subject, working_directory
from hotloop.sim.answers import answer, headline, preface
from hotloop.sim.planner import clauses, plan, resolved
from hotloop.sim.scenario import Reply, scenario_step
from hotloop.sim.template import Turn
from hotloop.sim.toolbox import Toolbox


def reply(turns: list[Turn], tools: list[dict[str, Any]], scenario: tuple[Reply, ...] = ()) -> Reply:
    """The reply to a conversation, from the scenario while it lasts, then from the planner.

    A side job (classify a task, title a conversation, summarize a tool result, compact the conversation) is answered
    whatever the scenario says: a scenario scripts the main agent's steps.
    """
    side_job = _side_job(turns)
    if side_job is not None:
        return side_job
    step = scenario_step(turns)
    if step < len(scenario):
        return scenario[step]
    # An agent's reminders and context come as user messages too (Claude Code's <system-reminder>): not the task.
    asked = [i for i, turn in enumerate(turns) if turn.role == "user" and strip_context(turn.text)]
    last_user = asked[-1] if asked else max((i for i, turn in enumerate(turns) if turn.role == "user"), default=-1)
    task, earlier = _task_of(turns[last_user].text if last_user >= 0 else "")
    since = turns[last_user + 1 :]
    toolbox = Toolbox(tools, working_directory(turns))
    batches = plan(task, toolbox)
    done = earlier + sum(1 for turn in since if turn.role == "assistant")
    # A batch with nothing left to call (an edit of a file that couldn't be read) ends the work: the answer says so.
    calls = resolved(batches[done], since, toolbox) if done < len(batches) else []
    if calls:
        return Reply(text=preface(calls), calls=tuple(calls))
    return Reply(text=answer(task, since))


_SPLIT_PARTS = re.compile(
    r"[.;!?\n]+(?=\s|$)|\b(?:and then|then|after that|afterwards|also)\b"
    r"|\band (?=(?:add|fix|write|run|read|grep|list|update|refactor|test|explain|create|remove|delete|check|find)\b)",
    re.IGNORECASE,
)
_POLITE = re.compile(r"^(?:please|can you|could you|would you|i want you to|i'd like you to)\s+", re.IGNORECASE)
_SUMMARY_WORDS = re.compile(r"at most (\d+) words")
# hotloop's compaction instruction (agent/compaction.py) says this; the summary it asks for replaces the conversation.
_COMPACTING = "is about to be compacted"
_SUMMARY_BLOCK = re.compile(r"<summary>\n(.*)\n</summary>", re.DOTALL)
_ASKED, _CALLED = "- The user asked: ", "  - called "  # a compaction summary's lines


def _task_of(text: str) -> tuple[str, int]:
    """The request a user message makes, and how many batches of calls were made for it already.

    After a compaction the message holds the summary: the request that follows it, or, when the
    compaction came mid-turn, the summary's last request, past the calls the summary records (a
    model goes on from a summary; it doesn't start the work over).
    """
    found = _SUMMARY_BLOCK.search(text)
    if found is None:
        return strip_context(text), 0
    if after := text[found.end() :].strip():
        return strip_context(after), 0
    task, done = "", 0
    for line in found.group(1).splitlines():
        if line.startswith(_ASKED):
            task, done = line.removeprefix(_ASKED), 0
        elif line.startswith(_CALLED):
            done += 1
    return task, done


def _side_job(turns: list[Turn]) -> Reply | None:
    """A side job asked by its system prompt, or as the last paragraph of the request's last message (a user's)."""
    system = turns[0].text if turns and turns[0].role == "system" else ""
    first_user = next((turn.text for turn in turns if turn.role == "user"), "")
    subject = title_subject(turns)
    if subject is not None:
        return Reply(text=title_for(subject))
    fresh = _job(system, first_user)
    if fresh is not None or not turns or turns[-1].role != "user":
        return fresh
    # Asked at the end of the conversation it is about, to read its cached prefix: a title is about all of it.
    about, _, instruction = turns[-1].text.rpartition("\n\n")
    if _COMPACTING in instruction:
        return Reply(text=conversation_summary(turns[:-1]))
    return _job(instruction, about or first_user)


def _job(instruction: str, about: str) -> Reply | None:
    """The answer to a side job's `instruction` about a task, a transcript or a tool result; None if it is none."""
    if "Reply with one word: simple" in instruction:
        return Reply(text=classify(strip_context(about)))
    if instruction.startswith(("Write a title", "Reply with only a title")):
        return Reply(text=title_for(about))
    if instruction.startswith("Summarize this tool result"):
        words = _SUMMARY_WORDS.search(instruction)
        return Reply(text=summary_of(about, int(words.group(1)) if words else 60))
    return None


def conversation_summary(turns: list[Turn]) -> str:
    """A compaction's summary: each request of the user, the tools it took, and the first line of the answer.

    An earlier summary (the conversation was compacted before) is kept whole at the top.
    """
    lines = ["## The conversation so far"]
    for turn in turns:
        if turn.role == "user" and (earlier := _SUMMARY_BLOCK.search(turn.text)):
            lines += earlier.group(1).splitlines()[1:]
        elif turn.role == "user":
            lines.append(f"{_ASKED}{_clipped(strip_context(turn.text), 100)}")
        elif turn.role == "assistant" and turn.calls:
            calls = ", ".join(f"{call.name}({_clipped(call.arguments, 60)})" for call in turn.calls)
            lines.append(f"{_CALLED}{calls}")
        elif turn.role == "assistant":
            first = next((line for line in turn.text.splitlines() if line.strip(" #")), "")
            lines.append(f"  - answered: {_clipped(first.strip(' #'), 100)}")
    return "\n".join(lines)


def _clipped(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify(task: str) -> str:
    """simple or complex: a task of several parts, or a long one, is complex."""
    parts = [part for part in _SPLIT_PARTS.split(task) if part and part.strip(" ,")]
    return "complex" if len(parts) >= 2 or len(task.split()) > 25 else "simple"


def title_for(transcript: str) -> str:
    """The first request's first clause, in at most six words."""
    first = next((line[6:] for line in transcript.splitlines() if line.startswith("User: ")), transcript)
    clause = clauses(strip_context(first))[0]
    words = _POLITE.sub("", clause.strip()).rstrip(" ,.?!").split()[:6]
    title = " ".join(words).rstrip(",")
    return title[:1].upper() + title[1:] if title else "Untitled session"


def summary_of(text: str, words: int) -> str:
    """The start of a tool result, cut at `words` words, and how much there was."""
    _, _, result = text.partition(" returned:\n")
    lines = (result or text).splitlines()
    kept: list[str] = []
    for line in lines:
        if sum(len(k.split()) for k in kept) + len(line.split()) > words:
            break
        kept.append(line)
    return "\n".join(kept) + f"\n… ({len(lines):,} lines, {len(result or text):,} characters in all)"


def thinking_for(task_turns: list[Turn], planned: Reply) -> str:
    """What the model "thinks" before a reply, for a client that asked for reasoning but got none planned."""
    last_user = next((turn.text for turn in reversed(task_turns) if turn.role == "user"), "")
    task = headline(strip_context(last_user))
    if planned.calls:
        names = ", ".join(sorted({call.name for call in planned.calls}))
        return (
            f"The task is: {task}. I need {len(planned.calls)} tool call(s) first ({names}); they can run in parallel."
        )
    return f"The task is: {task}. I have what I need to answer."
