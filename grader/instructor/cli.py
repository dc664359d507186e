"""The instructor's commands: `grader grade`, `gradebook merge`, `report`, `feedback`, `similarity`, `gradescope`,
`slurm`, `release`, `lint-course`."""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import math
import os
import secrets
import sys
import time
from pathlib import Path

from grader import course_lint
from grader.catalog import Catalog, course_catalog
from grader.engine.platforms import LAUNCHERS
from grader.instructor import (
    class_report,
    feedback,
    grade_log,
    gradebook,
    gradescope,
    gradescope_bundle,
    lms_export,
    manifest,
    overrides,
    provenance,
    regrade,
    roster,
    shard,
    similarity,
    slurm,
)
from grader.instructor.batch import grade_batch
from grader.instructor.display import BatchProgress
from grader.instructor.new_exercise import NewExerciseError, new_exercise
from grader.instructor.release import ReleaseError, release
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.submissions import leftover, name_of
from grader.instructor.templating import UnsafeValue
from grader.notebook_source import NotebookError
from grader.paths import course_origin, course_root
from grader.plan import GradingPlan, check_counts
from grader.report.inert import csv_cell, one_line
from grader.report.sink import Sink, closing
from grader.sandbox import MODES, NO_SANDBOX_WARNING, SandboxError, SandboxSet, open_sandbox


class InstructorError(Exception):
    """Bad input to an instructor command: reported in one line, exit code 2."""


def _positive_float(text: str) -> float:
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"{text} is not a positive number of seconds")
    return value


