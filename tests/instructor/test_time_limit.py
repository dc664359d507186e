"""A submission's time limit: every run gets at most what is left of it, then nothing runs."""

from __future__ import annotations

import pytest

from grader.engine import Job, RunResult
from grader.instructor.batch import _Budget
from grader.judge.api import CheckFailed


class _Recorder:
    def __init__(self) -> None:
        self.deadlines: list[float] = []

    def run(self, job: Job) -> RunResult:
        self.deadlines.append(job.deadline)
        return RunResult(job, [], 0.0, False)


def test_runs_are_cut_to_the_time_left() -> None:
    engine = _Recorder()
    _Budget(engine, 5.0).run(Job("m:f", 2, deadline=30.0))  # type: ignore[arg-type]
    _Budget(engine, 60.0).run(Job("m:f", 2, deadline=30.0))  # type: ignore[arg-type]
    assert 4.0 < engine.deadlines[0] <= 5.0 and engine.deadlines[1] == 30.0


def test_nothing_runs_once_the_time_is_used_up() -> None:
    engine = _Recorder()
    with pytest.raises(CheckFailed, match="used up its time limit of 0s"):
        _Budget(engine, 0.0).run(Job("m:f", 2))  # type: ignore[arg-type]
    assert engine.deadlines == []


def test_waiting_for_the_launcher_to_start_ranks_is_not_the_submissions_time() -> None:
    class Queued(_Recorder):
        def run(self, job: Job) -> RunResult:
            super().run(job)
            return RunResult(job, [], 0.0, False, queued=3.0)

    budget = _Budget(Queued(), 5.0)  # type: ignore[arg-type]
    budget.run(Job("m:f", 2))
    assert 7.0 < budget.left <= 8.0
