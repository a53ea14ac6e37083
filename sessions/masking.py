"""Masking secret values before they reach a session log, even when they stream in pieces.

A model or a tool can stream a key a few characters at a time, so no single event holds it.
For each stream (the answer, the reasoning, a call's arguments, a tool's output) the masker
holds back the end of the text while it could be the start of a secret, and lets it go once
it can't, or masked once it is one. A held piece is written before the next event that is
not part of a stream, so nothing is lost and the order stays.

The secrets are the config's `secrets()`: the provider and MCP keys, and whatever
`secret_policy` calls secret in the environment (a secret-named variable's value, a URL's
password). A value is replaced wherever it occurs, so one too short or plain to tell from
ordinary text (a local server's "EMPTY" key, "true", "us") is not masked
(`secret_policy.maskable`): it would blank out every such word of the conversation. The
watch adds each key it sees a client send (`add`) and masks every field of the events it hands
on (`whole`), not only a stream's text, a burst of them at a time (`burst`). In a JSON line a
secret is looked for as written and as JSON escapes it (a password with a quote in it).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import cast

import msgspec

from hotloop.agent.events import AgentEvent, Notice, ToolOutput, decode, encode, encode_lines
from hotloop.providers.events import ReasoningDelta, TextDelta, ToolCallArgsDelta
from hotloop.secret_policy import maskable

MASK = "[redacted]"
_MASK = MASK.encode()
_encode = msgspec.json.encode
_Streamed = TextDelta | ReasoningDelta | ToolCallArgsDelta | ToolOutput
# Looked up by type, not `isinstance`: every event passes here, and an `isinstance` that fails on a struct class costs
# four times one that holds (none of these has a subclass).
_STREAMED = frozenset({TextDelta, ReasoningDelta, ToolCallArgsDelta, ToolOutput})
# Masked by the stream reading alone (a secret split across deltas too), not encoded whole again: their only field.
_TEXTS = frozenset({TextDelta, ReasoningDelta})


def _stream_of(event: _Streamed) -> tuple[str, str]:
    if isinstance(event, ToolCallArgsDelta):
        return "args", event.call_id
    if isinstance(event, ToolOutput):
        return "output", event.call_id
    return type(event).__name__, ""


def _text_of(event: _Streamed) -> str:
    return event.fragment if isinstance(event, ToolCallArgsDelta) else event.text


def _with_text(event: _Streamed, text: str) -> _Streamed:
    field = "fragment" if isinstance(event, ToolCallArgsDelta) else "text"
    return msgspec.structs.replace(event, **{field: text})


class Masker:
    """Turns the events to log into events without `secrets`."""

    def __init__(self, secrets: list[str]) -> None:
        self.secrets: list[str] = []
        self._encoded: list[bytes] = []
        self._held: dict[tuple[str, str], tuple[_Streamed, str]] = {}  # stream -> (its last event, text held)
        self.add(secrets)

    def add(self, secrets: Iterable[str]) -> bool:
        """Mask these too from now on (a key the watch sees a client send); whether any of them was new."""
        new = {secret for secret in secrets if maskable(secret)} - set(self.secrets)
        if not new:
            return False
        # Longest first: a URL goes whole before its password alone is looked for.
        self.secrets = sorted([*self.secrets, *new], key=len, reverse=True)
        # A secret with a quote, a backslash or a control character is escaped in a JSON line: both spellings go.
        spellings = ((secret.encode(), _encode(secret)[1:-1]) for secret in self.secrets)
        self._encoded = list(dict.fromkeys(spelling for pair in spellings for spelling in pair))
        return True

    def masked(self, line: bytes) -> bytes:
        """A whole encoded line without the secrets: for what no stream can split (a title, an error)."""
        for secret in self._encoded:
            if secret in line:
                line = line.replace(secret, _MASK)
        return line

    def whole(self, event: AgentEvent) -> AgentEvent:
        """`event` with the secrets masked in every field of it, not only a stream's text (`events`)."""
        if not self._encoded:
            return event
        line = encode(event)
        masked = self.masked(line)
        if masked is line:
            return event
        try:
            return decode(masked)
        except msgspec.MsgspecError:  # a secret that is also a number the event holds: the event can't be kept
            return Notice(level="warning", message=f"a {type(event).__name__} that held a secret was left out")

    def burst(self, events: list[AgentEvent]) -> list[AgentEvent]:
        """`events` without the secrets in any field: a stream's text masked as `events` masks it, every other event
        as `whole` masks it. A burst (a step's start, a received block, a step's end) rarely holds a secret: one
        encoding of all its events says whether it does, and only then is each event encoded on its own."""
        if not self.secrets:
            return events
        masked = self._streams(events)
        line = encode_lines([event for event in masked if type(event) not in _TEXTS])
        for secret in self._encoded:
            if secret in line:
                return [event if type(event) in _TEXTS else self.whole(event) for event in masked]
        return masked

    def events(self, event: AgentEvent) -> list[AgentEvent]:
        return self._streams([event]) if self.secrets else [event]

    def _streams(self, events: list[AgentEvent]) -> list[AgentEvent]:
        """`events` with each stream's text masked, and what a stream held written before the next event of no
        stream."""
        masked: list[AgentEvent] = []
        for event in events:
            if type(event) in _STREAMED:
                masked += self._streamed(cast(_Streamed, event))
            elif self._held:
                masked += [*self.release(), event]
            else:
                masked.append(event)
        return masked

    def release(self) -> list[AgentEvent]:
        """What is held back, now that its streams have ended."""
        if not self._held:
            return []
        released: list[AgentEvent] = [_with_text(last, text) for last, text in self._held.values() if text]
        self._held.clear()
        return released

    def _streamed(self, event: _Streamed) -> list[AgentEvent]:
        stream = _stream_of(event)
        _, held = self._held.get(stream, (event, ""))
        text = held + _text_of(event)
        for secret in self.secrets:
            text = text.replace(secret, MASK)
        keep = self._possible_start(text)
        self._held[stream] = (event, text[len(text) - keep :])
        return [_with_text(event, text[: len(text) - keep])]

    def _possible_start(self, text: str) -> int:
        """How many of the text's last characters could begin a secret."""
        longest = 0
        for secret in self.secrets:
            # Only where the secret's first character is, in its reach from the end: a find, not a test per length.
            start = max(len(text) - len(secret) + 1, 0)
            while (start := text.find(secret[0], start)) != -1 and len(text) - start > longest:
                if secret.startswith(text[start:]):
                    longest = len(text) - start
                    break
                start += 1
        return longest
