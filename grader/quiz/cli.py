"""`grader quiz list | practice | lint | render | grade`: question banks and quiz sheets from the command line.

Every failure a user can cause (missing directory, broken TOML, bad key) ends in one clear line on
stderr and a non-zero exit code, never in a traceback.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from grader.paths import CourseNotFound, course_root
from grader.quiz import grade as grading
from grader.quiz import practice
from grader.quiz.bank import POOLS, Bank, BankNotFound, load_banks
from grader.quiz.formula import FormulaError
from grader.quiz.key import KeyFileError, load_keys
from grader.quiz.lint import lint
from grader.quiz.render import FORMATS, OutputFolderError, write_versions
from grader.quiz.versions import draw_all, select


def register(commands: argparse._SubParsersAction) -> None:
    quiz = commands.add_parser(
        "quiz",
        help="question banks and quiz sheets",
        description="Question banks: list, lint, render versions, grade responses.",
    )
    sub = quiz.add_subparsers(dest="quiz_command", metavar="QUIZ_COMMAND", required=True)

    listing = sub.add_parser("list", help="list the questions with their id, type, pool and tags")
    _bank_option(listing)
    _tags_option(listing)
    _pool_option(listing, default="all")
    listing.add_argument("--json", action="store_true", help="print JSON for tools")
    listing.set_defaults(func=cmd_list)

    practice_parser = sub.add_parser(
        "practice",
        help="answer the practice questions in the terminal: right or wrong, with the explanation",
        description="Asks the practice questions one by one and marks each answer at once. Choice questions: "
        "the letter(s), e.g. B or A;C; numeric ones: a number. Answers may come from a pipe, one per line.",
    )
    _bank_option(practice_parser)
    practice_parser.add_argument(
        "--exercise", default=None, help="only the questions of this exercise (id, number or name)"
    )
    practice_parser.add_argument("--count", type=_positive, default=None, help="how many questions (default: all)")
    practice_parser.add_argument("--seed", type=int, default=None, help="fix the draw (default: a new one each time)")
    practice_parser.set_defaults(func=cmd_practice)

    lint_parser = sub.add_parser(
        "lint", help="validate every bank, measure option-length tells, find near-duplicates; exit 1 on errors"
    )
    _bank_option(lint_parser)
    lint_parser.set_defaults(func=cmd_lint)

    render = sub.add_parser("render", help="render seeded versions of a quiz and their answer keys")
    _bank_option(render)
    _tags_option(render)
    _pool_option(render, default="exam")
    render.add_argument(
        "--format",
        action="append",
        choices=[*FORMATS, "all"],
        default=None,
        help="output format; repeat it for several, or `all` (default: md)",
    )
    render.add_argument("--versions", type=_positive, default=1, help="how many versions (default 1)")
    render.add_argument("--seed", type=int, default=0, help="seed that makes the versions reproducible")
    render.add_argument("--count", type=_positive, default=None, help="questions per quiz (default: all selected)")
    render.add_argument("--title", default="Distributed training quiz", help="title printed on the sheets")
    render.add_argument("--out", type=Path, required=True, help="directory for the sheets and keys (new or empty)")
    render.add_argument(
        "--force",
        action="store_true",
        help="render into a folder that is not empty, removing the files of an earlier render",
    )
    render.set_defaults(func=cmd_render)

    grade = sub.add_parser(
        "grade",
        help="score a responses CSV against the answer keys",
        description=grading.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    grade.add_argument(
        "--key", type=Path, required=True, help="a vNN.key.json file, or the render --out directory holding them"
    )
    grade.add_argument("--responses", type=Path, required=True, help="CSV: student,version,<question id>...")
    grade.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for scores.csv, questions.csv, options.csv, feedback.csv, problems.csv",
    )
    grade.set_defaults(func=cmd_grade)


def _bank_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--bank", type=Path, default=None, help="directory of *.toml question banks (default: the course's quizzes/)"
    )


def _tags_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tags", default="", help="comma-separated exercise ids or topics; keep questions with any")


def _pool_option(parser: argparse.ArgumentParser, default: str) -> None:
    parser.add_argument(
        "--pool", choices=[*POOLS, "all"], default=default, help=f"questions of this pool only (default: {default})"
    )


def _pool(args: argparse.Namespace) -> str | None:
    return None if args.pool == "all" else args.pool


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} is not a positive integer")
    return value


def _fail(message: str) -> int:
    print(f"grader quiz: error: {message}", file=sys.stderr)
    return 1


def _directory(args: argparse.Namespace) -> Path:
    """The bank directory: --bank, or the course's quizzes/."""
    return args.bank if args.bank is not None else course_root() / "quizzes"


