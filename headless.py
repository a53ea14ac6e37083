"""`hotloop run`: the agent without the TUI.

The answer streams to stdout, so `hotloop run "..." > answer.md` keeps only the answer.
Tool calls, the per-step line and notices go to stderr. With `--json`, stdout carries every
event as a JSON line instead, exactly as the session log stores it.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from rich.console import Console
from rich.text import Text

from hotloop.agent.events import (
    AgentEvent,
    Notice,
    ProviderSwitched,
    SessionTitled,
    StepFinished,
    ToolFinished,
    ToolStarted,
    TurnFinished,
    encode,
)
from hotloop.agent.figures import seconds, step_summary
from hotloop.agent.switching import describe_switch
from hotloop.config import AUTO_TIER, Choice, Config, load_config, resolve
from hotloop.markdown_stream import MarkdownStream
from hotloop.providers.events import ReasoningDelta, ServerToolUsed, TextDelta
from hotloop.slash import Slash

if TYPE_CHECKING:
    from hotloop.agent.loop import Agent
    from hotloop.routing import Router
    from hotloop.runtime import Runtime

_STATUS_MARK = {"ok": ("✓", "green"), "error": ("✗", "red"), "cancelled": ("⊘", "yellow")}
_NOTICE_STYLE = {"info": "cyan", "warning": "yellow", "error": "bold red"}
SIDE_JOB_GRACE = 10.0  # seconds `hotloop run` waits at the end for a title still being written


class Printer:
    """Renders events for a terminal or a pipe. Colour only goes to a terminal; a pipe gets plain lines."""

    def __init__(self, out: TextIO | None = None, err: TextIO | None = None, json_lines: bool = False) -> None:
        self.out = out or sys.stdout
        self.err = err or sys.stderr
        self.console = Console(file=self.err, highlight=False, soft_wrap=True) if self.err.isatty() else None
        # A terminal gets the answer rendered as Markdown while it streams; a pipe gets the raw text.
        self.markdown = MarkdownStream(Console(file=self.out)) if self.out.isatty() and not json_lines else None
        self.json_lines = json_lines
        self._open: str | None = None  # "text" or "reasoning" while a stream is mid-line

    def __call__(self, event: AgentEvent) -> None:
        if self.json_lines:
            self.out.write(encode(event).decode() + "\n")
            self.out.flush()
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
            self._status(step_summary(event), "cyan")
        elif isinstance(event, ProviderSwitched):
            self._status(describe_switch(event), "cyan")
        elif isinstance(event, Notice):
            self._status(f"{event.level}: {event.message}", _NOTICE_STYLE[event.level])
        elif isinstance(event, SessionTitled):
            self._status(f"session titled: {event.title}", "dim")
        elif isinstance(event, TurnFinished):
            self._end_stream()

    def close(self) -> None:
        """End a stream left open (a replay of a session that stopped mid-answer)."""
        self._end_stream()

    def _stream(self, kind: str, text: str) -> None:
        if self._open != kind:
            self._end_stream()
        self._open = kind
        if kind == "text" and self.markdown is not None:
            self.markdown.write(text)
        elif kind == "text":
            self.out.write(text)
            self.out.flush()
        elif self.console is not None:
            self.console.print(Text(text, style="dim italic"), end="")
        else:
            self.err.write(text)

    def _end_stream(self) -> None:
        if self._open == "text" and self.markdown is not None:
            self.markdown.close()
        elif self._open == "text":
            self.out.write("\n")
            self.out.flush()
        elif self._open == "reasoning":
            self.err.write("\n")
        self._open = None

    def _status(self, line: str, style: str) -> None:
        self._end_stream()
        if self.console is not None:
            self.console.print(Text(line, style=style))
        else:
            self.err.write(line + "\n")
            self.err.flush()


def _clip(text: str, limit: int) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tool_line(event: ToolFinished) -> tuple[str, str]:
    mark, style = _STATUS_MARK[event.status]
    line = f"  {mark} {event.name} {seconds(event.duration)}" + (f" ({event.reused})" if event.reused else "")
    if event.status != "ok":
        line += f" · {_clip(event.result, 160)}"
    return line, style


@dataclass
class RunOptions:
    """`prompts` are consecutive turns; a `Slash` among them switches provider, model or tier before the next.

    With `resume`, the prompts continue that saved session, appending to its log.
    """

    prompts: list[str | Slash]
    provider: str | None = None
    model: str | None = None
    base_url: str | None = None
    tier: str | None = None
    system: str | None = None
    mcp: list[str] = field(default_factory=list)
    json_lines: bool = False
    max_steps: int | None = None
    workspace: Path = field(default_factory=Path.cwd)
    resume: Path | None = None


def fan_out(*sinks: Callable[[AgentEvent], None]) -> Callable[[AgentEvent], None]:
    def emit(event: AgentEvent) -> None:
        for sink in sinks:
            sink(event)

    return emit


async def run(options: RunOptions) -> int:
    """Run the prompts as consecutive turns; 0 if every turn ended normally, else 1."""
    from hotloop.agent.prompt import system_prompt
    from hotloop.resumption import Resumption
    from hotloop.routing import Router
    from hotloop.runtime import Runtime

    config, choice = load_config().pointed_at(Choice(options.provider, options.model, options.base_url, options.tier))
    resumed = Resumption.load(options.resume) if options.resume else None
    target, notes = resumed.target(config, choice) if resumed else (resolve(config, choice), [])
    check_switches(config, target.settings.name, options.prompts)
    workspace, moved = resumed.workspace(options.workspace) if resumed else (options.workspace, [])
    system = resumed.session.header.system if resumed and resumed.session.header.system else system_prompt(options.system)
    runtime = Runtime(config)
    try:
        provider = await runtime.connect(target)
        # Startup built a large heap of module objects that never die; keep the collector off them.
        gc.collect()
        gc.freeze()
        printer = Printer(json_lines=options.json_lines)
        log = (runtime.reopen_session_log(resumed.path, resumed.session) if resumed
               else runtime.open_session_log(provider, workspace, system))
        with log:
            emit = fan_out(printer, log.write)
            opening = resumed.opening_events(notes + moved) if resumed else []
            for event in [*(Notice(level="warning", message=w) for w in config.warnings), *opening]:
                emit(event)
            await runtime.start_mcp(options.mcp, emit)
            router = Router(config, runtime, auto=choice.tier == AUTO_TIER)
            agent = router.new_agent(provider, emit=emit, workspace=workspace, system=system, cache_key=log.id,
                                     max_steps=options.max_steps)
            if resumed:
                agent.restore(resumed.conversation.messages, resumed.conversation.turns, resumed.conversation.warmth)
            await runtime.learn_from_past(agent, workspace)
            failed = await _run_prompts(agent, runtime, router, options.prompts)
            await router.settle(SIDE_JOB_GRACE)
        if log.error is not None:
            printer(Notice(level="warning", message=f"the session log stopped at {log.path}: {log.error.strerror}"))
        return 1 if failed else 0
    finally:
        await runtime.aclose()


async def _run_prompts(agent: Agent, runtime: Runtime, router: Router, prompts: list[str | Slash]) -> bool:
    """Run the turns and switches in order; True if a turn failed (the rest would only fail again)."""
    for prompt in prompts:
        if isinstance(prompt, Slash):
            choice = prompt.choice(agent.provider.name)
            await runtime.switch(agent, choice)
            router.chose(choice)
        elif (await router.turn(agent, prompt)).reason == "error":
            return True
    return False


def check_switches(config: Config, provider: str, prompts: list[str | Slash]) -> None:
    """Fail before the first turn if a switch among the prompts names a provider, model or tier that can't be used."""
    for prompt in prompts:
        if isinstance(prompt, Slash):
            provider = resolve(config, prompt.choice(provider)).settings.name
