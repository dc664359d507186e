"""The `grader` command line: parses arguments and hands each subcommand to its module."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="grader",
        description="Check your distributed-training exercises, get hints, and take quizzes.",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    from grader.quiz import cli as quiz_cli

    quiz_cli.register(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args))
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
