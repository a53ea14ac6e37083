"""The msgspec error explainer, over msgspec's real messages: each case pins the text msgspec writes and what the
explainer makes of it, so an upgrade that rewords msgspec fails here, not in front of a user."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec
import pytest
from msgspec import Meta, Struct

from hotloop.struct_errors import Breach, explained, known_keys


class Timeout(Struct, frozen=True, forbid_unknown_fields=True):
    idle: Annotated[float, Meta(gt=0, extra={"problem": "must be positive"})] = 60.0


class Hook(Struct, frozen=True, forbid_unknown_fields=True):
    event: Literal["Start", "Stop"]
    command: str

    def __post_init__(self) -> None:
        if self.command == "rm -rf /":
            raise ValueError("that command is never run")


class Settings(Struct, frozen=True, forbid_unknown_fields=True):
    name: str  # filled in by the program, as the config does with a table's key
    kind: Literal["fast", "slow"]
    steps: Annotated[int, Meta(ge=1, extra={"problem": "must be at least 1"})] = 1
    budget: Annotated[int, Meta(le=100)] = 10  # a limit without words of its own
    ratio: float | None = None
    timeout: Timeout = Timeout()
    tags: tuple[Annotated[str, Meta(min_length=1, extra={"problem": "must not be empty"})], ...] = ()
    models: Annotated[tuple[str, ...], Meta(extra={"problem": "must be a list of model names"})] = ()
    tools: dict[str, float] = {}
    env: Annotated[dict[str, str], Meta(extra={"problem": "must be a table of strings"})] = {}
    hooks: tuple[Hook, ...] = ()


def error_for(given: Any) -> msgspec.ValidationError:
    with pytest.raises(msgspec.ValidationError) as caught:
        msgspec.convert(given, Settings)
    return caught.value


GOOD = {"name": "x", "kind": "fast"}
KNOWN = "kind, steps, budget, ratio, timeout, tags, models, tools, env, hooks"


@pytest.mark.parametrize(
    ("given", "message", "breach"),
    [
        # unknown and missing fields, at the top and in a nested table
        (
            {**GOOD, "colour": 1},
            "Object contains unknown field `colour`",
            ("colour", f"is not a setting (known: {KNOWN})"),
        ),
        (
            {**GOOD, "timeout": {"busy": 1}},
            "Object contains unknown field `busy` - at `$.timeout`",
            ("timeout.busy", "is not a setting (known: idle)"),
        ),
        ({"name": "x"}, "Object missing required field `kind`", ("kind", "is required")),
        # the wrong type: for the whole, a setting, a nested one, an optional one
        (3, "Expected `object`, got `int`", ("", "must be a table (got 3)")),
        (
            {**GOOD, "steps": "2"},
            "Expected `int`, got `str` - at `$.steps`",
            ("steps", "must be a whole number (got '2')"),
        ),
        (
            {**GOOD, "steps": True},
            "Expected `int`, got `bool` - at `$.steps`",
            ("steps", "must be a whole number (got True)"),
        ),
        (
            {**GOOD, "timeout": {"idle": "soon"}},
            "Expected `float`, got `str` - at `$.timeout.idle`",
            ("timeout.idle", "must be a number (got 'soon')"),
        ),
        (
            {**GOOD, "timeout": 5},
            "Expected `object`, got `int` - at `$.timeout`",
            ("timeout", "must be a table (got 5)"),
        ),
        (
            {**GOOD, "ratio": "half"},
            "Expected `float | null`, got `str` - at `$.ratio`",
            ("ratio", "must be a number (got 'half')"),
        ),
        ({**GOOD, "tags": "a"}, "Expected `array`, got `str` - at `$.tags`", ("tags", "must be a list (got 'a')")),
        # an enum
        (
            {"name": "x", "kind": "warp"},
            "Invalid enum value 'warp' - at `$.kind`",
            ("kind", "must be one of fast, slow (got 'warp')"),
        ),
        # a limit, with words of its own and without
        ({**GOOD, "steps": 0}, "Expected `int` >= 1 - at `$.steps`", ("steps", "must be at least 1")),
        (
            {**GOOD, "budget": 101},
            "Expected `int` <= 100 - at `$.budget`",
            ("budget", "is invalid (Expected `int` <= 100)"),
        ),
        (
            {**GOOD, "timeout": {"idle": 0}},
            "Expected `float` > 0.0 - at `$.timeout.idle`",
            ("timeout.idle", "must be positive"),
        ),
        # in a list: the element by its index, in its own words
        (
            {**GOOD, "tags": ["a", 3]},
            "Expected `str`, got `int` - at `$.tags[1]`",
            ("tags[1]", "must be a string (got 3)"),
        ),
        (
            {**GOOD, "tags": ["a", ""]},
            "Expected `str` of length >= 1 - at `$.tags[1]`",
            ("tags[1]", "must not be empty"),
        ),
        # in a dict's value: msgspec writes [...], the explainer finds the key
        (
            {**GOOD, "tools": {"search": 0.3, "probe": "fast"}},
            "Expected `float`, got `str` - at `$.tools[...]`",
            ("tools.probe", "must be a number (got 'fast')"),
        ),
        # a list or a table whose own words cover its elements
        (
            {**GOOD, "models": ["a", 3]},
            "Expected `str`, got `int` - at `$.models[1]`",
            ("models", "must be a list of model names"),
        ),
        (
            {**GOOD, "env": {"A": 1}},
            "Expected `str`, got `int` - at `$.env[...]`",
            ("env", "must be a table of strings"),
        ),
        # a list of tables: the table by its index, then its setting
        (
            {**GOOD, "hooks": [{"event": "Start", "command": "a"}, {"event": "Never", "command": "b"}]},
            "Invalid enum value 'Never' - at `$.hooks[1].event`",
            ("hooks[1].event", "must be one of Start, Stop (got 'Never')"),
        ),
        (
            {**GOOD, "hooks": [{"event": "Start", "command": "a", "shell": "sh"}]},
            "Object contains unknown field `shell` - at `$.hooks[0]`",
            ("hooks[0].shell", "is not a setting (known: event, command)"),
        ),
        (
            {**GOOD, "hooks": [{"event": "Start"}]},
            "Object missing required field `command` - at `$.hooks[0]`",
            ("hooks[0].command", "is required"),
        ),
        # a Struct's own check (__post_init__), which msgspec reports where the Struct is
        (
            {**GOOD, "hooks": [{"event": "Start", "command": "rm -rf /"}]},
            "that command is never run - at `$.hooks[0]`",
            ("hooks[0]", "is invalid (that command is never run)"),
        ),
    ],
)
def test_msgspec_messages_in_the_structs_own_words(given: Any, message: str, breach: tuple[str, str]) -> None:
    error = error_for(given)
    assert str(error) == message  # msgspec's wording, which the explainer reads
    assert explained(error, given, Settings, filled_in={"name"}) == breach


def test_the_known_keys_leave_out_what_the_program_fills_in() -> None:
    assert ", ".join(known_keys(Settings, {"name"})) == KNOWN
    assert known_keys(Settings)[0] == "name"


def test_where_names_the_given_table_and_a_breach_reads_as_a_sentence() -> None:
    given = {**GOOD, "steps": 0}
    assert explained(error_for(given), given, Settings, "profiles.main") == (
        "profiles.main.steps",
        "must be at least 1",
    )
    assert str(Breach("steps", "must be at least 1")) == "steps must be at least 1"
    assert str(explained(error_for(3), 3, Settings)) == "it must be a table (got 3)"