def _share(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 < value <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a share between 0 and 1, such as 0.7")
    return value


def _shard(text: str) -> shard.Shard:
    try:
        return shard.parse_shard(text)
    except shard.ShardError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


SEEDS = 2**31  # a batch's seed is drawn below this; `--seed` takes one from the same range


def _seed(text: str) -> int:
    if not text.isdigit() or int(text) >= SEEDS:
        raise argparse.ArgumentTypeError(f"{text} is not a seed: a whole number from 0 to {SEEDS - 1}")
    return int(text)


def _score(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text} is not a score, such as 6 or 4.5")
    return value


def _exercise_list(text: str) -> tuple[str, ...]:
    keys = tuple(k.strip() for k in text.split(",") if k.strip())
    if not keys:
        raise argparse.ArgumentTypeError("name at least one exercise, e.g. ex01,ex02 or 1,2")
    return keys


def _add_exercises(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument(
        "--exercises",
        type=_exercise_list,
        metavar="EX,EX",
        help=f"{what} these exercises only (ids or numbers, comma-separated; default: all)",
    )


def _add_batch_options(parser: argparse.ArgumentParser, jobs: int) -> None:
    """The options of a batch grade, shared by `grade` and `slurm` (which passes them on)."""
    parser.add_argument(
        "-j", "--jobs", type=int, default=jobs, metavar="N", help=f"submissions graded at once (default {jobs})"
    )
    parser.add_argument(
        "--timeout",
        type=_positive_float,
        default=120.0,
        metavar="S",
        help="seconds one submission may take in all (default 120)",
    )
    parser.add_argument(
        "--deadline",
        type=_positive_float,
        default=10.0,
        metavar="S",
        help="seconds one run of the ranks may take (default 10)",
    )
    parser.add_argument("--world-size", type=int, metavar="N", help="grade at N ranks only (default: the catalog's)")
    _add_exercises(parser, "grade")


def _add_sandbox_options(parser: argparse.ArgumentParser, regrading: bool = False) -> None:
    """--sandbox MODE / --no-sandbox, shared by `grade`, `slurm` (whose tasks grade in that mode) and `regrade`
    (whose default, None, is the mode the old batch was graded in)."""
    confine = parser.add_mutually_exclusive_group()
    default = "the old batch's mode" if regrading else "auto"
    confine.add_argument(
        "--sandbox",
        choices=MODES,
        default=None if regrading else "auto",
        help=f"how each submission is confined (default {default}; auto: bubblewrap, else an unprivileged "
        "user when run as root, else refuse); see docs/SECURITY.md",
    )
    confine.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_const",
        const="none",
        help="grade without a sandbox: only for submissions you trust",
    )


def register(commands: argparse._SubParsersAction) -> None:
    grade = commands.add_parser(
        "grade",
        help="grade many submissions: results.json each, gradebook.csv, report.html",
        description="Grade submissions (folders, zips, notebooks or exercise files) with every check, hidden "
        "ones included.",
    )
    grade.add_argument("submissions", nargs="+", type=Path, metavar="SUBMISSION")
    grade.add_argument(
        "--out",
        type=Path,
        required=True,
        metavar="DIR",
        help="writes DIR/<submission>/results.json and feedback pages, DIR/gradebook.csv and DIR/report.html",
    )
    _add_batch_options(grade, jobs=2)
    grade.add_argument(
        "--backend",
        choices=("gloo", "nccl"),
        default="gloo",
        help="gloo (CPU, default) or nccl (one GPU per rank; checks are skipped, 0 points, "
        "where there are too few GPUs)",
    )
    grade.add_argument(
        "--hidden-visibility",
        choices=gradescope.HIDDEN_VISIBILITIES,
        default="hidden",
        help="Gradescope visibility of hidden checks, and whether the feedback pages show them "
        "(default hidden: never shown to students)",
    )
    grade.add_argument(
        "--shard",
        type=_shard,
        metavar="I/N",
        help="grade only the I-th of N slices of the submissions (1 <= I <= N), chosen by a hash "
        "of each name: the same whatever order they are given in",
    )
    grade.add_argument(
        "--roster",
        type=Path,
        metavar="FILE",
        help="the class roster (an LMS's CSV export): the gradebook gets each submission's student_id, and "
        "DIR/roster.csv says which student each submission is and who handed in nothing",
    )
    grade.add_argument(
        "--seed",
        type=_seed,
        help="the batch's random inputs (default: drawn once, recorded in DIR/batch.json); `grader slurm` gives "
        "every shard the same, so the whole class is graded on the same inputs",
    )
    _add_sandbox_options(grade)
    grade.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        help="how ranks start (default: fork on Linux, portable elsewhere, or $GRADER_LAUNCHER); "
        "a sandbox always forks, so portable needs --no-sandbox",
    )
    grade.set_defaults(func=cmd_grade)

    book = commands.add_parser("gradebook", help="gradebooks of several runs")
    book_commands = book.add_subparsers(dest="gradebook_command", metavar="GRADEBOOK_COMMAND", required=True)
    merge = book_commands.add_parser(
        "merge",
        help="join the gradebooks of several `grader grade` runs (shards)",
        description="Join the gradebooks of `grader grade` runs, e.g. the shards of a "
        "cluster job. A submission in two of them is refused; submissions "
        "and shards that never came back are named (exit status 1).",
    )
    merge.add_argument(
        "sources", nargs="+", type=Path, metavar="OUT", help="a `grader grade --out` folder, or a gradebook.csv"
    )
    merge.add_argument("--out", type=Path, required=True, metavar="FILE", help="the merged gradebook (CSV)")
    merge.add_argument(
        "--report",
        type=Path,
        metavar="FILE",
        help="the class report of the merged runs (default: report.html beside FILE)",
    )
    merge.set_defaults(func=cmd_gradebook_merge)

    again = commands.add_parser(
        "regrade",
        help="grade a batch's submissions again with the current grader and course: what changed, check by check",
        description="Grade the submissions OLD_OUT graded (their paths, seed and options are in OLD_OUT/batch.json) "
        "with the current grader and course into NEW_OUT, carry OLD_OUT's score overrides over, and write "
        "NEW_OUT/regrade.md and regrade.csv: every check whose verdict changed. The gradebook is written only "
        "with --accept.",
    )
    again.add_argument("old_out", type=Path, metavar="OLD_OUT", help="a `grader grade --out` folder")
    again.add_argument("--out", type=Path, required=True, metavar="NEW_OUT", help="where the regrade goes")
    again.add_argument("--accept", action="store_true", help="write NEW_OUT/gradebook.csv (default: the diff only)")
    _add_sandbox_options(again, regrading=True)
    again.set_defaults(func=cmd_regrade)

    override = commands.add_parser(
        "override",
        help="set one exercise's score of one submission by hand, with a note; the gradebook shows both",
        description="Record in OUT/overrides.csv that SUBMISSION's EXERCISE scores SCORE (0 to the exercise's "
        "points), why, who and when, and rewrite OUT/gradebook.csv with it: the override's score and total, "
        "the graded score in its overrides column. `grader regrade` keeps overrides.",
    )
    override.add_argument("out", type=Path, metavar="OUT", help="a `grader grade --out` folder")
    override.add_argument("submission", metavar="SUBMISSION", help="a submission's name, as in the gradebook")
    override.add_argument("exercise", metavar="EXERCISE", help="an exercise id or number, e.g. ex03 or 3")
    override.add_argument("score", nargs="?", type=_score, metavar="SCORE", help="the score it gets")
    override.add_argument("--note", metavar="TEXT", help="why (required to set a score)")
    override.add_argument("--remove", action="store_true", help="remove the override: the graded score again")
    override.set_defaults(func=cmd_override)

    report = commands.add_parser(
        "report",
        help="the class report of `grader grade` runs (report.html)",
        description="Write the class report of one or more `grader grade --out` folders "
        "(their grades.jsonl), e.g. again after installing the plots extra.",
    )
    report.add_argument("sources", nargs="+", type=Path, metavar="OUT", help="a `grader grade --out` folder")
    report.add_argument("--out", type=Path, required=True, metavar="FILE", help="the page to write, e.g. report.html")
    report.add_argument("--no-plots", action="store_true", help="tables only, even with matplotlib installed")
    report.set_defaults(func=cmd_report)

    alike = commands.add_parser(
        "similarity",
        help="which submissions of a graded batch share code: pages to read, never a grade",
        description="Compare the code of the submissions `grader grade` graded into OUT, exercise by exercise "
        "(the exercises' stubs set aside), and write OUT/similarity.html with a side-by-side page per "
        "flagged pair, linked from OUT/report.html. No score changes. Needs the similarity extra: "
        f"{similarity.INSTALL}.",
    )
    alike.add_argument("out", type=Path, metavar="OUT", help="a `grader grade --out` folder (it keeps no code)")
    alike.add_argument(
        "submissions", nargs="*", type=Path, metavar="SUBMISSION", help="the submissions graded there, as given to it"
    )
    alike.add_argument(
        "--archive",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="an earlier term to compare with: a folder of its submissions, or its results folder once "
        "`grader similarity` has run on it (repeat for several)",
    )
    alike.add_argument(
        "--threshold",
        type=_share,
        default=similarity.THRESHOLD,
        metavar="SHARE",
        help=f"flag a pair when each shares this much of its own code with the other (default {similarity.THRESHOLD})",
    )
    alike.add_argument(
        "-j",
        "--jobs",
        type=int,
        default=similarity.cpus(),
        metavar="N",
        help=f"processes that read and compare (default: one per CPU, {similarity.cpus()} here)",
    )
    alike.set_defaults(func=cmd_similarity)

    scope = commands.add_parser(
        "gradescope",
        help="build the Gradescope autograder: DIR/autograder.zip",
        description="Write DIR/autograder.zip (setup.sh, run_autograder, the course with its "
        "hidden checks, no solutions) to upload to a Gradescope assignment.",
    )
    scope.add_argument("--out", type=Path, required=True, metavar="DIR")
    _add_exercises(scope, "the assignment grades")
    scope.add_argument(
        "--hidden-visibility",
        choices=gradescope.HIDDEN_VISIBILITIES,
        default="hidden",
        help="Gradescope visibility of hidden checks (default hidden: never shown to students)",
    )
    scope.add_argument(
        "--torch",
        metavar="VERSION",
        help="the torch the autograder installs, as the CPU wheel (default: the one installed here)",
    )
    scope.set_defaults(func=cmd_gradescope)

    cluster = commands.add_parser(
        "slurm",
        help="write a Slurm job array that grades a folder of submissions",
        description="Write a Slurm job script: one array task per shard of the "
        "submissions in SUBS_DIR, then a dependent job that merges the "
        "shards' gradebooks. Submit it with sbatch.",
    )
    cluster.add_argument("submissions_dir", type=Path, metavar="SUBS_DIR")
    cluster.add_argument("--out", type=Path, required=True, metavar="FILE", help="the job script, e.g. grade.sbatch")
    cluster.add_argument(
        "--results",
        type=Path,
        default=Path("graded"),
        metavar="DIR",
        help="where the shards and the merged gradebook go (default ./graded)",
    )
    cluster.add_argument(
        "--shards",
        type=int,
        metavar="N",
        help=f"array tasks (default: one per {slurm.SUBMISSIONS_PER_SHARD} submissions)",
    )
    cluster.add_argument(
        "--gpus-per-task",
        type=int,
        default=0,
        metavar="G",
        help="GPUs per array task (default 0); with GPUs the backend is nccl",
    )
    cluster.add_argument("--cpus-per-task", type=int, default=4, metavar="C", help="CPUs per array task (default 4)")
    cluster.add_argument("--backend", choices=("gloo", "nccl"), help="default: nccl with --gpus-per-task, gloo without")
    cluster.add_argument(
        "--time",
        metavar="HH:MM:SS",
        help="each task's time limit (default: enough for every submission to use --timeout)",
    )
    cluster.add_argument(
        "--roster",
        type=Path,
        metavar="FILE",
        help="the class roster (an LMS's CSV export), passed to every task's `grader grade --roster`; read now, "
        "so a roster the tasks could not read is refused before the job is written",
    )
    cluster.add_argument("--partition", metavar="NAME")
    cluster.add_argument("--account", metavar="NAME")
    _add_batch_options(cluster, jobs=1)
    _add_sandbox_options(cluster)
    cluster.set_defaults(func=cmd_slurm)

    rel = commands.add_parser("release", help="write the student copy of the course (no solutions, no hidden checks)")
    rel.add_argument("--out", type=Path, required=True, metavar="DIR", help="a new or empty directory")
    rel.set_defaults(func=cmd_release)

    linter = commands.add_parser(
        "lint-course",
        help="for course authors: check that the catalog, the checks, "
        "the stubs and the solutions name one another correctly",
    )
    linter.set_defaults(func=cmd_lint_course)

    maker = commands.add_parser(
        "new-exercise",
        help="for course authors: a new exercise, every piece written and working, numbered after the last",
    )
    maker.add_argument("name", metavar="NAME", help="lower-case words joined by '_' (the id becomes exNN_NAME)")
    maker.add_argument("--title", metavar="TEXT", help="the title students see (default: from the name)")
    maker.set_defaults(func=cmd_new_exercise)

    grades = commands.add_parser(
        "export-grades",
        help="a gradebook's totals as the CSV Canvas or Moodle imports, students found in the LMS's roster",
        description="Write the grade-import CSV of Canvas (Gradebook > Import) or Moodle (Grade administration > "
        "Import > CSV file) from a gradebook and the LMS's own export of its students. A submission of no "
        "student, of several, or two of one student are named and left out (exit status 1).",
    )
    grades.add_argument(
        "gradebook", type=Path, metavar="GRADEBOOK", help="a `grader grade --out` folder, or a gradebook.csv"
    )
    grades.add_argument(
        "--roster",
        type=Path,
        required=True,
        metavar="CSV",
        help="the LMS's export: Canvas's Gradebook export; Moodle's grade export or participants download "
        "(a `submission` column, if added, names each student's submission)",
    )
    grades.add_argument("--format", choices=lms_export.FORMATS, required=True, help="the LMS that imports the file")
    grades.add_argument("--out", type=Path, required=True, metavar="FILE", help="the CSV to import")
    grades.add_argument(
        "--assignment",
        default="Distributed training exercises",
        metavar="NAME",
        help="the grade column: Canvas's assignment (its `NAME (id)` column of the roster where there is one) or "
        "Moodle's grade item (default: %(default)s)",
    )
    grades.set_defaults(func=cmd_export_grades)

    pages = commands.add_parser(
        "feedback",
        help="write each submission's feedback page for its student again, from a run's grades.jsonl",
        description="Write OUT/<submission>/feedback.html and feedback.md (`grader grade` writes both) from "
        "OUT/grades.jsonl: each check's verdict, points, message, hint and the student's traceback. No review "
        "mark, tamper note or similarity finding is ever in a page.",
    )
    pages.add_argument("outs", nargs="+", type=Path, metavar="OUT", help="a `grader grade --out` folder (a shard's)")
    pages.add_argument("--format", choices=feedback.FORMATS, default="both", help="the pages to write (default both)")
    pages.add_argument(
        "--hidden-visibility",
        choices=gradescope.HIDDEN_VISIBILITIES,
        default="hidden",
        help="as given to `grader grade`: hidden (the default) leaves hidden checks out of the pages",
    )
    pages.set_defaults(func=cmd_feedback)


