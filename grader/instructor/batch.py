"""Grade many submissions at once, in parallel, each within its own time limit, each in a sandbox.

Each submission's ranks run in a sandbox of their own (grader/sandbox; docs/SECURITY.md): a fresh
one per submission, whose zygote warms up while earlier submissions grade, and which is gone before
that submission's results are written. The judge runs here, in the grader's process; the trusted
references run on a separate engine that never loads student code, once per batch for all
submissions (the batch draws one seed, so they all ask for the same references). Without a sandbox
(`--no-sandbox`), warm engines are reused from one submission to the next instead.

Parallelism is the engine's own: `jobs` worker threads, each with one engine for a whole
submission. Ranks are processes forked by the zygotes, so the threads only wait on pipes
(pytest-xdist would start a fresh interpreter and torch per worker and report through pytest, not
into results.json). A submission that hangs, crashes or cannot be read ends with zero points for
what could not run and a message; the batch always goes on. Everything done for one submission, from
unpacking it to its grade, runs under one guard (`grade_one`): even a failure of the grader's own
(a parser's RecursionError, a MemoryError) costs that submission's row, and says so, and nothing else.
"""

from __future__ import annotations

import queue
import secrets
import shutil
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TypeVar

from grader.catalog import Catalog
from grader.engine import Engine, Job, Runner, RunResult, open_engine
from grader.grading import BackendProbe, grade_files
from grader.instructor import submissions
from grader.judge.api import CheckFailed, References, Verdict
from grader.judge.runner import ALL_CHECKS, ENGINE_FAILURE, GradeOptions, load_checks, not_run
from grader.judge.verdict import CheckResult
from grader.report.inert import one_line
from grader.sandbox import SandboxSet

T = TypeVar("T")
INTERNAL_ERROR = "internal grader error"  # opens the message of a failure of the grader's, not of the submission


@dataclass
class SubmissionGrade:
    name: str
    results: list[CheckResult]
    seconds: float
    problem: str = ""  # about the submission as a whole: unreadable, out of time
    notes: list[str] = field(default_factory=list)  # which file was graded, where the submission held several

    @property
    def problem_column(self) -> str:
        """What the gradebook's problem column says: the problem, then the notes."""
        return "; ".join(filter(None, [self.problem, *self.notes]))

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
    seed: int | None = None  # the batch's random inputs; None: drawn once for the batch
    launcher: str | None = None  # engines outside a sandbox: "fork" or "portable"; None: the platform's


class _Budget:
    """An engine (a `Runner`) that never lets a run outlast what is left of its submission's time limit."""

    def __init__(self, engine: Runner, seconds: float) -> None:
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

    def stopped(self) -> str | None:
        """Why no further exercise may start: the time limit is used up (None while time is left)."""
        return self.used_up if self.left <= 0 else None

    def run(self, job: Job) -> RunResult:
        if self.left <= 0:
            raise CheckFailed(Verdict("failed", self.used_up))
        result = self._engine.run(replace(job, deadline=min(job.deadline, self.left)))
        self._ends += result.queued  # a portable pool warming interpreters: not the submission's time
        return result


@dataclass
class _Lease:
    """An engine lent to one submission, and where that submission's files must go for it."""

    engine: Engine
    workspace: Path | None = None  # in a sandbox: the only folder of the grader's it can see

    def place(self, files: Path) -> Path:
        """`files` holds only regular files that `submissions.prepare` wrote; a link (there is none) would be
        copied as a link, never followed."""
        if self.workspace is None:
            return files
        return Path(shutil.copytree(files, self.workspace / "files", symlinks=True))


def _engine_failed(results: Sequence[CheckResult]) -> bool:
    return any(r.engine_failed for r in results)


class _EnginePool:
    """Without a sandbox: warm engines lent to one submission at a time; one that broke is
    replaced, never lent again."""

    def __init__(self, size: int, preload: list[str], launcher: str | None) -> None:
        self._preload = preload
        self._launcher = launcher
        self._idle: queue.Queue[Engine] = queue.Queue()
        self._all: list[Engine] = []
        for _ in range(size):
            self._idle.put(self._new())

    def _new(self) -> Engine:
        engine = open_engine(self._preload, self._launcher)
        self._all.append(engine)
        return engine

    def borrow(self) -> _Lease:
        return _Lease(self._idle.get())

    def give_back(self, lease: _Lease, results: Sequence[CheckResult]) -> None:
        """A zygote that died (a student may kill its parent) fails every later run: replace it."""
        engine = lease.engine
        if _engine_failed(results):
            engine.close()
            engine = self._new()
        self._idle.put(engine)

    def close(self) -> None:
        for engine in self._all:
            engine.close()


