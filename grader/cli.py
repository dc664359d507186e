"""The `grader` command line: parses arguments and hands each subcommand to its module.

A student's command (`check`, `list`, ...) is parsed without the instructor's and the quiz authoring commands,
so it never imports them (jinja2, the sandbox, the course lint, quiz rendering); any other command line,
`grader --help` included, gets the whole parser. A student copy (`grader release`) holds no instructor code:
there every command line gets the student's parser, and an instructor's command is refused in one sentence."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from grader import commands, doctor
from grader.engine.platforms import LauncherError
from grader.judge.api import DEFAULT_DEADLINE_S
from grader.paths import NOTEBOOKS, CourseNotFound, ships
from grader.report.inert import printable


def _add_grading_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--world-size", type=int, metavar="N", help="run every check with N ranks (default: 2 and 4)")
    parser.add_argument(
        "--backend", choices=("gloo", "nccl"), default="gloo", help="gloo (CPU, default) or nccl (one GPU per rank)"
    )
    parser.add_argument(
        "--deadline",
        type=float,
        default=DEFAULT_DEADLINE_S,
        metavar="S",
        help=f"seconds a check may run before its ranks are stopped (default {DEFAULT_DEADLINE_S:g})",
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="show full details of every check")


def _add_cluster_options(parser: argparse.ArgumentParser, nodes_help: str) -> None:
    parser.add_argument("--nnodes", type=int, default=1, metavar="N", help=nodes_help)
    parser.add_argument("--rdzv-endpoint", metavar="HOST:PORT", help="node 0's address for torchrun's rendezvous")
    parser.add_argument("--shared-dir", metavar="DIR", help="a folder every node sees (runs are announced there)")


# parsed without the instructor's commands, in the course as in a student copy
STUDENT_COMMANDS = ("list", "check", "hint", "watch", "reset", "node", "doctor", "notebook")
# a student copy's grader has no instructor code: these are refused there with a sentence, not a usage error
INSTRUCTOR_COMMANDS = (
    "grade",
    "gradebook",
    "regrade",
    "override",
    "report",
    "similarity",
    "gradescope",
    "slurm",
    "release",
    "lint-course",
    "new-exercise",
    "export-grades",
    "feedback",
)


def instructor_side() -> bool:
    """Whether the instructor's code is here: not in a student copy, which `grader release` writes without it."""
    return ships("instructor")


def build_parser(every_command: bool = True) -> argparse.ArgumentParser:
    """Every command's parser; `every_command` False: the student's commands only (see the module's doc)."""
    parser = argparse.ArgumentParser(
        prog="grader",
        description="Check your distributed-training exercises, get hints, and take quizzes.",
    )
    commands_ = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

    listing = commands_.add_parser("list", help="exercises and your progress (the states are explained below it)")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(func=commands.cmd_list)

    check = commands_.add_parser("check", help="run the checks of exercises")
    check.add_argument(
        "exercises",
        nargs="*",
        metavar="EX",
        help="exercise id or number, or a notebook (default: every exercise edited since its last "
        "check, then the first not passing)",
    )
    check.add_argument("--all", action="store_true", help="check every exercise")
    source = check.add_mutually_exclusive_group()
    source.add_argument(
        "--solutions", action="store_true", help="check the reference solutions (the course's: a student copy has none)"
    )
    source.add_argument(
        "--path",
        metavar="PATH",
        help="check what you hand in (a folder, a zip or a notebook), its files chosen as the grader chooses them",
    )
    check.add_argument(
        "--json", metavar="FILE", help="also write results as JSON to FILE ('-': stdout, the report then on stderr)"
    )
    check.add_argument(
        "--no-warm",
        action="store_true",
        help="start a fresh engine instead of the warm one a background process keeps (also GRADER_WARM=0)",
    )
    check.add_argument(
        "--launcher",
        choices=("grader", "fork", "portable", "torchrun"),
        default="grader",
        help="who starts the ranks: the grader's warm launcher (default: fork on Linux, portable "
        "elsewhere, or $GRADER_LAUNCHER), one of those two by name, or torchrun",
    )
    _add_cluster_options(check, "with --launcher torchrun: this node is node 0 of N (the one that grades)")
    _add_grading_options(check)
    check.set_defaults(func=commands.cmd_check)

    hint = commands_.add_parser("hint", help="show the hints of an exercise")
    hint.add_argument("exercise", metavar="EX")
    hint.add_argument("number", nargs="?", type=int, metavar="N", help="only hint N")
    hint.set_defaults(func=commands.cmd_hint)

    watch = commands_.add_parser("watch", help="check an exercise again every time you save its file")
    watch.add_argument(
        "exercise",
        nargs="?",
        metavar="EX",
        help="watch only this one (default: every exercise; whichever file is saved is checked)",
    )
    _add_grading_options(watch)
    watch.set_defaults(func=commands.cmd_watch)

    reset = commands_.add_parser("reset", help="restore an exercise's stub (your file is backed up)")
    reset.add_argument("exercise", metavar="EX")
    reset.set_defaults(func=commands.cmd_reset)

    node = commands_.add_parser("node", help="serve as node 1..N-1 of a torchrun cluster graded from node 0")
    node.add_argument("--node-rank", type=int, required=True, metavar="I", help="this node's number, 1 to N-1")
    _add_cluster_options(node, "nodes in the cluster, node 0 included")
    node.set_defaults(func=commands.cmd_node)

    notebook = commands_.add_parser("notebook", help="Jupyter notebooks of the exercises, to work in instead of files")
    notebook_commands = notebook.add_subparsers(dest="notebook_command", metavar="NOTEBOOK_COMMAND", required=True)
    build = notebook_commands.add_parser("build", help="one notebook per exercise, each with a cell that checks it")
    build.add_argument(
        "--out", type=Path, metavar="DIR", help=f"where to write them (default: {NOTEBOOKS}/ in the course)"
    )
    build.set_defaults(func=commands.cmd_notebook_build)

    doctor.register(commands_)
    if every_command:
        from grader.quiz import cli as quiz_cli

        quiz_commands = quiz_cli.register(commands_)
        if instructor_side():
            from grader.instructor import cli as instructor_cli
            from grader.quiz import authoring

            authoring.register(quiz_commands)
            instructor_cli.register(commands_)
    return parser


def _errors(every_command: bool) -> tuple[type[Exception], ...]:
    """What a command raises for bad input: said in one line, exit code 2."""
    errors: tuple[type[Exception], ...] = (*commands.ERRORS, CourseNotFound, LauncherError)
    if every_command and instructor_side():
        from grader.instructor import cli as instructor_cli

        errors += instructor_cli.ERRORS
    return errors


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] in INSTRUCTOR_COMMANDS and not instructor_side():
        print(
            f"grader: `grader {argv[0]}` is an instructor's command, and this is a student copy of the course, "
            "whose grader has the student commands only (`grader --help` lists them)",
            file=sys.stderr,
        )
        return 2
    every_command = not argv or argv[0] not in STUDENT_COMMANDS
    args = build_parser(every_command).parse_args(argv)
    try:
        return int(args.func(args))
    except _errors(every_command) as exc:
        print(f"grader: {printable(str(exc))}", file=sys.stderr)  # it may name a student's file, or quote it
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `grader ... | head`: the reader left; nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