def _graded(command: str, paths: list[Path]) -> list[Path]:
    """The paths that are submissions; each one left out (a tool's leftover: .DS_Store, __MACOSX...) is named on
    stderr with the reason, never dropped silently. A name starting with a dot is graded like any other."""
    kept = []
    for path in paths:
        reason = leftover(path)
        if reason is None:
            kept.append(path)
        else:
            print(f"grader {command}: left out {one_line(path.name, 200)}: {reason}, not a submission", file=sys.stderr)
    return kept


def cmd_grade(args: argparse.Namespace) -> int:
    submissions = _graded("grade", args.submissions)
    if not submissions:
        raise InstructorError("nothing to grade: every path given is a leftover of a tool, not a submission")
    plan = dataclasses.replace(GradingPlan.from_args(args, hidden=True), seed=args.seed)
    return _grade_batch(args, plan, submissions).status


@dataclasses.dataclass(frozen=True)
class _Graded:
    """What a batch came to, for `grade` (its exit status) and `regrade` (its grades, to compare)."""

    status: int
    grades: list[SubmissionGrade]
    record: manifest.Manifest
    matches: roster.Matches | None


def _batch_options(args: argparse.Namespace, submissions: list[Path]) -> manifest.BatchOptions:
    """What batch.json records of the command line for a regrade: paths made absolute, as given otherwise."""
    return manifest.BatchOptions(
        paths=tuple(str(path.absolute()) for path in submissions),
        world_size=args.world_size,
        deadline=args.deadline,
        timeout=args.timeout,
        jobs=args.jobs,
        backend=args.backend,
        sandbox=args.sandbox,
        hidden_visibility=args.hidden_visibility,
        launcher=args.launcher,
        roster=None if args.roster is None else str(args.roster.absolute()),
    )


