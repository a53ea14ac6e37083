"""`Say`: how the main screen's parts tell the user something: one notification, its severity, how long it stays."""

from __future__ import annotations

from typing import Protocol

from textual.notifications import SeverityLevel


class Say(Protocol):
    def __call__(self, message: str, severity: SeverityLevel = "information", timeout: float | None = None) -> None: ...
