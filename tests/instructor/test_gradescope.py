"""results.json from a grade: points per check, visibility of hidden checks, nothing hidden in `output`."""

from __future__ import annotations

import pytest

from grader.catalog import load_catalog
from grader.instructor.gradescope import results_json
from grader.instructor.submission_grade import SubmissionGrade
from grader.judge.verdict import CheckResult, Status

from . import support
from .results_schema import validate_results

CATALOG = load_catalog(support.REPO)


def _result(check: str, world_size: int, status: Status, message: str, visibility: str) -> CheckResult:
    return CheckResult(
        status,
        message,
        exercise="ex02_data_sharding",
        check=check,
        world_size=world_size,
        seconds=0.1,
        points=1.0 if status == "passed" else 0.0,
        max_points=1.0,
        visibility=visibility,
    )


def _grade() -> SubmissionGrade:
    results = [
        _result("shards_are_disjoint", 2, "passed", "", "public"),
        _result("shards_are_disjoint", 4, "failed", "overlap at W=4", "public"),
        _result("reshuffles_each_epoch", 2, "failed", "secret reason", "hidden"),
    ]
    return SubmissionGrade("dana", results, 1.5)


@pytest.mark.parametrize("hidden_as", ["hidden", "after_published"])
def test_checks_become_tests_with_their_world_sizes_summed(hidden_as: str) -> None:
    data = results_json(CATALOG, _grade(), hidden_as)
    validate_results(data)
    disjoint, reshuffle = data["tests"]
    assert (disjoint["score"], disjoint["max_score"], disjoint["status"]) == (1.0, 2.0, "failed")
    assert "W=4: failed: overlap at W=4" in disjoint["output"]
    assert disjoint["visibility"] == "visible" and reshuffle["visibility"] == hidden_as
    assert "secret" not in data["output"] and "reshuffles" not in data["output"]
    assert data["output"] == "0/1 visible checks passed"


def test_an_unknown_visibility_is_refused() -> None:
    with pytest.raises(ValueError, match="must be one of"):
        results_json(CATALOG, _grade(), "sometimes")