def _grade_batch(
    args: argparse.Namespace, plan: GradingPlan, submissions: list[Path], gradebook_written: bool = True
) -> _Graded:
    """Grade `submissions` as `grader grade` does, into `args.out`: batch.json (the seed drawn here, once, when
    the plan has none), the results, the grade log, the class report and, when `gradebook_written`, the
    gradebook with OUT's overrides applied. `grade` and `regrade` both come here."""
    if args.launcher == "portable" and args.sandbox != "none":
        raise InstructorError(
            "--launcher portable grades without a sandbox only (--no-sandbox, trusted code): "
            "the sandbox is Linux-only and starts ranks with the fork launcher"
        )
    names = [name_of(path) for path in submissions]
    folders = [gradescope.results_folder(name) for name in names]
    repeated = sorted({f for f in folders if folders.count(f) > 1})
    if repeated:
        raise InstructorError(f"two submissions would share the results folder {repeated[0]!r}: rename one")
    catalog = course_catalog(args.exercises)
    students = _roster(args.roster) if args.roster else None
    paths = shard.select(submissions, args.shard) if args.shard else submissions
    if plan.seed is None:
        plan = dataclasses.replace(plan, seed=secrets.randbelow(SEEDS))  # one for the batch, recorded for a regrade
    args.out.mkdir(mode=0o700, parents=True, exist_ok=True)  # results are nobody else's business
    ids = tuple(e.id for e in catalog.exercises)
    record = manifest.Manifest(
        tuple(names), ids, args.shard, plan.seed, _batch_options(args, submissions), provenance.of_batch(catalog)
    )
    record.write(args.out / manifest.FILENAME)
    matches = None
    if students is not None:  # every submission named on the command line, not only a shard's
        matches = students.match_all(names)
        roster.write_matches(args.out / roster.FILENAME, matches, students)
    try:
        sandbox = open_sandbox(args.sandbox, catalog.root, args.out, gpu=args.backend == "nccl", submissions=paths)
    except SandboxError as exc:
        raise InstructorError(str(exc)) from exc
    if sandbox is None:
        print(NO_SANDBOX_WARNING, file=sys.stderr)
    try:
        status, grades = _grade(args, catalog, plan, sandbox, paths, names, matches, record, gradebook_written)
        return _Graded(status, grades, record, matches)
    finally:
        if sandbox is not None:
            sandbox.close()
        for line in matches.lines() if matches else []:  # said last, where it is read
            print(f"grader {args.command}: roster: {one_line(line, 2000)}", file=sys.stderr)


def _roster(path: Path) -> roster.Roster:
    try:
        return roster.read_roster(path)
    except roster.RosterError as exc:
        raise InstructorError(str(exc)) from exc


def _overrides(out: Path) -> dict[tuple[str, str], overrides.Override]:
    try:
        return overrides.read_overrides(out / overrides.FILENAME)
    except overrides.OverrideError as exc:
        raise InstructorError(str(exc)) from exc


