"""A hang costs one deadline per exercise (issue 21): after a run of the student's code hangs, later
checks that would run the same worker on the same file fail at once with "the same hang"."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from conftest import describe
from variants import materialize

from grader.engine import Job, RankOutcome, Runner, RunResult
from grader.judge.api import CheckContext, CheckFailed, RunCache
from grader.judge.names import HintName
from grader.judge.runner import GradeOptions, grade_exercise


class _Hanging:
    """A runner whose every run of the student's code hangs: its rank is stopped at the deadline."""

    def __init__(self, student: Path) -> None:
        self.jobs: list[Job] = []
        self.dump = f'Thread 0x01 (most recent call first):\n  File "{student}", line 2 in launch\n'

    def run(self, job: Job) -> RunResult:
        self.jobs.append(job)
        ranks = [RankOutcome(r, status=-9, stopped="deadline", stack_dump=self.dump) for r in range(job.world_size)]
        return RunResult(job, ranks, job.deadline, True)

    def new_scratch(self) -> str:
        return ""

    def discard_scratch(self, path: str) -> None:
        pass


class _Counting:
    """A runner that keeps the jobs it was given and hands them to a real engine."""

    def __init__(self, engine: Runner) -> None:
        self.engine = engine
        self.jobs: list[Job] = []

    def run(self, job: Job) -> RunResult:
        self.jobs.append(job)
        return self.engine.run(job)

    def new_scratch(self) -> str:
        return self.engine.new_scratch()

    def discard_scratch(self, path: str) -> None:
        self.engine.discard_scratch(path)


def _context(runs: RunCache, student: Path, check: str, world_size: int) -> CheckContext:
    class Exercise:
        workers_module = "grader.checks.ex04_launch.workers"
        debug_collectives = True

    return CheckContext(runs, Exercise(), student, world_size, check=check)  # type: ignore[arg-type]


def test_a_later_check_of_the_same_worker_fails_without_running(tmp_path):
    student = tmp_path / "ex.py"
    student.write_text("def launch():\n    while True: pass\n")
    engine = _Hanging(student)
    runs = RunCache(engine)
    with pytest.raises(CheckFailed) as first:
        _context(runs, student, "first", 2).facts("launch_identity", nprocs=1, delays=[0.1, 0.0])
    assert "did not finish within the 30 s deadline (a hang?)" in first.value.verdict.message
    assert "ex.py:2 in launch(): `while True: pass`" in first.value.verdict.message
    # another check, another W, other kwargs: the same worker on the same file is not run again
    for check, world_size in (("second", 2), ("first", 4)):
        with pytest.raises(CheckFailed) as later:
            _context(runs, student, check, world_size).facts("launch_identity", nprocs=1, delays=[0.0] * 4)
        message = later.value.verdict.message
        assert message.startswith("the same hang as in check first (W=2), so not run again: rank 0 did not finish")
        assert "ex.py:2 in launch()" in message
    assert len(engine.jobs) == 1
    # another worker drives the student's code another way: it runs
    with pytest.raises(CheckFailed) as other:
        _context(runs, student, "second", 2).facts("launch_failing", nprocs=1)
    assert not other.value.verdict.message.startswith("the same hang")
    assert len(engine.jobs) == 2


def test_the_same_hang_is_said_as_the_check_that_met_it_said_it(tmp_path):
    from grader.judge.verdict import Verdict

    student = tmp_path / "ex.py"
    student.write_text("def launch():\n    pass\n")
    runs = RunCache(_Hanging(student))
    with pytest.raises(CheckFailed):
        _context(runs, student, "first", 2).facts("ring")
    runs.explain_hang(("first", 2), Verdict("failed", "deadlock: every rank waits in send", hint=HintName("isend")))
    with pytest.raises(CheckFailed) as later:
        _context(runs, student, "second", 2).facts("ring")
    verdict = later.value.verdict
    said = "the same hang as in check first (W=2), so not run again: deadlock: every rank waits in send"
    assert verdict.message == said
    assert verdict.hint == "isend"


def test_a_run_may_ask_for_its_own_deadline(tmp_path):
    """`deadline=` sets one run's deadline (ex17's save), and that run is still the check's: used, and its hang
    recorded as any other."""
    student = tmp_path / "ex.py"
    student.write_text("def launch():\n    while True: pass\n")
    engine = _Hanging(student)
    runs = RunCache(engine)
    ctx = _context(runs, student, "first", 2)
    result = ctx.run("launch_identity", nprocs=1, deadline=5.0, delays=[0.0])
    assert engine.jobs[-1].deadline == 5.0 and ctx.used == [result]
    assert ctx.job("launch_identity", deadline=7.0, allowance=1.0).deadline == 8.0
    assert ctx.job("launch_identity").deadline == ctx.deadline
    with pytest.raises(CheckFailed) as failed:
        ctx.facts("launch_identity", nprocs=1, deadline=5.0, delays=[0.0])
    assert "did not finish within the 5 s deadline" in failed.value.verdict.message
    with pytest.raises(CheckFailed) as later:
        _context(runs, student, "second", 2).facts("launch_identity", nprocs=1)
    assert later.value.verdict.message.startswith("the same hang as in check first (W=2)")
    assert len(engine.jobs) == 1


NEVER_EXITS = {
    "name": "a_rank_that_never_exits",
    "replace": [
        ["import torch.multiprocessing as mp\n", "import threading\n\nimport torch.multiprocessing as mp\n"],
        [
            "    results.put((rank, fn(rank, world_size, *args)))\n",
            "    results.put((rank, fn(rank, world_size, *args)))\n    threading.Event().wait()\n",
        ],
    ],
}


def test_a_hanging_launcher_costs_one_deadline(engine, catalog, tmp_path):
    """Its processes never exit, so the launcher joins forever: runs_every_rank at W=2 meets the hang,
    and runs_every_rank at W=4 and waits_for_processes at W=2 and 4 fail at once. propagates_errors runs
    another worker (a rank raises, so the join returns) and is judged on its own."""
    exercise = catalog.get("ex04_launch")
    path = materialize(exercise.file, NEVER_EXITS, tmp_path)
    deadline = 3.0
    counted = _Counting(engine)
    started = time.perf_counter()
    results = grade_exercise(counted, exercise, path, GradeOptions(world_sizes=(2, 4), deadline=deadline, seed=1))
    seconds = time.perf_counter() - started
    assert [job.target.rsplit(":", 1)[1] for job in counted.jobs].count("launch_identity") == 1
    by = {(r.check, r.world_size): r for r in results}
    hung = by["runs_every_rank", 2]
    assert hung.status == "failed" and "did not finish within the 33 s deadline (a hang?)" in hung.message, describe(
        results
    )
    assert "in launch_distributed()" in hung.message
    for key in (("runs_every_rank", 4), ("waits_for_processes", 2), ("waits_for_processes", 4)):
        assert by[key].status == "failed", describe(results)
        assert by[key].message.startswith("the same hang as in check runs_every_rank (W=2), so not run again: ")
        assert by[key].seconds < 1.0
    one_deadline = deadline + 30.0  # ex04 gives a launcher 30 s on top of the deadline to start interpreters
    assert seconds < 2 * one_deadline, describe(results)  # each launch_identity run that hangs costs one
