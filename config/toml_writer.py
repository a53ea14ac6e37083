"""A config written back out as TOML (`hotloop config`): text that loads back to the same text.

Generic over msgspec Structs, it imports nothing of hotloop; `Config.to_toml` says what goes in.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from pathlib import Path
from typing import Any

from msgspec import Struct, structs


def masked(secret: str) -> str:
    """A secret as shown: its last 4 characters only if it has 12 or more.

    A value already masked stays as it is, so a shown config saved and shown again reads the same.
    """
    if secret.startswith("••••"):
        return secret
    return f"••••{secret[-4:]}" if len(secret) >= 12 else "••••"


def as_table(struct: Struct, left_out: Collection[str]) -> dict[str, Any]:
    """A Struct's settings as the file holds them: nested Structs as tables, None where a setting is unset.

    `left_out` names the fields, at any depth, that are the program's and never the file's.
    """
    return {
        f.encode_name: _as_value(getattr(struct, f.name), left_out)
        for f in structs.fields(struct)
        if f.name not in left_out
    }


def _as_value(value: Any, left_out: Collection[str]) -> Any:
    if isinstance(value, Struct):
        return as_table(value, left_out)
    if isinstance(value, dict):
        return {key: _as_value(item, left_out) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_as_value(item, left_out) for item in value]
    return str(value) if isinstance(value, Path) else value


def toml_text(table: dict[str, Any], notes: dict[tuple[str, ...], str]) -> str:
    """`table` as a TOML file, `notes` as comments after the keys and [headers] they name."""
    return "\n".join(_toml_lines(table, notes)) + "\n"


def _toml_lines(table: dict[str, Any], notes: dict[tuple[str, ...], str], at: tuple[str, ...] = ()) -> list[str]:
    """`table` in TOML: its values under its [header], then its subtables; an unset (None) value is left out."""
    values = {key: value for key, value in table.items() if value is not None and not isinstance(value, dict)}
    lines = [
        f"{_toml_key(key)} = {_toml_value(value)}{_comment(notes.get((*at, key)))}" for key, value in values.items()
    ]
    if at and values:
        lines = ["", f"[{'.'.join(map(_toml_key, at))}]{_comment(notes.get(at))}", *lines]
    for key, value in table.items():
        if isinstance(value, dict):
            lines += _toml_lines(value, notes, (*at, key))
    return lines


def _toml_key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _toml_value(key)


def _toml_value(value: str | bool | int | float | list[Any] | dict[str, Any]) -> str:
    if isinstance(value, dict):  # a table in a list: `[[hooks]]` entries, written inline
        items = (f"{_toml_key(key)} = {_toml_value(item)}" for key, item in value.items() if item is not None)
        return "{ " + ", ".join(items) + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, list):
        return "[" + ", ".join(map(_toml_value, value)) + "]"
    # A JSON string is a TOML basic string, but for DEL, which TOML wants escaped too.
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def _comment(note: str | None) -> str:
    return f"  # {note}" if note else ""