def _grade(
    args: argparse.Namespace,
    catalog: Catalog,
    plan: GradingPlan,
    sandbox: SandboxSet | None,
    paths: list[Path],
    names: list[str],
    matches: roster.Matches | None,
    record: manifest.Manifest,
    gradebook_written: bool,
) -> tuple[int, list[SubmissionGrade]]:
    """Plan, grade, sinks: each submission's results.json, gradebook row, grade log line and progress line as
    it is graded (in that order: a results.json that fails is noted in the row), then the class report."""
    title = "Class report" + (f", shard {args.shard}" if args.shard else "")
    report_path = args.out / class_report.FILENAME
    report = class_report.ClassReport(
        report_path,
        catalog,
        title,
        [name_of(p) for p in paths],
        time.monotonic(),
        lambda names: feedback.links(report_path, [args.out], names),
    )
    stamp = provenance.stamp(record.provenance, record.seed) if record.provenance else None
    book = args.out / gradebook.FILENAME
    overridden = _overrides(args.out)
    student_ids = matches.student_ids() if matches else None
    sinks: list[Sink[SubmissionGrade]] = [
        gradescope.ResultsFiles(args.out, catalog, args.hidden_visibility, stamp),
        feedback.FeedbackPages(args.out, catalog, args.hidden_visibility),
        *([gradebook.Gradebook(book, catalog, student_ids, overridden)] if gradebook_written else []),
        grade_log.GradeLog(args.out / grade_log.FILENAME, stamp),
        BatchProgress(len(paths)),
        report,
    ]
    if not gradebook_written:
        book.unlink(missing_ok=True)  # an earlier run's would pass for this one's
    with closing(sinks):
        grades = grade_batch(catalog, paths, plan, sandbox, sinks) if paths else []
    if args.shard:
        print(f"shard {args.shard}: {len(paths)} of the {len(names)} submission(s)")
    each = f" ({report.seconds / len(grades):.2f}s each)" if grades else ""
    print(
        f"graded {len(grades)} submission(s) in {report.seconds:.1f}s{each}: "
        f"{book if gradebook_written else 'no gradebook'}, {report.written or 'no class report'}"
    )
    if overridden and gradebook_written:
        print(f"{len(overridden)} score override(s) of {args.out / overrides.FILENAME} applied to the gradebook")
    marked = [g.name for g in grades if g.review]
    if marked:  # stdout: on Gradescope, the autograder's output, which only instructors see
        print(
            f"{len(marked)} submission(s) marked for review by the tamper scan, scores unchanged (the gradebook's "
            f"review column, the class report): {one_line(', '.join(marked), 500)}"
        )
    unwritten = [g.name for g in grades if any(n.startswith(gradescope.UNWRITTEN) for n in g.notes)]
    if unwritten:
        print(
            f"grader: {len(unwritten)} results.json could not be written (see the gradebook's problem column): "
            f"{one_line(', '.join(unwritten), 500)}",
            file=sys.stderr,
        )
    no_pages = [g.name for g in grades if any(n.startswith(feedback.UNWRITTEN) for n in g.notes)]
    if no_pages:
        print(
            f"grader: {len(no_pages)} submission(s)' feedback pages could not be written (see the gradebook's "
            f"problem column): {one_line(', '.join(no_pages), 500)}",
            file=sys.stderr,
        )
    return (0 if report.written is not None and not unwritten and not no_pages else 1), grades


def _manifest_of(out: Path) -> manifest.Manifest:
    path = out / manifest.FILENAME
    if not path.is_file():
        raise InstructorError(f"{out} has no {manifest.FILENAME}: give a `grader grade --out` folder")
    try:
        return manifest.read_manifest(path)
    except manifest.ManifestError as exc:
        raise InstructorError(str(exc)) from exc


def _regradable(old: Path) -> manifest.Manifest:
    """OLD_OUT's batch.json, with what a regrade needs (a sentence naming what an older grader did not record)."""
    record = _manifest_of(old)
    if record.seed is None or record.options is None:
        what = "its seed" if record.seed is None else "its options and submission paths"
        raise InstructorError(
            f"{old} was graded by an older grader that did not record {what}: a regrade cannot grade it the same "
            "way; grade its submissions again with `grader grade`"
        )
    return record


def _log_of(out: Path) -> list[SubmissionGrade]:
    path = out / grade_log.FILENAME
    if not path.is_file():
        raise InstructorError(f"{out} has no {grade_log.FILENAME}: no grades to compare with or override")
    try:
        return grade_log.read_grades(path)
    except grade_log.GradeLogError as exc:
        raise InstructorError(str(exc)) from exc


