"""The engine CLI's subcommand API (docs/engine.md "Targets"): what a module that adds a
subcommand to ``python -m agentperf.engine`` needs, apart from the CLI's main module
(agentperf/engine/cli.py), which imports those modules.

A command module gets the subparsers (`Subcommands`), adds its parser and sets
``set_defaults(func=...)``; a failure the user should read raises `CliError` (one line,
exit status 2). Packages above the engine register their `AddCommand` under the
``agentperf.engine_commands`` entry points in pyproject.toml (`COMMANDS_GROUP`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeAlias

COMMANDS_GROUP = "agentperf.engine_commands"
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"
# An entry point of COMMANDS_GROUP adds its subcommand, whose set_defaults(func=) runs it.
AddCommand: TypeAlias = Callable[[Subcommands], None]


class CliError(Exception):
    """A user-facing failure: printed as one line, exit status 2."""
