"""Grade many submissions at once, in parallel, each within its own time limit.

Parallelism is the engine's own: `jobs` worker threads, each borrowing one warm Engine (zygote) from
a pool for a whole submission and giving it back for the next. Ranks are processes forked by the
zygotes, so the threads only wait on pipes; warm engines are reused across submissions, which is
what makes a batch cheap (pytest-xdist would start a fresh interpreter and torch per worker and
report through pytest, not into results.json). A submission that hangs, crashes or cannot be read
ends with zero points for what could not run and a message; the batch always goes on.
"""

from __future__ import annotations

import queue
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.catalog import Catalog
from grader.checks.api import CheckFailed, Verdict
from grader.checks.runner import ALL_CHECKS, CheckResult, GradeOptions, grade_exercise, not_run
from grader.engine import Engine, Job, RunResult
from grader.instructor import submissions
from grader.session import BackendProbe

ENGINE_FAILURE = "the grader could not run the ranks"


@dataclass
class SubmissionGrade:
    name: str
    results: list[CheckResult]
    seconds: float
    problem: str = ""  # about the submission as a whole: unreadable, out of time

    @property
    def score(self) -> float:
        return sum(r.points for r in self.results)

    @property
    def max_score(self) -> float:
        return sum(r.max_points for r in self.results)

    def exercise_score(self, exercise_id: str) -> float:
        return sum(r.points for r in self.results if r.exercise == exercise_id)


@dataclass(frozen=True)
class BatchOptions:
    jobs: int = 2
    timeout: float = 120.0  # seconds for a whole submission
    deadline: float = 10.0  # seconds for one run of the ranks
    world_sizes: tuple[int, ...] | None = None  # None: the catalog's
    backend: str = "gloo"
    visibilities: frozenset[str] = field(default=ALL_CHECKS)


class _Budget:
    """An engine that never lets a run outlast what is left of its submission's time limit."""

    def __init__(self, engine: Engine, seconds: float) -> None:
        self._engine = engine
        self._seconds = seconds
        self._ends = time.monotonic() + seconds

    def new_scratch(self) -> str:
        return self._engine.new_scratch()

    def discard_scratch(self, path: str) -> None:
        self._engine.discard_scratch(path)

    @property
    def left(self) -> float:
        return self._ends - time.monotonic()

    @property
    def used_up(self) -> str:
        return f"not run: the submission used up its time limit of {self._seconds:g}s"

    def run(self, job: Job) -> RunResult:
        if self.left <= 0:
            raise CheckFailed(Verdict("failed", self.used_up))
        return self._engine.run(replace(job, deadline=min(job.deadline, self.left)))


class _EnginePool:
    """Warm engines lent to one submission at a time; one that broke is replaced, never lent again."""

    def __init__(self, size: int, preload: list[str]) -> None:
        self._preload = preload
        self._idle: queue.Queue[Engine] = queue.Queue()
        self._all: list[Engine] = []
        for _ in range(size):
            self._idle.put(self._new())

    def _new(self) -> Engine:
        engine = Engine(preload=self._preload)
        engine.start()
        self._all.append(engine)
        return engine

    def borrow(self) -> Engine:
        return self._idle.get()

    def give_back(self, engine: Engine, results: Sequence[CheckResult]) -> None:
        """A zygote that died (a student may kill its parent) fails every later run: replace it."""
        if any(r.status == "error" and r.message.startswith(ENGINE_FAILURE) for r in results):
            engine.close()
            engine = self._new()
        self._idle.put(engine)

    def close(self) -> None:
        for engine in self._all:
            engine.close()


def _grade_files(engine: Engine, catalog: Catalog, submission: submissions.Submission,
                 options: BatchOptions, probe: BackendProbe) -> tuple[list[CheckResult], str]:
    grading = GradeOptions(world_sizes=options.world_sizes, backend=options.backend, deadline=options.deadline,
                           visibilities=options.visibilities)
    engine.wait_ready()  # the engine's warm-up is not the submission's time
    budget = _Budget(engine, options.timeout)
    results: list[CheckResult] = []
    for exercise in catalog.exercises:
        path = submission.folder / exercise.file
        sizes = options.world_sizes or tuple(w for c in exercise.checks for w in c.world_sizes)
        if exercise.id in submission.problems:
            results += not_run(exercise, grading, "error", submission.problems[exercise.id])
        elif not path.is_file():
            results += not_run(exercise, grading, "error", f"file missing: {exercise.file} is not in the submission")
        elif (backend_problem := probe.problem(engine, sizes)) is not None:
            # Gradescope has no "skipped": these become failed tests with 0 points and the reason
            results += not_run(exercise, grading, "skipped", backend_problem)
        elif budget.left <= 0:
            results += not_run(exercise, grading, "failed", budget.used_up)
        else:
            results += grade_exercise(budget, exercise, path, grading)  # type: ignore[arg-type]
    return results, budget.used_up.removeprefix("not run: ") if budget.left <= 0 else ""


def _not_graded(catalog: Catalog, options: BatchOptions, message: str) -> list[CheckResult]:
    grading = GradeOptions(world_sizes=options.world_sizes, visibilities=options.visibilities)
    return [r for exercise in catalog.exercises for r in not_run(exercise, grading, "error", message)]


def grade_one(pool: _EnginePool, catalog: Catalog, path: Path, options: BatchOptions,
              probe: BackendProbe) -> SubmissionGrade:
    """Grade one submission; whatever goes wrong becomes its grade's message, never an exception."""
    started = time.monotonic()
    name = submissions.name_of(path)
    with tempfile.TemporaryDirectory(prefix="grader-submission-") as workdir:
        try:
            submission = submissions.prepare(path, catalog, Path(workdir))
        except submissions.SubmissionError as exc:
            return SubmissionGrade(name, _not_graded(catalog, options, str(exc)), 0.0, str(exc))
        engine = pool.borrow()
        results: list[CheckResult] = []
        try:
            results, problem = _grade_files(engine, catalog, submission, options, probe)
        except Exception as exc:  # the grader's own defect: this submission's grade says so, the batch goes on
            problem = f"internal grader error: {type(exc).__name__}: {exc}"
            results = _not_graded(catalog, options, problem + "\n" + traceback.format_exc())
        finally:
            pool.give_back(engine, results)
    return SubmissionGrade(name, results, time.monotonic() - started, problem)


def grade_batch(
    catalog: Catalog,
    paths: Sequence[Path],
    options: BatchOptions,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[SubmissionGrade], None] | None = None,
) -> list[SubmissionGrade]:
    """Grade every path with `options.jobs` warm engines; grades come back in the order of `paths`."""
    preload = [e.workers_module for e in catalog.exercises]
    workers = max(1, min(options.jobs, len(paths)))
    pool = _EnginePool(workers, preload)
    probe = BackendProbe(options.backend)

    def task(path: Path) -> SubmissionGrade:
        if on_start:
            on_start(submissions.name_of(path))
        return grade_one(pool, catalog, path, options, probe)

    grades: dict[Path, SubmissionGrade] = {}
    try:
        with ThreadPoolExecutor(max_workers=workers) as executor:
            futures = {executor.submit(task, path): path for path in paths}
            for future in as_completed(futures):
                grade = future.result()
                grades[futures[future]] = grade
                if on_done:
                    on_done(grade)
    finally:
        pool.close()
    return [grades[path] for path in paths]
