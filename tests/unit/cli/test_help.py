"""Every command's ``--help`` ends with examples, and every example parses with that command's
own parser (a renamed flag breaks the example, and this test); one name per concept."""

from __future__ import annotations

import argparse
import importlib
import shlex

import pytest

from diag.cli.main import COMMANDS, EXAMPLES, build_parser
from tests.fakes.cli import run_cli


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_help_has_examples(command: str) -> None:
    res = run_cli(command, "--help")
    assert res.returncode == 0, res.stderr
    assert "\nexamples:\n" in res.stdout
    examples = res.stdout.split("\nexamples:\n", 1)[1]
    assert f"diag {command}" in examples


def _parser(command: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    importlib.import_module(COMMANDS[command]).configure(sub.choices[command])
    return parser


@pytest.mark.parametrize("command", sorted(EXAMPLES))
def test_every_example_parses(command: str) -> None:
    parser = _parser(command)
    for line in EXAMPLES[command]:
        if not line.startswith("diag "):
            continue  # under torchrun
        argv = shlex.split(line.split("  #", 1)[0].split(" | ", 1)[0])[1:]
        args, extra = parser.parse_known_args(argv)
        assert not extra, (line, extra)
        assert args.diag_command == command


def test_one_name_per_concept() -> None:
    """A run directory is RUN_DIR everywhere; ``--out`` is always one; ``--steps`` a count."""
    for command in sorted(COMMANDS):
        text = run_cli(command, "--help").stdout
        for flag in ("--out", "--run-dir"):
            if f"{flag} " in text:
                assert f"{flag} RUN_DIR" in text, (command, flag)
        if "--steps " in text:
            assert "--steps N" in text, command
    trace = run_cli("trace", "--help").stdout
    assert "--output FILE" in trace and "--step-range A:B" in trace
    demo = run_cli("demo", "--help").stdout
    assert "--onset STEP" in demo  # as in diag faults run


def test_old_names_still_work() -> None:
    args, _ = _parser("trace").parse_known_args(["trace", "x", "--out", "f.json", "--steps", "1:"])
    assert (str(args.out), args.steps) == ("f.json", "1:")
    args, _ = _parser("demo").parse_known_args(["demo", "--slow-from", "7"])
    assert args.slow_from == 7