def _load(args: argparse.Namespace) -> Bank:
    return load_banks(_directory(args))


def _tags(args: argparse.Namespace) -> list[str]:
    return [tag.strip() for tag in args.tags.split(",") if tag.strip()]


def _report_problems(bank: Bank) -> bool:
    for problem in bank.problems:
        print(f"error: {problem}", file=sys.stderr)
    if bank.problems:
        print(f"{len(bank.problems)} error(s) in the question banks", file=sys.stderr)
    return bool(bank.problems)


def cmd_list(args: argparse.Namespace) -> int:
    try:
        bank = _load(args)
    except (BankNotFound, CourseNotFound) as exc:
        return _fail(str(exc))
    questions = select(bank.questions, seed=0, tags=_tags(args), pool=_pool(args))
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
    return 1 if _report_problems(bank) else 0


def _read_line(prompt: str) -> str | None:
    """One answer from the terminal or a pipe; None at the end of the input."""
    print(prompt, end="", flush=True)
    line = sys.stdin.readline()
    if line and not sys.stdin.isatty():
        print(line.rstrip("\n"))  # echo piped answers, so the transcript reads like the session
    return line if line else None


def cmd_practice(args: argparse.Namespace) -> int:
    try:
        bank = _load(args)
    except (BankNotFound, CourseNotFound) as exc:
        return _fail(str(exc))
    seed = args.seed if args.seed is not None else practice.new_seed()
    questions = [q for q in bank.questions if q.pool == "practice"]
    if args.exercise:
        questions = [q for q in questions if practice.about_exercise(q, args.exercise)]
    questions = select(questions, seed, count=args.count)
    if not questions:
        about = f" about {args.exercise}" if args.exercise else ""
        return _fail(f"no practice question{about} in {_directory(args)}")
    try:
        practice.ask_all(questions, seed, _read_line, print)
    except FormulaError as exc:
        return _fail(f"{exc}; run `grader quiz lint`")
    except KeyboardInterrupt:
        print()
        return 130
    return 1 if _report_problems(bank) else 0


def cmd_lint(args: argparse.Namespace) -> int:
    try:
        bank = _load(args)
    except (BankNotFound, CourseNotFound) as exc:
        return _fail(str(exc))
    report = lint(bank, _directory(args))
    for summary in report.summaries:
        print(summary)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    bank.problems.extend(report.problems)
    if _report_problems(bank):
        return 1
    pools = ", ".join(f"{sum(q.pool == pool for q in bank.questions)} {pool}" for pool in POOLS)
    print(f"{len(bank.files)} bank(s), {len(bank.questions)} question(s) ({pools}): no problems")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    try:
        bank = _load(args)
    except (BankNotFound, CourseNotFound) as exc:
        return _fail(str(exc))
    if _report_problems(bank):
        return 1
    requested = args.format or ["md"]
    formats = list(FORMATS) if "all" in requested else list(dict.fromkeys(requested))
    questions = select(bank.questions, args.seed, _tags(args), args.count, _pool(args))
    if not questions:
        where = "in the bank" if args.pool == "all" else f"in the {args.pool} pool"
        return _fail(f"no question {where} matches --tags {args.tags}" if args.tags else f"no question {where}")
    try:
        versions = draw_all(questions, args.seed, args.versions, args.title, args.pool)
        written = write_versions(versions, formats, args.out, force=args.force)
    except FormulaError as exc:
        return _fail(f"{exc}; run `grader quiz lint`")
    except OutputFolderError as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write to {args.out}: {exc}")
    source = "every pool" if args.pool == "all" else f"the {args.pool} pool"
    print(
        f"{len(versions)} version(s) of {len(questions)} question(s) from {source}, formats {', '.join(formats)}: "
        f"{len(written)} file(s) in {args.out}"
    )
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    try:
        keys = load_keys(args.key)
        result = grading.grade(keys, args.responses)
        written = grading.write_reports(result, args.out)
    except (KeyFileError, grading.ResponsesError) as exc:
        return _fail(str(exc))
    except OSError as exc:
        return _fail(f"cannot write to {args.out}: {exc}")
    print(f"graded {result.students} student(s): {', '.join(str(p) for p in written)}")
    skipped = sum(p.action == "row not graded" for p in result.problems)
    unreadable = sum(p.action == "answer scored 0" for p in result.problems)
    if skipped or unreadable:
        print(
            f"warning: {skipped} row(s) not graded, {unreadable} answer(s) unreadable (scored 0): "
            f"see {args.out / 'problems.csv'}",
            file=sys.stderr,
        )
    return 0
