"""Text from outside (a model, a tool, a file name, a server, a log) made inert for a terminal.

Such text may carry escape sequences that clear the screen, retitle the window, hide a link
(OSC 8) or write the clipboard (OSC 52), and C1 controls that some terminals read as the same.
Before it reaches a terminal, every control character is drawn as a visible stand-in: C0
controls as their Unicode "control pictures" (ESC as ␛), DEL as ␡, C1 controls as `<9b>`.
Tabs and newlines are kept; a carriage return ending a line (`\\r\\n`) becomes `\\n`. The
session log keeps the exact text: this is for display only.
"""

from __future__ import annotations

import re

_CONTROL = re.compile(r"\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def _stand_in(match: re.Match[str]) -> str:
    char = match.group()
    if char == "\r\n":
        return "\n"
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ … ␟; ESC is ␛
    if code == 0x7F:
        return "␡"
    return f"<{code:02x}>"


def inert(text: str) -> str:
    """`text` with every control character but tab and newline made visible."""
    return _CONTROL.sub(_stand_in, text) if _CONTROL.search(text) else text
