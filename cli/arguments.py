"""What every command's arguments share: `UsageError`, and the checked types argparse converts with."""

from __future__ import annotations

import argparse

from hotloop import InputError

LATEST = "the session last used in this folder, else the latest anywhere"


class UsageError(InputError):
    """Bad command-line input; the message is shown as one line."""


class OptionalCommand(argparse.HelpFormatter):
    """A usage line that shows the command as optional, `[COMMAND ...]`, where none is a command of its own."""

    def _format_args(self, action: argparse.Action, default_metavar: str) -> str:
        text = super()._format_args(action, default_metavar)
        return f"[{text}]" if action.nargs == argparse.PARSER else text


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


def non_negative(text: str) -> float:
    value = float(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must not be negative")
    return value