def cmd_regrade(args: argparse.Namespace) -> int:
    old, new = args.old_out, args.out
    if new.resolve() == old.resolve():
        raise InstructorError(f"--out {new} is {old} itself: a regrade writes another folder and leaves the old one")
    record = _regradable(old)
    options = record.options
    assert options is not None  # _regradable says so
    gone = [path for path in options.paths if not os.path.lexists(path)]
    if gone:
        raise InstructorError(
            f"{len(gone)} submission(s) {old} graded no longer exist: {_listed(gone)}; put them back (a regrade "
            "grades the same files)"
        )
    before = _log_of(old)
    overridden = _overrides(old)
    new.mkdir(mode=0o700, parents=True, exist_ok=True)
    overrides.write_overrides(new / overrides.FILENAME, overridden.values())  # carried: the gradebook applies them
    again = argparse.Namespace(
        command="regrade",
        submissions=[Path(path) for path in options.paths],
        out=new,
        exercises=record.exercises,
        shard=record.shard,
        roster=None if options.roster is None else Path(options.roster),
        world_size=options.world_size,
        deadline=options.deadline,
        timeout=options.timeout,
        jobs=options.jobs,
        backend=options.backend,
        sandbox=args.sandbox or options.sandbox,
        hidden_visibility=options.hidden_visibility,
        launcher=options.launcher,
    )
    plan = dataclasses.replace(GradingPlan.from_args(again, hidden=True), seed=record.seed)
    graded = _grade_batch(again, plan, again.submissions, gradebook_written=args.accept)
    assert graded.record.provenance is not None  # written by this grader
    diff = regrade.compare(
        before, graded.grades, overridden, provenance.changes(record.provenance, graded.record.provenance)
    )
    markdown, table = regrade.write(new, diff, old)
    print(f"regrade: {len(diff.changes)} check result(s) changed in {diff.rows} submission(s): {markdown}, {table}")
    for said in diff.provenance:
        print(f"regrade: since {old}: {one_line(said, 300)}")
    for flag in diff.flagged:
        print(
            f"regrade: override kept, {regrade.FLAG}: {one_line(flag.override.submission, 200)} "
            f"{flag.override.exercise} graded {flag.old_score:g} -> {flag.new_score:g}, "
            f"override {flag.override.score:g}"
        )
    if args.accept:
        print(f"{diff.rows} row(s) changed: {new / gradebook.FILENAME} written")
    else:
        print(f"{diff.rows} row(s) would change; rerun with --accept to write {new / gradebook.FILENAME}")
    return graded.status


def _exercise_of(key: str, exercises: list[str]) -> str:
    """The graded exercise `key` names: its id, its number, or a unique start of its id."""
    if key in exercises:
        return key
    number = f"ex{int(key):02d}_" if key.isdigit() else None
    found = [e for e in exercises if e.startswith(key) or (number is not None and e.startswith(number))]
    if len(found) != 1:
        raise InstructorError(
            f"no graded exercise {key!r} (or several); the exercises graded are: {', '.join(exercises)}"
        )
    return found[0]


def _student_ids(book: Path, grades: list[SubmissionGrade]) -> dict[str, str] | None:
    """Each graded submission's student_id in the gradebook (None when it has no such column): kept when the
    gradebook is rewritten. Its rows hold names as CSV cells, so each name is looked up as its cell."""
    try:
        header, rows = gradebook.read(book)
    except gradebook.MergeError as exc:
        raise InstructorError(str(exc)) from exc
    if "student_id" not in header:
        return None
    column = header.index("student_id")
    by_cell = {row[0]: row[column] for row in rows if len(row) > column}
    cells = {g.name: csv_cell(g.name, gradebook.CELL_LIMIT) for g in grades}
    return {name: by_cell[cell] for name, cell in cells.items() if cell in by_cell}


def cmd_override(args: argparse.Namespace) -> int:
    record = _manifest_of(args.out)
    grades = _log_of(args.out)
    grade = next((g for g in grades if g.name == args.submission), None)
    if grade is None:
        raise InstructorError(
            f"no submission {one_line(args.submission, 200)!r} in {args.out}; its submissions are: "
            f"{_listed([g.name for g in grades])}"
        )
    exercises = sorted({r.exercise for r in grade.results})
    exercise = _exercise_of(args.exercise, exercises)
    overridden = _overrides(args.out)
    key = overrides.key_of(grade.name, exercise)
    points = sum(r.max_points for r in grade.results if r.exercise == exercise)
    if args.remove:
        if args.score is not None or args.note is not None:
            raise InstructorError("--remove takes no SCORE and no --note: it gives the graded score back")
        if overridden.pop(key, None) is None:
            raise InstructorError(f"{one_line(grade.name, 200)} has no override of {exercise} to remove")
        said = f"override of {exercise} removed: graded score {grade.exercise_score(exercise):g} again"
    else:
        if args.score is None or not (args.note or "").strip():
            raise InstructorError("an override needs a SCORE and a --note saying why")
        if not 0 <= args.score <= points:
            raise InstructorError(f"{args.score:g} is not a score of {exercise}: give one from 0 to {points:g}")
        overridden[key] = overrides.Override(
            *key,
            args.score,
            args.note.strip(),
            datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            os.environ.get("USER") or "unknown",
        )
        said = f"{exercise}: {grade.exercise_score(exercise):g} -> {args.score:g}"
    overrides.write_overrides(args.out / overrides.FILENAME, overridden.values())
    book = args.out / gradebook.FILENAME
    if book.is_file():
        gradebook.write_gradebook(book, record.exercises, grades, _student_ids(book, grades), overridden)
        where = f"{book} rewritten"
    else:
        where = f"no gradebook in {args.out} (a regrade not accepted?): the override applies when one is written"
    print(f"{one_line(grade.name, 200)} {said}; {args.out / overrides.FILENAME}; {where}")
    return 0


def _grades_of(sources: list[Path]) -> list[SubmissionGrade] | None:
    """Every source's grades.jsonl, or None when one has none (a gradebook from elsewhere)."""
    grades: list[SubmissionGrade] = []
    for source in sources:
        log = (source if source.is_dir() else source.parent) / grade_log.FILENAME
        if not log.is_file():
            return None
        try:
            grades += grade_log.read_grades(log)
        except grade_log.GradeLogError as exc:
            raise InstructorError(str(exc)) from exc
    return grades


def _write_class_report(
    path: Path, grades: list[SubmissionGrade], sources: list[Path], plots: bool | None = None
) -> None:
    """The report of grades from any runs, over the exercises they were graded on, linking the runs' pages."""
    graded = {r.exercise for g in grades for r in g.results}
    catalog = course_catalog()
    catalog = dataclasses.replace(catalog, exercises=tuple(e for e in catalog.exercises if e.id in graded))
    outs = [source if source.is_dir() else source.parent for source in sources]
    pages = feedback.links(path, outs, [g.name for g in grades])
    class_report.write_report(path, catalog, grades, "Class report", plots=plots, feedback=pages, keep_link=True)


