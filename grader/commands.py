"""The student's commands: list, check, hint, watch, reset, notebook build."""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import TypedDict

from grader import intake, notebook_source, pristine
from grader.catalog import Catalog, CatalogError, Exercise, course_catalog
from grader.engine import node
from grader.engine.cluster import Cluster, ClusterError
from grader.grading import ExerciseFiles
from grader.grading_engines import EngineContext, Grades, grade_into, open_check
from grader.judge.verdict import CheckResult
from grader.paths import NOTEBOOKS
from grader.plan import GradingPlan, PlanError
from grader.progress import Progress
from grader.report.json_report import STDOUT, write_results
from grader.report.sink import Collected, Sink
from grader.report.terminal import Terminal, TerminalSink

WATCH_INTERVAL_S = 0.5
STATUS_MEANINGS = {
    "not started": "the stub as handed out: every function still raises NotImplementedError",
    "not checked": "edited, never checked yet",
    "changed": "edited since its last check: `grader check` checks it again",
    "failing": "its last check failed",
    "passing": "its last check passed, and it has not been edited since",
}


# `check --path` is a check: the code it takes in runs as you, with your files, as your own exercises do
PATH_NO_SANDBOX_WARNING = (
    "WARNING: --path runs the code it checks without a sandbox, as you and with your files: check only code "
    "you trust (`grader grade` sandboxes each submission)."
)


class UsageError(Exception):
    """Bad input from the command line: reported in one line, exit code 2."""


def _catalog() -> Catalog:
    """The course's catalog, its stubs remembered while untouched (what `grader reset` restores)."""
    catalog = course_catalog()
    pristine.remember_stubs(catalog)
    return catalog


def _exercise_dir(catalog: Catalog, args: argparse.Namespace) -> Path:
    if getattr(args, "solutions", False):
        if not catalog.solutions_dir.is_dir():
            raise UsageError(
                "--solutions: the reference solutions are not part of a student copy of the course; "
                "`grader check EX` checks your own file"
            )
        return catalog.solutions_dir
    return catalog.stubs_dir


def _first_unfinished(catalog: Catalog, progress: Progress, skip: Sequence[Exercise] = ()) -> Exercise | None:
    for exercise in catalog.exercises:
        if exercise not in skip and progress.status(exercise, catalog.stub_path(exercise)) != "passing":
            return exercise
    return None


def _to_check(catalog: Catalog, progress: Progress) -> list[Exercise]:
    """What `grader check` checks with no argument: every exercise edited since its last check (a
    pass may have broken), then the first one not passing, all in one call."""
    edited = [e for e in catalog.exercises if progress.status(e, catalog.stub_path(e)) in ("changed", "not checked")]
    unfinished = _first_unfinished(catalog, progress, skip=edited)
    return edited + ([unfinished] if unfinished else [])


def _instructor_run(args: argparse.Namespace) -> bool:
    """The reference solutions are graded with the hidden checks too (a student copy has neither)."""
    return bool(getattr(args, "solutions", False))


class _ListRow(TypedDict):
    """One exercise in `grader list`, as printed and as written with --json."""

    id: str
    number: int
    title: str
    status: str


