"""Prefix-stable requests.

A provider's prefix cache hits only on identical bytes in identical order, so a request is
built static part first: the system prompt, then the tool schemas sorted by name with
canonical key order. History only grows, and each message keeps the form it was sent in.
Volatile facts (the date, the workspace) go into the user message of the turn they belong
to, never into the static part. The project's instructions (AGENTS.md) end the system prompt.
"""

from __future__ import annotations

from datetime import date
from pathlib import Path

from hotloop.agent.instructions import Instructions
from hotloop.agent.tools.registry import ToolRegistry
from hotloop.providers.conversation import ChatRequest, Message

BASE_SYSTEM_PROMPT = """\
You are hotloop's agent, working in the user's workspace through the tools you are given.
- Call tools to look things up instead of guessing. Calls you make in one message run in parallel,
  so ask for everything independent at once.
- Paths are relative to the workspace root.
- Answer in Markdown. Be direct and brief."""


def system_prompt(extra: str | None = None, instructions: Instructions | None = None) -> str:
    """The static system prompt: hotloop's own, the user's (`--system FILE`) if any, then the project's instructions.

    The instructions come last: they are the part that may change between turns (`agent/instructions.py`).
    """
    base = f"{BASE_SYSTEM_PROMPT}\n\n{extra.strip()}" if extra and extra.strip() else BASE_SYSTEM_PROMPT
    return base + instructions.section if instructions is not None else base


def volatile_context(workspace: Path, today: date | None = None) -> str:
    """Facts that change between sessions, appended to the newest user message only."""
    today = today or date.today()
    return f"\n\n<context>\ndate: {today.isoformat()}\nworkspace: {workspace}\n</context>"


class PromptBuilder:
    def __init__(self, system: str, tools: ToolRegistry) -> None:
        self.system = system
        self.tools = tools

    def request(
        self, messages: list[Message], max_tokens: int | None = None, cache_key: str | None = None
    ) -> ChatRequest:
        return ChatRequest(
            system=self.system,
            tools=self.tools.specs(),
            messages=tuple(messages),
            max_tokens=max_tokens,
            cache_key=cache_key,
        )
