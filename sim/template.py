"""The simulator's chat template: a Qwen/Hermes-style ChatML rendering of a conversation.

A prompt is a list of segments, each tokenized on its own (segment boundaries stand for
the special tokens that real tokenizers never merge across). Tool schemas are rendered
exactly as the client sent them, so a client that reorders keys or tools between steps
gets the cache miss it would get from a provider that hashes request bytes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from hotloop.sim.tokenizer import encode

TOOLS_PREAMBLE = (
    "\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>"
)
TOOLS_EPILOGUE = (
    "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
    'within <tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, '
    '"arguments": <args-json-object>}\n</tool_call>'
)
ASSISTANT_HEADER = "<|im_start|>assistant\n"
END = "<|im_end|>\n"


@dataclass(frozen=True)
class Call:
    id: str
    name: str
    arguments: str


def joined_text(content: Any) -> str | None:
    """Message content as text: a string, or text parts joined, as both APIs accept; None for anything else."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list) and all(isinstance(p, dict) and p.get("type") == "text" for p in content):
        return "".join(str(p.get("text", "")) for p in content)
    return None


@dataclass(frozen=True)
class Turn:
    """One message, in the protocol-neutral form every wire API is parsed into."""

    role: str  # system | user | assistant | tool
    text: str = ""
    calls: tuple[Call, ...] = ()
    call_id: str = ""
    reasoning: str = ""  # an assistant's, rendered back only where the client returned it (Responses)


@dataclass
class Prompt:
    segments: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)

    def add(self, text: str) -> None:
        self.segments.append(text)
        self.tokens.extend(encode(text))


def call_text(name: str, arguments: str) -> str:
    return f'\n<tool_call>\n{{"name": {json.dumps(name)}, "arguments": {arguments or "{}"}}}\n</tool_call>'


def assistant_body(text: str, calls: tuple[Call, ...] | list[Call], reasoning: str = "") -> str:
    """What the model generates for a message, and what the template renders back for it."""
    body = text + "".join(call_text(call.name, call.arguments) for call in calls)
    return f"<think>\n{reasoning}\n</think>\n\n{body}" if reasoning else body


def render(turns: list[Turn], tools: list[dict[str, Any]]) -> Prompt:
    """The prompt for `turns`, ending with the generation prompt."""
    prompt = Prompt()
    rest = turns
    if tools:
        system = ""
        if turns and turns[0].role == "system":
            system, rest = turns[0].text + "\n\n", turns[1:]
        prompt.add(f"<|im_start|>system\n{system.rstrip()}{TOOLS_PREAMBLE}")
        for tool in tools:
            prompt.add("\n" + json.dumps(tool, ensure_ascii=False))
        prompt.add(TOOLS_EPILOGUE + END)
    for turn in rest:
        _render_turn(prompt, turn)
    prompt.add(ASSISTANT_HEADER)
    return prompt


def _render_turn(prompt: Prompt, turn: Turn) -> None:
    if turn.role == "assistant":
        prompt.add(ASSISTANT_HEADER)
        prompt.add(assistant_body(turn.text, turn.calls, turn.reasoning))
        prompt.add(END)
    elif turn.role == "tool":
        prompt.add(f"<|im_start|>user\n<tool_response>\n{turn.text}\n</tool_response>{END}")
    else:
        prompt.add(f"<|im_start|>{turn.role}\n{turn.text}{END}")