def cmd_list(args: argparse.Namespace) -> int:
    catalog = _catalog()
    progress = Progress(catalog.root)
    rows: list[_ListRow] = [
        {"id": e.id, "number": e.number, "title": e.title, "status": progress.status(e, catalog.stub_path(e))}
        for e in catalog.exercises
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    terminal = Terminal()
    styles = {"passing": "passed", "failing": "failed", "changed": "skipped", "not checked": "skipped"}
    for row in rows:
        status = row["status"]
        painted = terminal.paint(f"{status:<12}", styles[status]) if status in styles else f"{status:<12}"
        terminal.line(f"{row['number']:>3}  {painted}  {row['id']:<22} {row['title']}")
    done = sum(row["status"] == "passing" for row in rows)
    terminal.line(f"\n{done}/{len(rows)} exercises passing")
    for status in dict.fromkeys(row["status"] for row in rows):
        terminal.line(terminal.paint(f"  {status:<12} {STATUS_MEANINGS[status]}", "dim"))
    return 0


def _select(catalog: Catalog, args: argparse.Namespace, progress: Progress) -> list[Exercise]:
    if args.exercises:
        return [catalog.get(key) for key in args.exercises]
    if args.all or args.solutions or args.path:
        return list(catalog.exercises)
    return _to_check(catalog, progress)


def cmd_check(args: argparse.Namespace) -> int:
    if any(key.endswith(".ipynb") for key in args.exercises):
        return _check_notebooks(args)
    catalog = _catalog()
    exercises = _select(catalog, args, Progress(catalog.root))
    if args.path:
        return _check_handed_in(args, catalog, exercises)
    return _check(args, catalog, ExerciseFiles(_exercise_dir(catalog, args)), exercises)


def _check_handed_in(args: argparse.Namespace, catalog: Catalog, exercises: list[Exercise]) -> int:
    """`--path`: what a student hands in (a folder, a zip, a notebook), its files chosen as `grader grade` and
    the Gradescope autograder choose them (grader/intake.py), each choice said before the checks."""
    with tempfile.TemporaryDirectory(prefix="grader-path-") as workdir:
        try:
            files = intake.take_in(Path(args.path), catalog, Path(workdir) / "work")
        except intake.SubmissionError as exc:
            raise UsageError(f"--path: {exc}") from exc
        print(PATH_NO_SANDBOX_WARNING, file=sys.stderr)
        terminal = _check_terminal(args)
        for choice in files.choices:
            if any(e.id == choice.exercise for e in exercises):
                terminal.line(terminal.paint(f"graded: {choice}", "dim"))
        return _check(args, catalog, files, exercises)


def _check_notebooks(args: argparse.Namespace) -> int:
    """Notebooks are graded as the module their `exercise` cells make (functions in cells cannot be pickled)."""
    if not all(key.endswith(".ipynb") for key in args.exercises):
        raise UsageError("check notebooks on their own, without exercise names")
    catalog = course_catalog()
    with tempfile.TemporaryDirectory(prefix="grader-notebook-") as folder:
        extracted = [notebook_source.extract(Path(key), catalog, Path(folder)) for key in args.exercises]
        files = ExerciseFiles(Path(folder), source_maps={e.exercise.id: e.source_map for e in extracted})
        return _check(args, catalog, files, [e.exercise for e in extracted], lambda r: _record(catalog, extracted, r))


def _record(catalog: Catalog, extracted: Sequence[notebook_source.Extracted], results: Sequence[CheckResult]) -> None:
    """A notebook check counts in `grader list` as a check of its file does, for notebooks in the course
    (`grader notebook build` writes them there): one checked elsewhere, a submission say, is not the
    student's own progress."""
    progress = Progress(catalog.root)
    for notebook in extracted:
        saved = notebook.saved.resolve() if notebook.saved is not None else None
        if saved is not None and saved.is_relative_to(catalog.root.resolve()):
            mine = [r for r in results if r.exercise == notebook.exercise.id]
            progress.record_notebook(notebook.exercise, saved, notebook.code_hash, mine)


def _check_terminal(args: argparse.Namespace) -> Terminal:
    """The human report: on stderr when the JSON takes stdout (`--json -`), so a tool can parse stdout."""
    return Terminal(sys.stderr if args.json == STDOUT else None, verbose=args.verbose)


def _check(
    args: argparse.Namespace,
    catalog: Catalog,
    files: ExerciseFiles,
    exercises: list[Exercise],
    record: Callable[[Sequence[CheckResult]], None] | None = None,
) -> int:
    """Plan, grade, sinks; `record` keeps the results in progress (by default: for the stubs' own files)."""
    started = time.perf_counter()
    terminal = _check_terminal(args)
    if not exercises:
        terminal.line(terminal.paint("Every exercise passes its public checks. Well done.", "passed"))
        if args.json:
            write_results(Path(args.json), [], catalog)
        return 0
    if args.nnodes != 1 and args.launcher != "torchrun":
        raise UsageError("--nnodes is for --launcher torchrun")
    context = EngineContext(
        tuple(e.workers_module for e in catalog.exercises),
        warm=not args.no_warm,
        cluster=_torchrun_cluster(args) if args.launcher == "torchrun" else None,
    )
    plan = GradingPlan.from_args(args, hidden=_instructor_run(args))
    if record is None and files.folder == catalog.stubs_dir:
        record = _recorder(catalog, exercises, files.folder)
    titles = {e.id: e.title for e in exercises}
    sinks: list[Sink[CheckResult]] = [
        *([Collected(record)] if record is not None else []),
        TerminalSink(terminal, titles, lambda _: time.perf_counter() - started, plan.hidden),
        *([Collected[CheckResult](lambda done: write_results(Path(args.json), done, catalog))] if args.json else []),
    ]
    with open_check(plan, context) as grading:
        if args.verbose and grading.note:
            terminal.line(grading.note)
        results = grade_into(grading, files, exercises, sinks)
    return 0 if results and all(r.status in ("passed", "skipped") for r in results) else 1


def _recorder(catalog: Catalog, exercises: Sequence[Exercise], folder: Path) -> Callable[[Sequence[CheckResult]], None]:
    """Keeps each exercise's results in the student's progress (`grader list`)."""
    progress = Progress(catalog.root)

    def record(results: Sequence[CheckResult]) -> None:
        for exercise in exercises:
            progress.record(exercise, folder / exercise.file, [r for r in results if r.exercise == exercise.id])

    return record


def _cluster(args: argparse.Namespace) -> Cluster:
    if not (args.rdzv_endpoint and args.shared_dir):
        raise UsageError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT and --shared-dir DIR")
    try:
        return Cluster(args.nnodes, args.rdzv_endpoint, Path(args.shared_dir).resolve())
    except ClusterError as exc:
        raise UsageError(str(exc)) from exc


def _torchrun_cluster(args: argparse.Namespace) -> Cluster | None:
    """The nodes `--launcher torchrun` spreads ranks over; None: this node alone."""
    if args.nnodes < 1:
        raise UsageError("--nnodes must be at least 1")
    if args.nnodes == 1:
        return None
    cluster = _cluster(args)
    if args.world_size is not None:
        try:
            cluster.procs_per_node(args.world_size)
        except ClusterError as exc:
            raise UsageError(str(exc)) from exc
    return cluster


def cmd_node(args: argparse.Namespace) -> int:
    cluster = _cluster(args)
    try:
        node.follow(cluster, args.node_rank, lambda line: print(line, flush=True))
    except ClusterError as exc:
        raise UsageError(str(exc)) from exc
    return 0


def cmd_hint(args: argparse.Namespace) -> int:
    exercise = _catalog().get(args.exercise)
    terminal = Terminal()
    if args.number is not None:
        if not 1 <= args.number <= len(exercise.hints):
            raise UsageError(f"{exercise.id} has hints 1 to {len(exercise.hints)}")
        terminal.line(f"hint {args.number}: {exercise.hints[args.number - 1].text}")
        return 0
    terminal.heading(f"{exercise.id}: {exercise.title}")
    terminal.line("You will be able to:")
    for objective in exercise.objectives:
        terminal.line(f"  - {objective}")
    terminal.line()
    for number, hint in enumerate(exercise.hints, 1):
        terminal.line(f"hint {number}: {hint.text}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    catalog = _catalog()
    exercise = catalog.get(args.exercise)
    try:
        backup = pristine.reset(catalog, exercise)
    except pristine.ResetError as exc:
        raise UsageError(str(exc)) from exc
    saved = f"; your version is saved as {backup}" if backup else ""
    print(f"restored exercises/{exercise.file}{saved}")
    return 0


def cmd_notebook_build(args: argparse.Namespace) -> int:
    from grader import notebook_build  # nbformat: loaded only for the command that writes notebooks

    catalog = course_catalog()
    out = args.out if args.out is not None else catalog.root / NOTEBOOKS  # beside exercises/, where list looks
    written = notebook_build.build_all(catalog, out)
    print(f"{len(written)} notebook(s) written to {out}; open them with `jupyter lab {out}`")
    return 0


class Watcher:
    """`grader watch`: whichever exercise file is saved is checked again, under a timestamped line."""

    def __init__(self, catalog: Catalog, grading: Grades, terminal: Terminal, exercises: Sequence[Exercise]) -> None:
        self.catalog = catalog
        self.grading = grading
        self.terminal = terminal
        self.exercises = list(exercises)
        self.progress = Progress(catalog.root)
        self._seen = {e.id: _mtime(self._path(e)) for e in self.exercises}

    def _path(self, exercise: Exercise) -> Path:
        return self.catalog.stub_path(exercise)

    def check(self, exercises: Sequence[Exercise], why: str) -> None:
        self.terminal.separator(why)
        titles = {e.id: e.title for e in exercises}
        for exercise in exercises:
            path = self._path(exercise)
            sinks: list[Sink[CheckResult]] = [
                Collected(partial(self.progress.record, exercise, path)),
                TerminalSink(self.terminal, titles, lambda done: sum(r.seconds for r in done), hidden_included=False),
            ]
            grade_into(self.grading, ExerciseFiles(path.parent), [exercise], sinks)

    def poll(self) -> list[Exercise]:
        """Check the exercises whose file was saved since the last poll; returns them."""
        saved = []
        for exercise in self.exercises:
            mtime = _mtime(self._path(exercise))
            if mtime != self._seen[exercise.id]:
                self._seen[exercise.id] = mtime
                if mtime >= 0:
                    saved.append(exercise)
        if saved:
            self.check(saved, ", ".join(e.file for e in saved) + " saved")
        return saved


def cmd_watch(args: argparse.Namespace) -> int:
    catalog = _catalog()
    terminal = Terminal(verbose=args.verbose)
    watched = [catalog.get(args.exercise)] if args.exercise else list(catalog.exercises)
    plan = GradingPlan.from_args(args, hidden=False)
    with open_check(plan, EngineContext(tuple(e.workers_module for e in catalog.exercises))) as grading:
        watcher = Watcher(catalog, grading, terminal, watched)
        first = watched if args.exercise else _to_check(catalog, watcher.progress)
        if first:
            watcher.check(first, "start")
        what = f"exercises/{watched[0].file}" if args.exercise else "every file in exercises/"
        terminal.line(f"watching {what}: saving a file checks it again (Ctrl-C to stop)")
        while True:
            time.sleep(WATCH_INTERVAL_S)
            watcher.poll()


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return -1.0


ERRORS = (UsageError, PlanError, CatalogError, notebook_source.NotebookError)
