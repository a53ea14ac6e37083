"""`hotloop config path|show`: where the config file is, and what it says."""

from __future__ import annotations

import argparse
import sys


def add_config(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    config = commands.add_parser("config", help="where the config file is, and what it says")
    config_commands = config.add_subparsers(dest="config_command", metavar="COMMAND", required=True)
    config_commands.add_parser("path", help="print the config file's path")
    config_commands.add_parser("show", help="print the effective configuration (keys masked)")
    config.set_defaults(handler=_config)


def _config(args: argparse.Namespace) -> int:
    from hotloop import paths
    from hotloop.config import load_config

    if args.config_command == "path":
        print(paths.config_file())
        return 0
    config = load_config()
    print(f"# {config.path}{'' if config.loaded else ' (not found: defaults)'}")
    print(config.to_toml(), end="")
    for warning in config.warnings:
        print(f"hotloop: warning: {warning}", file=sys.stderr)
    return 0