class _SandboxPool:
    """A fresh sandbox per submission, `size` of them warming ahead. One long-lived thread starts
    them: a sandbox dies with the thread that started it (bubblewrap's --die-with-parent)."""

    def __init__(self, size: int, sandbox: SandboxSet, preload: list[str]) -> None:
        self._sandbox = sandbox
        self._preload = preload
        self._ready: queue.Queue[_Lease | BaseException] = queue.Queue()
        self._wanted: queue.Queue[bool] = queue.Queue()
        for _ in range(size):
            self._wanted.put(True)
        self._starter = threading.Thread(target=self._start_loop, name="sandbox-starter", daemon=True)
        self._starter.start()

    def _start_loop(self) -> None:
        while self._wanted.get():
            try:
                workspace = Path(tempfile.mkdtemp(prefix="grader-workspace-"))
                engine = open_engine(self._preload, confinement=self._sandbox.confine(workspace))
                self._ready.put(_Lease(engine, workspace))
            except Exception as exc:  # reported by the submission that needed this sandbox
                self._ready.put(exc)

    def borrow(self) -> _Lease:
        self._wanted.put(True)
        lease = self._ready.get()
        if isinstance(lease, BaseException):
            raise RuntimeError(f"{ENGINE_FAILURE}: could not start a sandbox: {lease}") from lease
        return lease

    def give_back(self, lease: _Lease, results: Sequence[CheckResult]) -> None:
        """Used once: the sandbox is torn down, with everything the submission left in it."""
        lease.engine.close()
        if lease.workspace is not None:
            shutil.rmtree(lease.workspace, ignore_errors=True)

    def close(self) -> None:
        self._wanted.put(False)
        self._starter.join()
        while not self._ready.empty():
            lease = self._ready.get()
            if isinstance(lease, _Lease):
                self.give_back(lease, [])


@dataclass(frozen=True)
class _Batch:
    """What every submission of one batch is graded with: the course, the options, the seed its inputs are
    drawn from, and, on the trusted engine (outside any sandbox), the references and the backend probe."""

    catalog: Catalog
    options: BatchOptions
    seed: int
    probe: BackendProbe
    references: References
    trusted: Engine


def _grade_files(engine: Engine, batch: _Batch, submission: submissions.Submission) -> tuple[list[CheckResult], str]:
    """The submission's results within its time limit (the probe asks the trusted engine, outside any sandbox)."""
    options = batch.options
    grading = GradeOptions(
        world_sizes=options.world_sizes,
        backend=options.backend,
        deadline=options.deadline,
        visibilities=options.visibilities,
        seed=batch.seed,
    )
    engine.wait_ready()  # the engine's warm-up is not the submission's time
    budget = _Budget(engine, options.timeout)
    results = grade_files(
        submission,
        batch.catalog.exercises,
        budget,
        batch.probe,
        grading,
        probe_engine=batch.trusted,
        references=batch.references,
        stopped=budget.stopped,
    )
    return results, budget.used_up.removeprefix("not run: ") if budget.left <= 0 else ""


def _not_graded(catalog: Catalog, options: BatchOptions, message: str) -> list[CheckResult]:
    grading = GradeOptions(world_sizes=options.world_sizes, visibilities=options.visibilities)
    return [r for exercise in catalog.exercises for r in not_run(exercise, grading, "error", message)]


def _failed(
    name: str, catalog: Catalog, options: BatchOptions, problem: str, started: float, details: str = ""
) -> SubmissionGrade:
    """A submission graded zero for `problem`: every check not run, saying why."""
    message = f"{problem}\n{details}" if details else problem
    return SubmissionGrade(name, _not_graded(catalog, options, message), time.monotonic() - started, problem)


def _internal(what: str, exc: BaseException) -> str:
    """One sentence for a failure of the grader's (not a verdict on the work), naming the exception."""
    said = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{INTERNAL_ERROR}: {what}: {type(exc).__name__}" + (f": {said}" if said else "")


