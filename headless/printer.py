"""The headless printer: the event stream as a terminal or a pipe reads it.

The answer streams to stdout, rendered as Markdown on a terminal and raw when piped, so
`hotloop run "..." > answer.md` keeps only the answer. Tool calls, the per-step line and
notices go to stderr. With `json_lines`, stdout carries every event as a JSON line instead,
as the session log stores it: key values masked (`secrets`), and DEL and C1 controls, which
JSON may carry raw, escaped so that a terminal reading the lines can't act on them. The first
line carries the session's id (`"session":"3f2a91c0"`, after its type); the id exists once the
log does, at the first turn, so lines said before that (config warnings, MCP notices) are held
until then, never reordered.

Everything else printed is inert (`agent/text.py`): a model, a tool or a server can put escape
sequences in what it says, and they are shown, never obeyed.

When stdout's reader goes away (`hotloop run … | head`), nothing more is written there and
`on_closed` is called, once: the run cancels its turn then, as Ctrl-C would, rather than die
in the middle of an event with its step unfinished and its log unsettled. From then on stderr
is quiet too, as after SIGPIPE: the cancel's lines (the step cut short, `turn 1 cancelled`)
answer no one's Ctrl-C; only a warning or an error still says something went wrong.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Callable
from typing import TextIO

import msgspec
from rich.console import Console
from rich.text import Text

from hotloop.agent.events import (
    AgentEvent,
    ApprovalAsked,
    ApprovalDecided,
    Compacted,
    Notice,
    OwnRequest,
    ProviderSwitched,
    SessionTitled,
    SideRequest,
    StepFinished,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    encode,
)
from hotloop.agent.figures import compaction_summary, seconds, side_request_summary, step_summary
from hotloop.agent.pricing import Cost, StepPricer, dollars
from hotloop.agent.switching import describe_switch
from hotloop.agent.text import inert
from hotloop.headless.markdown_stream import MarkdownStream
from hotloop.providers.events import ReasoningDelta, ServerToolUsed, TextDelta
from hotloop.sessions.masking import Masker

_STATUS_MARK = {"ok": ("✓", "green"), "error": ("✗", "red"), "cancelled": ("⊘", "yellow")}
_NOTICE_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red"}


class Printer:
    """Renders events for a terminal or a pipe. Colour only goes to a terminal; a pipe gets plain lines."""

    def __init__(
        self,
        out: TextIO | None = None,
        err: TextIO | None = None,
        json_lines: bool = False,
        secrets: list[str] | None = None,
        pricer: StepPricer | None = None,
    ) -> None:
        """`pricer` prices each step line (and `--json`'s `step_finished` lines); without one, no dollars are said."""
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.console = Console(file=self.err, highlight=False, soft_wrap=True) if self.err.isatty() else None
        # A terminal gets the answer rendered as Markdown while it streams; a pipe gets the raw text.
        self.markdown = MarkdownStream(Console(file=self.out)) if self.out.isatty() and not json_lines else None
        self.json_lines = json_lines
        self.pricer = pricer
        self._masker = Masker(secrets or [])
        self._open: str | None = None  # "text" or "reasoning" while a stream is mid-line
        self.session_id: str | None = None  # set by the caller once the session's log exists
        self._held: list[str] | None = [] if json_lines else None  # JSON lines waiting for the id; None once it's out
        self.closed = False  # stdout's reader went away: nothing more goes there
        self.on_closed: Callable[[], object] = lambda: None

    def __call__(self, event: AgentEvent) -> None:
        if self.closed and not (isinstance(event, Notice) and event.level != "info"):
            return  # the reader went away: what follows is the cancel it caused
        if self.pricer is not None:
            self.pricer.learn(event)
        if self.json_lines:
            lines = [_escaped(self._masker.masked(encode(masked)).decode()) for masked in self._masker.events(event)]
            if isinstance(event, (StepFinished, Compacted, SideRequest)) and self.pricer is not None and lines:
                lines[-1] = _with_cost(lines[-1], self.pricer.cost(event))
            self._json(lines)
            if isinstance(event, Notice) and event.level != "info":
                self._status(f"{event.level}: {event.message}", _NOTICE_STYLE[event.level])
            return
        if isinstance(event, TextDelta):
            self._stream("text", event.text)
        elif isinstance(event, ReasoningDelta):
            self._stream("reasoning", event.text)
        elif isinstance(event, ToolStarted):
            self._status(f"  ▸ {event.name} {_clip(event.arguments, 120)}", "dim")
        elif isinstance(event, ToolFinished):
            self._status(*_tool_line(event))
        elif isinstance(event, ServerToolUsed):
            self._status(f"  ⚙ {event.name} (run by the provider) {_clip(event.arguments, 120)}", "dim")
        elif isinstance(event, StepFinished):
            self._status(self._priced(_step_line(event), event), "cyan")
        elif isinstance(event, ApprovalAsked):
            self._status(f"  ? {event.name} asked to run: {_clip(event.subject, 120)}", "yellow")
        elif isinstance(event, ApprovalDecided) and event.allowed:  # a refusal is the call's own error line
            self._status(f"  ✓ {event.name} allowed by {event.by}", "dim")
        elif isinstance(event, ProviderSwitched):
            self._status(describe_switch(event), "cyan")
        elif isinstance(event, Notice):
            self._status(f"{event.level}: {event.message}", _NOTICE_STYLE[event.level])
        elif isinstance(event, SessionTitled):
            self._status(f"session titled: {event.title}", "dim")
        elif isinstance(event, Compacted):
            self._status(self._priced(compaction_summary(event), event), "cyan")
        elif isinstance(event, SideRequest):
            self._status(self._priced(side_request_summary(event), event), "dim")
        elif isinstance(event, TurnFinished):
            self._end_stream()
            if event.reason == "cancelled":
                self._status(f"turn {event.turn} cancelled", "yellow")

    def _priced(self, line: str, event: StepFinished | OwnRequest) -> str:
        return line if self.pricer is None else f"{line} · {dollars(self.pricer.cost(event))}"

    def close(self) -> None:
        """End a stream left open (a replay of a session that stopped mid-answer); write JSON lines still held."""
        self._end_stream()
        if self._held:
            self._write_lines(self._held)  # no log was ever opened: there is no id to give
        self._held = None

    def _json(self, lines: list[str]) -> None:
        if self._held is not None:
            self._held += lines
            if self.session_id is None or not self._held:
                return
            lines, self._held = self._held, None
            lines[0] = _with_session(lines[0], self.session_id)
        self._write_lines(lines)

    def _write_lines(self, lines: list[str]) -> None:
        if lines:
            self._to_out("".join(line + "\n" for line in lines))

    def _to_out(self, text: str) -> None:
        """`text` to stdout, as Markdown on a terminal, unless its reader went away."""
        if self.closed:
            return
        try:
            if self.markdown is not None and self._open == "text":
                self.markdown.write(text)
            else:
                self.out.write(text)
                self.out.flush()
        except BrokenPipeError:
            self.closed = True
            # What is still buffered goes nowhere at exit, instead of failing again there.
            os.dup2(os.open(os.devnull, os.O_WRONLY), self.out.fileno())
            self.on_closed()

    def _stream(self, kind: str, text: str) -> None:
        if self._open != kind:
            self._end_stream()
        self._open = kind
        text = inert(text)
        if kind == "text":
            self._to_out(text)
        elif self.console is not None:
            self.console.print(Text(text, style="dim italic"), end="")
        else:
            self.err.write(text)

    def _end_stream(self) -> None:
        if self._open == "text" and self.markdown is not None:
            if not self.closed:
                self.markdown.close()
        elif self._open == "text":
            self._to_out("\n")
        elif self._open == "reasoning":
            self.err.write("\n")
        self._open = None

    def _status(self, line: str, style: str) -> None:
        self._end_stream()
        line = inert(line)
        if self.console is not None:
            self.console.print(Text(line, style=style))
        else:
            self.err.write(line + "\n")
            self.err.flush()


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _step_line(step: StepFinished) -> str:
    """The step's summary led by its turn (`turn 2 · step 1 · …`): a run of several prompts starts each at step 1."""
    return f"turn {step.turn} · {step_summary(step)}"


def _tool_line(event: ToolFinished) -> tuple[str, str]:
    mark, style = _STATUS_MARK[event.status]
    line = f"  {mark} {event.name} {seconds(event.duration)}" + (f" ({event.reused})" if event.reused else "")
    if event.status != "ok":
        line += f" · {_clip(event.result, 160)}"
    return line, style


_RAW_IN_JSON = re.compile("[\x7f-\x9f]")


def _with_session(line: str, session_id: str) -> str:
    """`{"type":"turn_started","session":"3f2a91c0",…}`: the id after the tag, which the encoder writes first."""
    tag, comma, rest = line.partition('",')
    if not comma:
        return line  # not an event line as the encoder writes them: left as it is
    return f'{tag}","session":{msgspec.json.encode(session_id).decode()},{rest}'


def _with_cost(line: str, cost: Cost | None) -> str:
    """A step's JSON line with its dollars, `"cost":{"usd":0.0123,"source":"price table"}`; `"cost":null`: unknown."""
    priced = "null" if cost is None else f'{{"usd":{cost.total},"source":"{cost.source}"}}'
    return f'{line[:-1]},"cost":{priced}}}'


def _escaped(line: str) -> str:
    """A JSON line with DEL and C1 controls escaped, as JSON allows and a terminal needs."""
    return _RAW_IN_JSON.sub(lambda match: f"\\u{ord(match.group()):04x}", line)
