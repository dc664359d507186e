"""Grade many submissions at once, in parallel, each within its own time limit, each in a sandbox.

Each submission's ranks run in a sandbox of their own (grader/sandbox; docs/SECURITY.md): a fresh
one per submission, whose zygote warms up while earlier submissions grade, and which is gone before
that submission's results are written. The judge runs here, in the grader's process; the trusted
references run on a separate engine that never loads student code, once per batch for all
submissions (the batch draws one seed, so they all ask for the same references). Without a sandbox
(`--no-sandbox`), warm engines are reused from one submission to the next instead. Which engines those are
is grader/grading_engines.py's; where the grades go (results.json, gradebook, ...) is the caller's sinks'.

Parallelism is the engine's own: `jobs` worker threads, each with one engine for a whole
submission. Ranks are processes forked by the zygotes, so the threads only wait on pipes
(pytest-xdist would start a fresh interpreter and torch per worker and report through pytest, not
into results.json). A submission that hangs, crashes or cannot be read ends with zero points for
what could not run and a message; the batch always goes on. Everything done for one submission, from
unpacking it to its grade, runs under one guard (`grade_one`): even a failure of the grader's own
(a parser's RecursionError, a MemoryError) costs that submission's row, and says so, and nothing else.
"""

from __future__ import annotations

import secrets
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from grader.catalog import Catalog
from grader.engine import Engine, Job, Runner, RunResult
from grader.grading import BackendProbe, grade_files
from grader.grading_engines import EngineContext, EngineLender, open_batch
from grader.instructor import submissions, tamper_scan
from grader.instructor.submission_grade import SubmissionGrade
from grader.intake import SubmissionError
from grader.judge.api import CheckFailed, References, Verdict
from grader.judge.runner import load_checks, not_run
from grader.judge.verdict import CheckResult
from grader.plan import GradingPlan
from grader.report.inert import one_line
from grader.report.sink import Sink
from grader.sandbox import SandboxSet

T = TypeVar("T")
INTERNAL_ERROR = "internal grader error"  # opens the message of a failure of the grader's, not of the submission


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


@dataclass(frozen=True)
class _Batch:
    """What every submission of one batch is graded with: the course, the plan (its seed drawn once for the
    batch) and, on the trusted engine (outside any sandbox), the references and the backend probe."""

    catalog: Catalog
    plan: GradingPlan
    probe: BackendProbe
    references: References
    trusted: Engine
    sandbox: SandboxSet | None = None  # asked what each submission ran into (its process cap) before its sandbox closes


def _grade_files(engine: Engine, batch: _Batch, submission: submissions.Submission) -> tuple[list[CheckResult], str]:
    """The submission's results within its time limit (the probe asks the trusted engine, outside any sandbox)."""
    engine.wait_ready()  # the engine's warm-up is not the submission's time
    budget = _Budget(engine, batch.plan.timeout)
    results = grade_files(
        submission,
        batch.catalog.exercises,
        budget,
        batch.probe,
        batch.plan.grade_options(),
        probe_engine=batch.trusted,
        references=batch.references,
        stopped=budget.stopped,
    )
    return results, budget.used_up.removeprefix("not run: ") if budget.left <= 0 else ""


def _not_graded(catalog: Catalog, plan: GradingPlan, message: str) -> list[CheckResult]:
    options = plan.grade_options()
    return [r for exercise in catalog.exercises for r in not_run(exercise, options, "error", message)]


def _failed(
    name: str, catalog: Catalog, plan: GradingPlan, problem: str, started: float, details: str = ""
) -> SubmissionGrade:
    """A submission graded zero for `problem`: every check not run, saying why."""
    message = f"{problem}\n{details}" if details else problem
    return SubmissionGrade(name, _not_graded(catalog, plan, message), time.monotonic() - started, problem)


def _internal(what: str, exc: BaseException) -> str:
    """One sentence for a failure of the grader's (not a verdict on the work), naming the exception."""
    said = str(exc).splitlines()[0][:300] if str(exc) else ""
    return f"{INTERNAL_ERROR}: {what}: {type(exc).__name__}" + (f": {said}" if said else "")


