"""`grader quiz ...` subcommands (placeholder until the quiz issue lands)."""

from __future__ import annotations

import argparse


def register(commands: argparse._SubParsersAction) -> None:
    quiz = commands.add_parser("quiz", help="question banks and quiz sheets")
    quiz.set_defaults(func=lambda args: quiz.print_help() or 2)
