"""Every command of the simulator and engine CLIs prints its help (argparse expands each
help string with %-formatting, so a bare % broke `python -m agentperf.simulator --help`)."""

from __future__ import annotations

import argparse

import pytest

from agentperf.engine.cli import build_parser
from agentperf.simulator.__main__ import _parser


def _commands(parser: argparse.ArgumentParser) -> list[argparse.ArgumentParser]:
    found = [parser]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found += _commands(sub)
    return found


@pytest.mark.parametrize("parser", [_parser(), build_parser()], ids=["simulator", "engine"])
def test_every_command_prints_its_help(parser: argparse.ArgumentParser) -> None:
    for command in _commands(parser):
        assert command.format_help().startswith("usage: ")
