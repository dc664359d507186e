"""A grading whose runs are prepared, not started: the judge's side alone, for tests of what checks do with facts.

`prepared_context` hands every run (and every trusted reference) the one result built from the facts given,
so a test states a report and asserts the verdict, with no rank started.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from grader.catalog import load_catalog
from grader.engine import Job, RankOutcome, RunResult
from grader.judge.api import CheckContext, RunCache
from grader.paths import course_root


class PreparedRuns(RunCache):
    """A run cache that answers every run and reference with one prepared result."""

    def __init__(self, result: RunResult) -> None:
        self._result = result

    def run(self, job: Job, by: tuple[str, int] = ("", 0)) -> RunResult:
        return self._result

    def reference(self, job: Job) -> RunResult:
        return self._result

    @property
    def scratch(self) -> str:
        return ""


def prepared_context(
    exercise: str, worker: str, facts: list[dict[str, Any]], world_size: int | None = None
) -> CheckContext:
    """A check's context for `exercise` whose runs of `worker` report `facts`, one table per process."""
    catalog = load_catalog(course_root()).get(exercise)
    result = RunResult(
        job=Job(f"{catalog.workers_module}:{worker}", len(facts)),
        ranks=[RankOutcome(rank, report={"facts": f, "error": None}, status=0) for rank, f in enumerate(facts)],
        seconds=0.0,
        timed_out=False,
    )
    size = len(facts) if world_size is None else world_size
    return CheckContext(PreparedRuns(result), catalog, Path("student.py"), world_size=size)
