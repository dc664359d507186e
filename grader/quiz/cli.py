"""`grader quiz list | practice`: the practice questions from the command line, a student's commands.

The course's own commands on its banks (lint, render, grade) are grader/quiz/authoring.py, registered into the
same `grader quiz` only where the instructor's side is installed: a student copy holds neither them nor the
modules they use. Every failure a user can cause (missing directory, broken TOML, bad key) ends in one clear
line on stderr and a non-zero exit code, never in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.paths import CourseNotFound, course_root
from grader.quiz import practice
from grader.quiz.bank import POOLS, Bank, BankNotFound, load_banks
from grader.quiz.formula import FormulaError
from grader.quiz.versions import select


def register(commands: argparse._SubParsersAction) -> argparse._SubParsersAction:
    """`grader quiz` with its student commands; returns its subcommands, where the authoring ones go."""
    quiz = commands.add_parser(
        "quiz",
        help="the practice questions: list them, answer them with feedback",
        description="The practice questions: list them, or answer them with feedback.",
    )
    sub = quiz.add_subparsers(dest="quiz_command", metavar="QUIZ_COMMAND", required=True)

    listing = sub.add_parser("list", help="list the questions with their id, type, pool and tags")
    bank_option(listing)
    tags_option(listing)
    pool_option(listing, default="all")
    listing.add_argument("--json", action="store_true", help="print JSON for tools")
    listing.set_defaults(func=cmd_list)

    practice_parser = sub.add_parser(
        "practice",
        help="answer the practice questions in the terminal: right or wrong, with the explanation",
        description="Asks the practice questions one by one and marks each answer at once. Choice questions: "
        "the letter(s), e.g. B or A;C; numeric ones: a number. Answers may come from a pipe, one per line.",
    )
    bank_option(practice_parser)
    practice_parser.add_argument(
        "--exercise", default=None, help="only the questions of this exercise (id, number or name)"
    )
    practice_parser.add_argument("--count", type=positive, default=None, help="how many questions (default: all)")
    practice_parser.add_argument("--seed", type=int, default=None, help="fix the draw (default: a new one each time)")
    practice_parser.set_defaults(func=cmd_practice)
    return sub


def bank_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bank", type=Path, default=None, help="directory of *.toml question banks (default: the course's quizzes/)"
    )


def tags_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tags", default="", help="comma-separated exercise ids or topics; keep questions with any")


def pool_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--pool", choices=[*POOLS, "all"], default=default, help=f"questions of this pool only (default: {default})"
    )


def selected_pool(args: argparse.Namespace) -> str | None:
    return None if args.pool == "all" else args.pool


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def fail(message: str) -> int:
    print(f"grader quiz: error: {message}", file=sys.stderr)
    return 1


def bank_directory(args: argparse.Namespace) -> Path:
    """The bank directory: --bank, or the course's quizzes/."""
    return args.bank if args.bank is not None else course_root() / "quizzes"


def load_bank(args: argparse.Namespace) -> Bank:
    return load_banks(bank_directory(args))


def selected_tags(args: argparse.Namespace) -> list[str]:
    return [tag.strip() for tag in args.tags.split(",") if tag.strip()]


def report_problems(bank: Bank) -> bool:
    for problem in bank.problems:
        print(f"error: {problem}", file=sys.stderr)
    if bank.problems:
        print(f"{len(bank.problems)} error(s) in the question banks", file=sys.stderr)
    return bool(bank.problems)


def cmd_list(args: argparse.Namespace) -> int:
    try:
        bank = load_bank(args)
    except (BankNotFound, CourseNotFound) as exc:
        return fail(str(exc))
    questions = select(bank.questions, seed=0, tags=selected_tags(args), pool=selected_pool(args))
    if args.json:
        rows = [
            {
                "id": q.id,
                "type": q.type,
                "pool": q.pool,
                "exercise": q.exercise,
                "topics": list(q.topics),
                "objective": q.objective,
                "difficulty": q.difficulty,
                "points": q.points,
                "parametric": q.parametric,
                "file": q.source.name,
            }
            for q in questions
        ]
        print(json.dumps(rows, indent=2))
    else:
        width = max((len(q.id) for q in questions), default=2)
        for q in questions:
            print(f"{q.id:<{width}}  {q.type:<9}  {q.pool:<8}  {', '.join(q.tags)}")
        print(f"{len(questions)} question(s)")
    return 1 if report_problems(bank) else 0


def _read_line(prompt: str) -> str | None:
    """One answer from the terminal or a pipe; None at the end of the input."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if line and not sys.stdin.isatty():
        print(line.rstrip("\n"))  # echo piped answers, so the transcript reads like the session
    return line if line else None


def cmd_practice(args: argparse.Namespace) -> int:
    try:
        bank = load_bank(args)
    except (BankNotFound, CourseNotFound) as exc:
        return fail(str(exc))
    seed = args.seed if args.seed is not None else practice.new_seed()
    questions = [q for q in bank.questions if q.pool == "practice"]
    if args.exercise:
        questions = [q for q in questions if practice.about_exercise(q, args.exercise)]
    questions = select(questions, seed, count=args.count)
    if not questions:
        about = f" about {args.exercise}" if args.exercise else ""
        return fail(f"no practice question{about} in {bank_directory(args)}")
    try:
        practice.ask_all(questions, seed, _read_line, print)
    except FormulaError as exc:
        return fail(f"{exc}: a fault of the question bank, not of your answers")
    except KeyboardInterrupt:
        print()
        return 130
    return 1 if report_problems(bank) else 0
