"""msgspec's validation errors in a Struct's own words: the setting's dotted name, and its problem.

msgspec says what broke in text ("Expected `int`, got `str` - at `$.latency.memo_ttl`"). That
text is read back against the Struct and the data given, so the error names the setting as the
user wrote it (`tools.probe`, `hooks[0].event`) and says what is wrong in the words its type
declares: a limit annotated `Meta(ge=0, extra={"problem": "must be 0 or more"})` breaks as
"… must be 0 or more". tests/test_struct_errors.py pins the msgspec wording this reads. Like
`paths.py`, this imports nothing of hotloop, so any layer may explain its own Structs.
"""

from __future__ import annotations

import re
import types
from collections.abc import Collection
from dataclasses import dataclass
from typing import Annotated, Any, Literal, NamedTuple, Union, get_args, get_origin

import msgspec
from msgspec import Meta, Struct, structs

# "Expected `int`, got `str` - at `$.latency.memo_ttl`"; no "at" when the whole value is wrong.
_ERROR = re.compile(r"(?P<message>.*?)(?: - at `\$(?P<at>.*)`)?", re.DOTALL)
_STEP = re.compile(r"\.([^.\[]+)|\[([^\]]*)\]")  # .field, [index], or [...] for a dict's value
_KEY_ERROR = re.compile(r"Object (?P<kind>contains unknown|missing required) field `(?P<key>[^`]*)`")
_TYPE_ERROR = re.compile(r"Expected `(?P<expected>[^`| ]+)[^`]*`, got `")
_TYPE_WORDS = {
    "str": "a string",
    "int": "a whole number",
    "float": "a number",
    "bool": "true or false",
    "array": "a list",
    "object": "a table",
}
_SEQUENCES = (list, tuple, set, frozenset)


class Breach(NamedTuple):
    """A setting's dotted name ("" for the whole of what was given) and what is wrong with it."""

    setting: str
    problem: str

    def __str__(self) -> str:
        return f"{self.setting or 'it'} {self.problem}"


def explained(
    error: msgspec.ValidationError, given: Any, kind: type[Struct], where: str = "", *, filled_in: Collection[str] = ()
) -> Breach:
    """`error`, from converting `given` to `kind`, in `kind`'s words; `where` names `given` (`providers.x`).

    `filled_in` names the fields the program sets, never the user: an unknown key's error doesn't offer them.
    """
    found = _ERROR.fullmatch(str(error))
    assert found is not None  # the pattern matches any text
    spot = _spot(kind, given, found["at"] or "", where)
    message = found["message"]
    if key_error := _KEY_ERROR.fullmatch(message):
        setting = _dotted(spot.setting, key_error["key"])
        if key_error["kind"] == "missing required":
            return Breach(setting, "is required")
        return Breach(setting, f"is not a setting (known: {', '.join(known_keys(spot.table, filled_in))})")
    if not spot.within:
        choices = next((get_args(part) for part in spot.parts if get_origin(part) is Literal), None)
        if message.startswith("Invalid enum value") and choices:
            return Breach(spot.setting, f"must be one of {', '.join(map(str, choices))} (got {spot.value!r})")
        if type_error := _TYPE_ERROR.match(message):
            expected = _TYPE_WORDS.get(type_error["expected"], type_error["expected"])
            return Breach(spot.setting, f"must be {expected} (got {spot.value!r})")
    # A limit broken, or something wrong within the setting: the setting's own words for it.
    return Breach(spot.setting, _problem(spot.parts) or f"is invalid ({message})")


def known_keys(kind: type[Struct], filled_in: Collection[str] = ()) -> tuple[str, ...]:
    """The keys a table for `kind` may hold."""
    return tuple(f.encode_name for f in structs.fields(kind) if f.name not in filled_in)


@dataclass
class _Spot:
    """The setting a msgspec error points at."""

    setting: str  # its dotted name
    table: type[Struct]  # the Struct it is or belongs to
    parts: list[Any]  # its declared type, unwrapped: types, Literals and Meta
    value: Any  # what was given for it
    # The error is somewhere within it: in an element its own words cover, or past what can be followed.
    within: bool = False

    def into_field(self, name: str) -> None:
        table = next((part for part in self.parts if _is_struct(part)), None)
        declared = next((f for f in structs.fields(table) if f.encode_name == name), None) if table else None
        if declared is None:
            self.within = True
            return
        self.setting = _dotted(self.setting, name)
        self.parts = _unwrapped(declared.type)
        self.value = self.value.get(name) if isinstance(self.value, dict) else None

    def into_element(self, index: str) -> None:
        """An element of a list, or a dict's value (msgspec writes `[...]`: the first that doesn't convert)."""
        declared = next((p for p in self.parts if get_origin(p) in (*_SEQUENCES, dict)), None)
        if _problem(self.parts) or declared is None:
            self.within = True
            return
        args = get_args(declared)
        if get_origin(declared) is dict:
            key = _first_breaking(self.value, args[1])
            if key is None:
                self.within = True
                return
            self.setting, self.parts, self.value = _dotted(self.setting, str(key)), _unwrapped(args[1]), self.value[key]
            return
        if not (isinstance(self.value, list | tuple) and index.isdigit() and int(index) < len(self.value)):
            self.within = True
            return
        n = int(index)
        element = args[n] if get_origin(declared) is tuple and args[-1] is not Ellipsis else args[0]
        self.setting, self.parts, self.value = f"{self.setting}[{n}]", _unwrapped(element), self.value[n]


def _spot(kind: type[Struct], given: Any, at: str, where: str) -> _Spot:
    """Follows msgspec's path (`.sim.ttft_ms`, `.models[1]`, `.tools[...]`) through the Struct and the given values."""
    spot = _Spot(where, kind, [kind], given)
    for name, index in _STEP.findall(at):
        if spot.within:
            break
        if name:
            spot.into_field(name)
        else:
            spot.into_element(index)
        spot.table = next((part for part in spot.parts if _is_struct(part)), spot.table)
    return spot


def _first_breaking(table: Any, declared: Any) -> Any:
    """The first key of `table` whose value msgspec won't convert to `declared` (None if none)."""
    if isinstance(table, dict):
        for key, value in table.items():
            try:
                msgspec.convert(value, declared)
            except msgspec.ValidationError:
                return key
    return None


def _problem(parts: list[Any]) -> str | None:
    """The words the declared type gives for breaking it (`Meta(extra={"problem": ...})`), if any."""
    problems = (m.extra.get("problem") for m in parts if isinstance(m, Meta) and m.extra)
    return next((str(problem) for problem in problems if problem is not None), None)


def _unwrapped(declared: Any) -> list[Any]:
    """A field's type as a flat list: `Annotated[int, Meta(ge=1)] | None` is [int, Meta(ge=1), None]."""
    if get_origin(declared) is Annotated:
        base, *metadata = get_args(declared)
        return [*_unwrapped(base), *metadata]
    if get_origin(declared) in (Union, types.UnionType):
        return [part for option in get_args(declared) for part in _unwrapped(option)]
    return [declared]


def _is_struct(declared: Any) -> bool:
    return isinstance(declared, type) and issubclass(declared, Struct)


def _dotted(setting: str, name: str) -> str:
    return f"{setting}.{name}" if setting else name