def cmd_report(args: argparse.Namespace) -> int:
    missing = [str(s) for s in args.sources if not (s / grade_log.FILENAME).is_file()]
    if missing:
        raise InstructorError(f"no {grade_log.FILENAME} in {', '.join(missing)}: give `grader grade --out` folders")
    grades = _grades_of(args.sources) or []
    names = [g.name for g in grades]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})
        raise InstructorError(f"submission {twice[0]!r} is in more than one of the runs: report them apart")
    _write_class_report(args.out, grades, args.sources, plots=False if args.no_plots else None)
    print(f"class report of {len(grades)} submission(s): {args.out}")
    return 0


def cmd_feedback(args: argparse.Namespace) -> int:
    catalog = course_catalog()
    written = 0
    for out in args.outs:
        try:
            written += len(feedback.rewrite(out, catalog, args.hidden_visibility, args.format))
        except feedback.FeedbackError as exc:
            raise InstructorError(str(exc)) from exc
    hidden = "hidden checks left out" if args.hidden_visibility == "hidden" else "hidden checks shown"
    print(f"{written} feedback page(s) written under {len(args.outs)} `grader grade` folder(s) ({hidden})")
    return 0


def cmd_similarity(args: argparse.Namespace) -> int:
    given = _graded("similarity", args.submissions)
    if not given:
        raise InstructorError(
            f"name the submissions {args.out} graded: `grader similarity OUT SUBMISSION...` (a results folder "
            "keeps no code)"
        )
    if args.jobs < 1:
        raise InstructorError("-j/--jobs must be at least 1")
    findings = similarity.run(args.out, given, args.archive, course_catalog(), args.threshold, args.jobs)
    linked = similarity.link_report(args.out, findings)
    flagged = [e.exercise for e in findings.exercises if e.flagged]
    print(
        f"similarity: {findings.flagged} pair(s) flagged in {len(flagged)} exercise(s) of {findings.submissions} "
        f"submission(s), {len(findings.not_compared)} not compared, in {findings.seconds:.1f}s: "
        f"{args.out / similarity.FILENAME} ({linked}); no score changed"
    )
    return 0


def cmd_gradebook_merge(args: argparse.Namespace) -> int:
    try:
        result = gradebook.merge(args.sources, args.out)
    except gradebook.MergeError as exc:
        raise InstructorError(str(exc)) from exc
    print(f"merged {result.rows} submission(s) from {len(args.sources)} gradebook(s) into {result.path}")
    grades = _grades_of(args.sources)
    if grades is not None:
        report = args.report or args.out.with_name(class_report.FILENAME)
        _write_class_report(report, grades, args.sources)
        print(f"class report: {report}")
    else:
        print("no class report: a source has no grades.jsonl beside its gradebook")
    for source in result.unaccounted:
        print(
            f"note: {source} has no {manifest.FILENAME}: which submissions it should hold is unknown", file=sys.stderr
        )
    if result.missing_shards:
        print(f"missing shard(s): {', '.join(result.missing_shards)} (no output of theirs was given)", file=sys.stderr)
    if result.missing:
        print(
            f"missing {len(result.missing)} submission(s), named on the command line but in no gradebook: "
            f"{', '.join(map(one_line, result.missing))}",
            file=sys.stderr,
        )
    return 0 if result.complete else 1


def cmd_gradescope(args: argparse.Namespace) -> int:
    torch_version = args.torch or gradescope_bundle.installed_torch()
    if not torch_version:
        raise InstructorError("torch is not installed here: say which version the autograder installs with --torch")
    catalog = course_catalog(args.exercises)
    options = gradescope_bundle.BundleOptions(torch_version=torch_version, hidden_visibility=args.hidden_visibility)
    try:
        path = gradescope_bundle.build(catalog, args.out, Path(__file__).resolve().parents[1], options)
    except ReleaseError as exc:
        raise InstructorError(str(exc)) from exc
    hidden = sum(c.visibility == "hidden" for e in catalog.exercises for c in e.checks)
    print(
        f"{path}: {len(catalog.exercises)} exercise(s), {hidden} hidden check(s), torch {torch_version} (CPU); "
        "upload it as the assignment's autograder (Configure Autograder, zip file upload)"
    )
    return 0


def _slurm_job(args: argparse.Namespace, catalog: Catalog, count: int) -> slurm.SlurmJob:
    backend = args.backend or ("nccl" if args.gpus_per_task > 0 else "gloo")
    widest = args.world_size or max(w for e in catalog.exercises for c in e.checks for w in c.world_sizes)
    if backend == "nccl" and args.gpus_per_task < widest:
        raise InstructorError(
            f"nccl needs one GPU per rank and the checks run up to {widest} ranks: ask for "
            f"--gpus-per-task {widest}, or grade at fewer with --world-size"
        )
    shards = args.shards or slurm.default_shards(count)
    options = [
        "--backend",
        backend,
        "-j",
        str(args.jobs),
        "--timeout",
        f"{args.timeout:g}",
        "--deadline",
        f"{args.deadline:g}",
        "--seed",  # one for the class: every shard grades on the same random inputs
        str(secrets.randbelow(SEEDS)),
    ]
    if args.world_size:
        options += ["--world-size", str(args.world_size)]
    if args.exercises:
        options += ["--exercises", ",".join(e.id for e in catalog.exercises)]
    if args.roster:
        options += ["--roster", str(args.roster.resolve())]
    if args.sandbox == "none":
        options.append("--no-sandbox")
    elif args.sandbox != "auto":  # auto is grade's default: left out, the tasks are as sandboxed as a plain grade
        options += ["--sandbox", args.sandbox]
    limit = slurm.time_limit(count, shards, args.timeout, args.jobs)
    if args.time:
        parts = args.time.split(":")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise InstructorError(f"--time {args.time}: write it as HH:MM:SS")
        limit = int(parts[0]) * 3600 + int(parts[1]) * 60 + int(parts[2])
    return slurm.SlurmJob(
        submissions_dir=args.submissions_dir.resolve(),
        results_dir=args.results.resolve(),
        course=catalog.root,
        shards=shards,
        gpus_per_task=args.gpus_per_task,
        cpus_per_task=args.cpus_per_task,
        time_limit_s=limit,
        grade_options=tuple(options),
        partition=args.partition,
        account=args.account,
        grader_bin=slurm.grader_bin(),
    )


