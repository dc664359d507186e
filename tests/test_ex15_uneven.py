"""ex15's uneven-micro-batch check judges what the contract asks (a ValueError naming both sizes), not a style:
a full stop after a number is still the number, and a rank's own error is said before a peer's lost connection."""

from __future__ import annotations

from pathlib import Path

import pytest
from prepared import PreparedRuns

from grader.catalog import load_catalog
from grader.checks.ex15_pipeline import checks
from grader.engine import Job, RankOutcome, RunResult
from grader.judge.api import CheckContext, CheckFailed
from grader.paths import course_root


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ("6 samples must be divisible by 4.", True),
        ("batch 6 does not split into 4 micro-batches", True),
        ("batch of size 6: 4.5 per micro-batch", False),
        ("batch 16 into 14", False),
    ],
)
def test_a_number_is_named_with_its_full_stop_but_not_inside_another(message: str, names: bool) -> None:
    assert (checks._names(message, 6) and checks._names(message, 4)) is names


def _context(outcomes: list[RankOutcome]) -> CheckContext:
    exercise = load_catalog(course_root()).get("ex15")
    result = RunResult(job=Job(f"{exercise.workers_module}:uneven", 2), ranks=outcomes, seconds=0.0, timed_out=False)
    return CheckContext(PreparedRuns(result), exercise, Path("student.py"), world_size=2)


def test_a_ranks_own_error_is_said_before_a_peers_lost_connection() -> None:
    echo = {"type": "RuntimeError", "message": "Connection closed by peer [127.0.0.1]:4242"}
    own = {"type": "IndexError", "message": "list index out of range"}
    outcomes = [
        RankOutcome(0, report={"facts": {}, "error": echo}, status=1),
        RankOutcome(1, report={"facts": {}, "error": own}, status=1),
    ]
    with pytest.raises(CheckFailed) as failed:
        checks.uneven_micro_batches(_context(outcomes))
    assert "rank 1 raised IndexError: list index out of range" in failed.value.verdict.message
    assert "Connection closed" not in failed.value.verdict.message
