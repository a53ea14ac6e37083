"""Project instructions: the workspace's AGENTS.md (and CLAUDE.md), read into the system prompt.

Each file found at the workspace root becomes one section at the end of the system prompt,
`<project_instructions file="AGENTS.md">` … `</project_instructions>`, so the prompt is cached
with the tools and stays byte-identical while the files do. The end, because a file edited
between turns then costs the cache only what follows it. Files are opened like the tools open
them (`open_file`: no symlink out of the workspace, no FIFO), read up to MAX_BYTES, and decoded
with invalid UTF-8 replaced. A file that can't be read is left out with a warning.

The sections are also parsed back out of a system prompt (`split`): a resumed session's logged
prompt gets its instructions replaced by the current ones, and the cache-miss explainer names
the file whose section changed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from hotloop.agent.tools.workspace import WorkspaceError, open_file

FILES = ("AGENTS.md", "CLAUDE.md")  # in this order when both exist
MAX_BYTES = 64 * 1024  # per file
_OPEN = '\n\n<project_instructions file="'
_CLOSE = "\n</project_instructions>"


@dataclass(frozen=True)
class Instructions:
    """What the workspace's instruction files give the system prompt, and what went wrong reading them."""

    section: str = ""  # appended to the system prompt as is; "" when there are none
    files: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()


def read_instructions(workspace: Path) -> Instructions:
    """The instruction files at the root of `workspace`, as a system prompt section."""
    # Here, not at the top: the explainer and the prompt import this module at start-up, and the tools
    # module brings RE2 (~14 ms before the first paint).
    from hotloop.agent.tools.builtins import read_at_most

    sections, files, warnings = [], [], []
    for name in FILES:
        if not os.path.lexists(workspace / name):
            continue
        try:
            with open_file(workspace, name) as opened:
                data = read_at_most(opened.fd, MAX_BYTES + 1)  # one byte more shows the file was longer
        except WorkspaceError as error:
            warnings.append(f"{name} left out of the system prompt: {error}")
            continue
        except OSError as error:
            warnings.append(f"{name} left out of the system prompt: {error.strerror}")
            continue
        cut = len(data) > MAX_BYTES
        text = (_whole_characters(data[:MAX_BYTES]) if cut else data).decode("utf-8", errors="replace").strip()
        if cut:
            warnings.append(f"{name} is over {MAX_BYTES // 1024} KiB: only its first {MAX_BYTES // 1024} KiB are used")
            text += f"\n[{name} is cut here: it is longer than {MAX_BYTES // 1024} KiB]"
        if text:
            sections.append(f'{_OPEN}{name}">\n{text}{_CLOSE}')
            files.append(name)
    return Instructions("".join(sections), tuple(files), tuple(warnings))


def split(system: str) -> tuple[str, dict[str, str]]:
    """A system prompt as the part before its instruction sections, and each section by file name."""
    start = system.find(_OPEN)
    while start != -1:
        sections = _sections(system, start)
        if sections is not None:
            return system[:start], sections
        start = system.find(_OPEN, start + 1)
    return system, {}


def with_instructions(system: str, instructions: Instructions) -> str:
    """`system` with its instruction sections replaced by `instructions`'."""
    return split(system)[0] + instructions.section


def _sections(system: str, start: int) -> dict[str, str] | None:
    """The sections from `start` to the end of `system`, if they are exactly a run of sections; else None."""
    sections: dict[str, str] = {}
    while start < len(system):
        name_end = system.find('">\n', start + len(_OPEN)) if system.startswith(_OPEN, start) else -1
        if name_end == -1:
            return None
        name = system[start + len(_OPEN) : name_end]
        # A section ends at a closing line followed by the next section or the end of the prompt.
        end = system.find(_CLOSE, name_end)
        while end != -1 and not _at_boundary(system, end + len(_CLOSE)):
            end = system.find(_CLOSE, end + 1)
        if end == -1 or "\n" in name or '"' in name:
            return None
        sections[name] = system[start : end + len(_CLOSE)]
        start = end + len(_CLOSE)
    return sections


def _at_boundary(system: str, index: int) -> bool:
    return index == len(system) or system.startswith(_OPEN, index)


def _whole_characters(data: bytes) -> bytes:
    """`data` without the character the size cap cut in two, if it did: dropped rather than replaced."""
    for back in range(1, min(len(data), 3) + 1):
        byte = data[-back]
        if byte < 0x80:
            break
        if byte >= 0xC0:  # the lead byte of the last character: is all of it here?
            needed = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data[:-back] if back < needed else data
    return data