def cmd_slurm(args: argparse.Namespace) -> int:
    check_counts(args)
    if not args.submissions_dir.is_dir():
        raise InstructorError(f"{args.submissions_dir} is not a folder of submissions")
    count = len(_graded("slurm", sorted(args.submissions_dir.iterdir())))
    if count == 0:
        raise InstructorError(f"{args.submissions_dir} holds no submissions")
    if args.shards is not None and args.shards < 1:
        raise InstructorError("--shards must be at least 1")
    if args.gpus_per_task < 0 or args.cpus_per_task < 1:
        raise InstructorError("--gpus-per-task must be 0 or more and --cpus-per-task at least 1")
    if any(c.isspace() for c in str(args.results.resolve())):
        raise InstructorError(
            f"{args.results}: Slurm's #SBATCH --output cannot hold a path with spaces: choose another"
        )
    if args.roster:
        _roster(args.roster)  # the tasks read it again; a roster they cannot read is refused now, not in every log
    job = _slurm_job(args, course_catalog(args.exercises), count)
    try:
        script = slurm.render_job(job, args.out)
    except UnsafeValue as exc:
        raise InstructorError(f"the job script cannot be written safely: {exc}") from exc
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(script)
    if args.sandbox == "none":
        print(NO_SANDBOX_WARNING, file=sys.stderr)  # said now, not only in the tasks' logs
    (job.results_dir / "logs").mkdir(parents=True, exist_ok=True)  # Slurm writes task logs there, and never makes it
    print(
        f"{args.out}: {count} submission(s) in {job.shards} array task(s), {slurm.hms(job.time_limit_s)} each; "
        f"submit with: sbatch {args.out}"
    )
    print(f"the tasks grade with the course at {job.course} ({course_origin(job.course)})")
    return 0


def cmd_release(args: argparse.Namespace) -> int:
    catalog = course_catalog()
    try:
        written = release(catalog, args.out, Path(__file__).resolve().parents[1])
    except ReleaseError as exc:
        raise InstructorError(str(exc)) from exc
    print(f"student copy written to {args.out}: {', '.join(p.name for p in written)}")
    return 0


def cmd_lint_course(args: argparse.Namespace) -> int:
    """Each authoring mistake as `file:line: what` and exit 1; one line and exit 0 when there is none."""
    root = course_root()
    try:
        problems, summary = course_lint.lint(root)
    except Exception as exc:  # a course the lint cannot read is a finding too, never a traceback
        problems, summary = [f"{root}: the lint could not read the course: {type(exc).__name__}: {exc}"], ""
    for problem in problems:
        print(problem)
    if problems:
        print(f"{len(problems)} problem(s) in the course at {root}", file=sys.stderr)
        return 1
    print(summary)
    return 0


def cmd_new_exercise(args: argparse.Namespace) -> int:
    root = course_root()
    try:
        made = new_exercise(root, args.name, args.title)
    except NewExerciseError as exc:
        raise InstructorError(str(exc)) from exc
    print(f"{made.exercise_id} written: {', '.join(str(path) for path in made.written)}")
    print(
        f"next: `grader lint-course`, `grader check --solutions {made.exercise_id}`, then make it your own "
        '(docs/INSTRUCTORS.md, "A new exercise")'
    )
    return 0


def cmd_export_grades(args: argparse.Namespace) -> int:
    try:
        result = lms_export.export(args.gradebook, args.roster, args.format, args.out, args.assignment)
    except lms_export.ExportError as exc:
        raise InstructorError(str(exc)) from exc
    print(f"{result.written} student(s) written to {result.path}, out of {result.points} points")
    if result.ungraded:
        print(
            f"{len(result.ungraded)} roster student(s) with no submission, not in the file: {_listed(result.ungraded)}"
        )
    problems = [
        ("in no roster row", result.unknown),
        ("of several roster students", result.ambiguous),
        ("several submissions of one student", result.twice),
    ]
    for what, found in problems:
        for entry in found:
            print(f"grader export-grades: left out, {what}: {one_line(entry, 300)}", file=sys.stderr)
    if not result.complete:
        print(
            "grader export-grades: name the submissions as the roster's ids, or add a `submission` column to the "
            "roster, and export again",
            file=sys.stderr,
        )
    return 0 if result.complete else 1


def _listed(names: list[str], most: int = 10) -> str:
    more = f" and {len(names) - most} more" if len(names) > most else ""
    return "; ".join(one_line(name, 100) for name in names[:most]) + more


ERRORS = (InstructorError, NotebookError, similarity.SimilarityError)
