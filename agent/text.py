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


# Characters a terminal draws as nothing: bidi overrides (which can reorder a command's text), zero-width ones.
_INVISIBLE = re.compile(r"[\u00ad\u061c\u180e\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb]")
_SPACES = re.compile(r" {4,}| +$")
EMPTY_RUN = 3  # empty lines in a row shown as one line that counts them
# The stand-ins `spelled_out` writes, for a screen to mark them as not being the text's own.
SPELLED = re.compile(r"␠×[\d,]+|␠+|⇥|↵|⟨U\+[0-9A-F]{4,6}⟩|⋮ [\d,]+ empty lines|[\u2400-\u2421]|<[0-9a-f]{2}>")


def spelled_out(text: str) -> list[str]:
    """`text` as lines in which nothing is hidden, for a question the user must be able to read whole.

    Control characters are stand-ins (as `inert` draws them, a carriage return as ␍ too), a tab is ⇥,
    a run of 4 or more spaces is `␠×N` and spaces ending a line are ␠, invisible characters (bidi
    overrides, zero-width ones) are `⟨U+202E⟩`, every line but the last ends in ↵, and a run of
    EMPTY_RUN or more empty lines is one line that counts them: padding can't push text out of view.
    """
    lines: list[str] = []
    empty = 0
    raw = text.split("\n")
    for n, line in enumerate(raw):
        shown = _INVISIBLE.sub(lambda m: f"⟨U+{ord(m.group()):04X}⟩", line.replace("\t", "⇥"))
        shown = _CONTROL.sub(_stand_in, shown.replace("\r", "␍"))
        shown = _SPACES.sub(lambda m: f"␠×{len(m.group())}" if len(m.group()) >= 4 else "␠" * len(m.group()), shown)
        end = "↵" if n < len(raw) - 1 else ""
        if not shown and not end:
            break
        if not shown:
            empty += 1
            continue
        if empty:
            lines += [f"⋮ {empty:,} empty lines"] if empty >= EMPTY_RUN else ["↵"] * empty
            empty = 0
        lines.append(shown + end)
    if empty:
        lines += [f"⋮ {empty:,} empty lines"] if empty >= EMPTY_RUN else ["↵"] * empty
    return lines


def visible(text: str) -> str:
    """`text` spelled out (`spelled_out`) on one line: for a name, a path or a rule in a question."""
    return " ".join(spelled_out(text))
