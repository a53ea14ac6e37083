"""A request by segment, as short digests: what a step records so a later cache miss can be explained.

Its own module so the event vocabulary (`events.py`) can carry it without loading the analysis that
makes and compares fingerprints (`cache_explainer.py`, which reaches into the providers).
"""

from __future__ import annotations

import msgspec


class Fingerprint(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """A request by segment, as short digests: enough to tell which part changed between two steps."""

    provider: str
    model: str
    system: str  # the system prompt up to the project instructions
    tools: dict[str, str] = {}
    messages: int = 0
    history: str = ""  # one digest over every message's digest, in order
    instructions: str = ""  # the project instructions ending the system prompt, if any
