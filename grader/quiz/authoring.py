"""`grader quiz lint | render | grade`: the course's commands on its question banks (the instructor's side).

Registered into `grader quiz` beside the student's list and practice (grader/quiz/cli.py); a student copy
ships neither this module nor the rendering, linting and grading it uses.
"""

from __future__ import annotations

import argparse
import sys
from itertools import repeat
from pathlib import Path

from grader.paths import CourseNotFound
from grader.quiz import grade as grading
from grader.quiz.analysis import reliability
from grader.quiz.bank import POOLS, BankNotFound
from grader.quiz.cli import (
    bank_directory,
    bank_option,
    fail,
    load_bank,
    pool_option,
    positive,
    report_problems,
    selected_pool,
    selected_tags,
    tags_option,
)
from grader.quiz.formula import FormulaError
from grader.quiz.key import KeyFileError, load_keys
from grader.quiz.lint import lint
from grader.quiz.render import FORMATS, OutputFolderError, write_versions
from grader.quiz.versions import draw_all, select


def register(sub: argparse._SubParsersAction) -> None:
    """The authoring commands, into `grader quiz`'s subcommands."""
    lint_parser = sub.add_parser(
        "lint", help="validate every bank, measure option-length tells, find near-duplicates; exit 1 on errors"
    )
    bank_option(lint_parser)
    lint_parser.set_defaults(func=cmd_lint)

    render = sub.add_parser("render", help="render seeded versions of a quiz and their answer keys")
    bank_option(render)
    tags_option(render)
    pool_option(render, default="exam")
    render.add_argument(
        "--format",
        action="append",
        choices=[*FORMATS, "all"],
        default=None,
        help="output format; repeat it for several, or `all` (default: md)",
    )
    render.add_argument("--versions", type=positive, default=1, help="how many versions (default 1)")
    render.add_argument("--seed", type=int, default=0, help="seed that makes the versions reproducible")
    render.add_argument("--count", type=positive, default=None, help="questions per quiz (default: all selected)")
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
    grade.add_argument(
        "--responses",
        type=Path,
        required=True,
        action="append",
        metavar="CSV",
        help="student,version,<question id>..., or a Moodle Responses or Canvas Student Analysis report as it "
        "comes; repeat it for several files (a student in two is graded in neither)",
    )
    grade.add_argument(
        "--version",
        type=positive,
        action="append",
        metavar="N",
        help="the version of a file that names none (an LMS report: one LMS quiz is one version); "
        "one per --responses, in the same order",
    )
    grade.add_argument(
        "--student-column",
        metavar="NAME",
        help="the column that identifies students (default: student; Moodle: id number, username or email "
        "address; Canvas: sis_id, else id)",
    )
    grade.add_argument(
        "--out",
        type=Path,
        required=True,
        help="directory for scores.csv, questions.csv, options.csv, feedback.csv, problems.csv",
    )
    grade.set_defaults(func=cmd_grade)


def cmd_lint(args: argparse.Namespace) -> int:
    try:
        bank = load_bank(args)
    except (BankNotFound, CourseNotFound) as exc:
        return fail(str(exc))
    report = lint(bank, bank_directory(args))
    for summary in report.summaries:
        print(summary)
    for warning in report.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    bank.problems.extend(report.problems)
    if report_problems(bank):
        return 1
    pools = ", ".join(f"{sum(q.pool == pool for q in bank.questions)} {pool}" for pool in POOLS)
    print(f"{len(bank.files)} bank(s), {len(bank.questions)} question(s) ({pools}): no problems")
    return 0


def cmd_render(args: argparse.Namespace) -> int:
    try:
        bank = load_bank(args)
    except (BankNotFound, CourseNotFound) as exc:
        return fail(str(exc))
    if report_problems(bank):
        return 1
    requested = args.format or ["md"]
    formats = list(FORMATS) if "all" in requested else list(dict.fromkeys(requested))
    questions = select(bank.questions, args.seed, selected_tags(args), args.count, selected_pool(args))
    if not questions:
        where = "in the bank" if args.pool == "all" else f"in the {args.pool} pool"
        return fail(f"no question {where} matches --tags {args.tags}" if args.tags else f"no question {where}")
    try:
        versions = draw_all(questions, args.seed, args.versions, args.title, args.pool)
        written = write_versions(versions, formats, args.out, force=args.force)
    except FormulaError as exc:
        return fail(f"{exc}; run `grader quiz lint`")
    except OutputFolderError as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write to {args.out}: {exc}")
    source = "every pool" if args.pool == "all" else f"the {args.pool} pool"
    print(
        f"{len(versions)} version(s) of {len(questions)} question(s) from {source}, formats {', '.join(formats)}: "
        f"{len(written)} file(s) in {args.out}"
    )
    return 0


def cmd_grade(args: argparse.Namespace) -> int:
    if args.version and len(args.version) != len(args.responses):
        return fail(
            f"{len(args.version)} --version for {len(args.responses)} --responses: give one per file, in the same order"
        )
    sources = [grading.Source(path, version) for path, version in zip(args.responses, args.version or repeat(None))]
    try:
        keys = load_keys(args.key)
        result = grading.grade(keys, sources, args.student_column)
        written = grading.write_reports(result, args.out)
    except (KeyFileError, grading.ResponsesError) as exc:
        return fail(str(exc))
    except OSError as exc:
        return fail(f"cannot write to {args.out}: {exc}")
    print(f"graded {result.students} student(s): {', '.join(str(p) for p in written)}")
    found = reliability(result.marks)
    said = f"{found.value:.2f}" if found.value is not None else f"not computed ({found.why})"
    print(f"reliability ({found.name}): {said}; flagged questions and unpicked distractors: {args.out / 'summary.md'}")
    skipped = sum(p.action == "row not graded" for p in result.problems)
    unreadable = sum(p.action == "answer scored 0" for p in result.problems)
    if skipped or unreadable:
        print(
            f"warning: {skipped} row(s) not graded, {unreadable} answer(s) unreadable (scored 0): "
            f"see {args.out / 'problems.csv'}",
            file=sys.stderr,
        )
    return 0