def _graded(
    pool: _EnginePool | _SandboxPool, batch: _Batch, submission: submissions.Submission
) -> tuple[list[CheckResult], str]:
    """The prepared submission's results and its problem, on an engine borrowed for it and given back."""
    results: list[CheckResult] = []
    lease = None
    try:
        lease = pool.borrow()
        placed = replace(submission, folder=lease.place(submission.folder))
        results, problem = _grade_files(lease.engine, batch, placed)
    except Exception as exc:  # the grader's own defect: this submission's grade says so, the batch goes on
        problem = _internal("the submission could not be graded", exc)
        results = _not_graded(batch.catalog, batch.options, problem + "\n" + traceback.format_exc(limit=-8))
    finally:
        if lease is not None:
            pool.give_back(lease, results)
    return results, problem


def grade_one(pool: _EnginePool | _SandboxPool, batch: _Batch, path: Path) -> SubmissionGrade:
    """Grade one submission; whatever goes wrong becomes its grade's message, never an exception, so a bad
    submission costs its own row and nothing else. Returns only once the submission's sandbox is gone."""
    started = time.monotonic()
    name = submissions.name_of(path)
    catalog, options = batch.catalog, batch.options
    try:
        with tempfile.TemporaryDirectory(prefix="grader-submission-", ignore_cleanup_errors=True) as workdir:
            try:
                submission = submissions.prepare(path, catalog, Path(workdir))
            except submissions.SubmissionError as exc:  # the submission is malformed: its row says how
                return _failed(name, catalog, options, str(exc), started)
            except Exception as exc:  # RecursionError, MemoryError...: what no check of prepare's foresaw
                return _failed(
                    name,
                    catalog,
                    options,
                    _internal("the submission could not be prepared", exc),
                    started,
                    traceback.format_exc(limit=-8),
                )
            results, problem = _graded(pool, batch, submission)
        return SubmissionGrade(name, results, time.monotonic() - started, problem, submission.notes)
    except Exception as exc:  # anywhere else (the temporary folder, the report): still this submission's row only
        return _failed(
            name,
            catalog,
            options,
            _internal("the submission could not be graded", exc),
            started,
            traceback.format_exc(limit=-8),
        )


def _safely(hook: Callable[[T], object], argument: T, what: str) -> None:
    """A caller's hook (writing a row, drawing progress) that raises costs what it was doing for that one
    submission, said on stderr; the batch goes on, and the other submissions' rows are written."""
    try:
        hook(argument)
    except Exception as exc:
        print(f"grader: {what} failed: {type(exc).__name__}: {one_line(str(exc), 500)}", file=sys.stderr)


def grade_batch(
    catalog: Catalog,
    paths: Sequence[Path],
    options: BatchOptions,
    sandbox: SandboxSet | None = None,
    on_start: Callable[[str], None] | None = None,
    on_done: Callable[[SubmissionGrade], None] | None = None,
) -> list[SubmissionGrade]:
    """Grade every path with `options.jobs` engines; grades come back in the order of `paths`.
    `sandbox` None grades without one (trusted code only)."""
    for exercise in catalog.exercises:
        load_checks(exercise)  # the judge is loaded before any submission's code runs anywhere
    preload = [e.workers_module for e in catalog.exercises]
    workers = max(1, min(options.jobs if sandbox is None or sandbox.concurrent else 1, len(paths)))
    seed = options.seed if options.seed is not None else secrets.randbelow(2**31)
    trusted = open_engine(preload, options.launcher)
    pool = (
        _SandboxPool(workers, sandbox, preload)
        if sandbox is not None
        else _EnginePool(workers, preload, options.launcher)
    )
    batch = _Batch(catalog, options, seed, BackendProbe(options.backend), References(trusted), trusted)

    def task(path: Path) -> SubmissionGrade:
        if on_start:
            _safely(on_start, submissions.name_of(path), "announcing a submission")
        return grade_one(pool, batch, path)

    grades: dict[Path, SubmissionGrade] = {}
    try:
        with ThreadPoolExecutor(max_workers=workers) as executor:
            futures = {executor.submit(task, path): path for path in paths}
            for future in as_completed(futures):
                grade = future.result()
                grades[futures[future]] = grade
                if on_done:
                    _safely(on_done, grade, f"reporting {grade.name}")
    finally:
        pool.close()
        trusted.close()
    return [grades[path] for path in paths]