def _graded(lender: EngineLender, batch: _Batch, submission: submissions.Submission) -> tuple[list[CheckResult], str]:
    """The prepared submission's results and its problem, on an engine borrowed for it and given back; a
    sandbox's limit it reached becomes a note of the submission's."""
    results: list[CheckResult] = []
    lease = None
    try:
        lease = lender.borrow()
        placed = replace(submission, folder=lease.place(submission.folder))
        results, problem = _grade_files(lease.engine, batch, placed)
    except Exception as exc:  # the grader's own defect: this submission's grade says so, the batch goes on
        problem = _internal("the submission could not be graded", exc)
        results = _not_graded(batch.catalog, batch.plan, problem + "\n" + traceback.format_exc(limit=-8))
    finally:
        if lease is not None:
            reached = batch.sandbox.limits_reached(lease.workspace) if batch.sandbox and lease.workspace else None
            submission.notes += [reached] if reached else []
            lender.give_back(lease, results)
    return results, problem


def grade_one(lender: EngineLender, batch: _Batch, path: Path) -> SubmissionGrade:
    """Grade one submission; whatever goes wrong becomes its grade's message, never an exception, so a bad
    submission costs its own row and nothing else. Returns only once the submission's sandbox is gone."""
    started = time.monotonic()
    name = submissions.name_of(path)
    catalog, plan = batch.catalog, batch.plan
    try:
        with tempfile.TemporaryDirectory(prefix="grader-submission-", ignore_cleanup_errors=True) as workdir:
            try:
                submission = submissions.prepare(path, catalog, Path(workdir))
            except SubmissionError as exc:  # the submission is malformed, or holds no exercise's file: its row says so
                return _failed(name, catalog, plan, str(exc), started)
            except Exception as exc:  # RecursionError, MemoryError...: what no check of prepare's foresaw
                return _failed(
                    name,
                    catalog,
                    plan,
                    _internal("the submission could not be prepared", exc),
                    started,
                    traceback.format_exc(limit=-8),
                )
            review = tamper_scan.scan_files(submission)  # the files as handed in, before any of them runs
            results, problem = _graded(lender, batch, submission)
        files = [str(choice) for choice in submission.choices]
        return SubmissionGrade(name, results, time.monotonic() - started, problem, submission.notes, review, files)
    except Exception as exc:  # anywhere else (the temporary folder, the report): still this submission's row only
        return _failed(
            name,
            catalog,
            plan,
            _internal("the submission could not be graded", exc),
            started,
            traceback.format_exc(limit=-8),
        )


def _safely(hook: Callable[[T], object], argument: T, what: str) -> None:
    """A sink that raises (writing a row, drawing progress) costs what it was doing for that one submission,
    said on stderr; the batch goes on, and the other sinks and submissions are served."""
    try:
        hook(argument)
    except Exception as exc:
        print(f"grader: {what} failed: {type(exc).__name__}: {one_line(str(exc), 500)}", file=sys.stderr)


def grade_batch(
    catalog: Catalog,
    paths: Sequence[Path],
    plan: GradingPlan,
    sandbox: SandboxSet | None = None,
    sinks: Sequence[Sink[SubmissionGrade]] = (),
) -> list[SubmissionGrade]:
    """Grade every path with `plan.jobs` engines; grades come back in the order of `paths`, and go to each
    sink as they come (in the order of `sinks`: one may add a note that the next one writes). The caller
    closes the sinks. `sandbox` None grades without one (trusted code only)."""
    for exercise in catalog.exercises:
        load_checks(exercise)  # the judge is loaded before any submission's code runs anywhere
    context = EngineContext(tuple(e.workers_module for e in catalog.exercises), sandbox=sandbox)
    workers = max(1, min(plan.jobs if sandbox is None or sandbox.concurrent else 1, len(paths)))
    if plan.seed is None:
        plan = replace(plan, seed=secrets.randbelow(2**31))  # one for the batch: every submission, same references
    engines = open_batch(plan, context, workers)
    batch = _Batch(catalog, plan, BackendProbe(plan.backend), References(engines.trusted), engines.trusted, sandbox)

    def task(path: Path) -> SubmissionGrade:
        for sink in sinks:
            _safely(sink.on_start, submissions.name_of(path), "announcing a submission")
        return grade_one(engines.lender, batch, path)

    grades: dict[Path, SubmissionGrade] = {}
    try:
        with ThreadPoolExecutor(max_workers=workers) as executor:
            futures = {executor.submit(task, path): path for path in paths}
            for future in as_completed(futures):
                grade = future.result()
                grades[futures[future]] = grade
                for sink in sinks:
                    _safely(sink.on_result, grade, f"reporting {grade.name}")
    finally:
        engines.close()
    return [grades[path] for path in paths]
