"""The instructor's commands: `grader grade`, `grader release`, `grader notebook build`."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from grader.catalog import Catalog, load_catalog
from grader.checks.runner import ALL_CHECKS
from grader.instructor import gradescope, notebooks
from grader.instructor.batch import BatchOptions, SubmissionGrade, grade_batch
from grader.instructor.display import BatchProgress
from grader.instructor.gradebook import Gradebook
from grader.instructor.release import ReleaseError, release
from grader.instructor.submissions import name_of
from grader.paths import course_root
from grader.sandbox import MODES, NO_SANDBOX_WARNING, SandboxError, SandboxSet, open_sandbox


class InstructorError(Exception):
    """Bad input to an instructor command: reported in one line, exit code 2."""


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def register(commands: argparse._SubParsersAction) -> None:
    grade = commands.add_parser("grade", help="grade many submissions: results.json each, and a gradebook.csv",
                                description="Grade submissions (folders, zips or notebooks) with every check, "
                                            "hidden ones included.")
    grade.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION")
    grade.add_argument("--out", type=Path, required=True, metavar="DIR",
                       help="writes DIR/<submission>/results.json and DIR/gradebook.csv")
    grade.add_argument("-j", "--jobs", type=int, default=2, metavar="N", help="submissions graded at once (default 2)")
    grade.add_argument("--timeout", type=_positive_float, default=120.0, metavar="S",
                       help="seconds one submission may take in all (default 120)")
    grade.add_argument("--deadline", type=_positive_float, default=10.0, metavar="S",
                       help="seconds one run of the ranks may take (default 10)")
    grade.add_argument("--world-size", type=int, metavar="N", help="grade at N ranks only (default: the catalog's)")
    grade.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                       help="gloo (CPU, default) or nccl (one GPU per rank; checks are skipped, 0 points, "
                            "where there are too few GPUs)")
    grade.add_argument("--hidden-visibility", choices=gradescope.HIDDEN_VISIBILITIES, default="hidden",
                       help="Gradescope visibility of hidden checks (default hidden: never shown to students)")
    confine = grade.add_mutually_exclusive_group()
    confine.add_argument("--sandbox", choices=MODES, default="auto",
                         help="how each submission is confined (default auto: bubblewrap, else an unprivileged "
                              "user when run as root, else refuse); see docs/SECURITY.md")
    confine.add_argument("--no-sandbox", dest="sandbox", action="store_const", const="none",
                         help="grade without a sandbox: only for submissions you trust")
    grade.set_defaults(func=cmd_grade)

    rel = commands.add_parser("release", help="write the student copy of the course (no solutions, no hidden checks)")
    rel.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty directory")
    rel.set_defaults(func=cmd_release)

    notebook = commands.add_parser("notebook", help="Jupyter notebooks built from the exercises")
    sub = notebook.add_subparsers(dest="notebook_command", metavar="NOTEBOOK_COMMAND", required=True)
    build = sub.add_parser("build", help="one notebook per exercise")
    build.add_argument("--out", type=Path, required=True, metavar="DIR")
    build.set_defaults(func=cmd_notebook_build)


def cmd_grade(args: argparse.Namespace) -> int:
    if args.jobs < 1:
        raise InstructorError("-j must be at least 1")
    if args.world_size is not None and args.world_size < 1:
        raise InstructorError("--world-size must be at least 1")
    names = [name_of(path) for path in args.submissions]
    repeated = sorted({n for n in names if names.count(n) > 1})
    if repeated:
        raise InstructorError(f"two submissions would share the results folder {repeated[0]!r}: rename one")
    catalog = load_catalog(course_root())
    options = BatchOptions(jobs=args.jobs, timeout=args.timeout, deadline=args.deadline,
                           world_sizes=(args.world_size,) if args.world_size else None, backend=args.backend,
                           visibilities=ALL_CHECKS)
    args.out.mkdir(mode=0o700, parents=True, exist_ok=True)  # results are nobody else's business
    try:
        sandbox = open_sandbox(args.sandbox, catalog.root, args.out, gpu=args.backend == "nccl")
    except SandboxError as exc:
        raise InstructorError(str(exc)) from exc
    if sandbox is None:
        print(NO_SANDBOX_WARNING, file=sys.stderr)
    try:
        return _grade(args, catalog, options, sandbox)
    finally:
        if sandbox is not None:
            sandbox.close()


def _grade(args: argparse.Namespace, catalog: Catalog, options: BatchOptions, sandbox: SandboxSet | None) -> int:
    started = time.monotonic()
    progress = BatchProgress(len(args.submissions))
    with Gradebook(args.out / "gradebook.csv", catalog) as gradebook:
        def done(grade: SubmissionGrade) -> None:
            gradescope.write(args.out / grade.name / "results.json", catalog, grade, args.hidden_visibility)
            gradebook.add(grade)
            progress.finished(grade)

        grades = grade_batch(catalog, args.submissions, options, sandbox, on_start=progress.started, on_done=done)
    seconds = time.monotonic() - started
    print(f"graded {len(grades)} submission(s) in {seconds:.1f}s ({seconds / len(grades):.2f}s each): "
          f"{args.out / 'gradebook.csv'}")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    catalog = load_catalog(course_root())
    try:
        written = release(catalog, args.out, Path(__file__).resolve().parents[1])
    except ReleaseError as exc:
        raise InstructorError(str(exc)) from exc
    print(f"student copy written to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def cmd_notebook_build(args: argparse.Namespace) -> int:
    catalog = load_catalog(course_root())
    written = notebooks.build_all(catalog, args.out)
    print(f"{len(written)} notebook(s) written to {args.out}")
    return 0


ERRORS = (InstructorError, notebooks.NotebookError)
