"""Every reference solution passes every check, at W=2 and W=4, unmarked; every untouched stub fails every
check with "not implemented yet" (never with a crash of the grader)."""

from __future__ import annotations

import pytest
from conftest import REPO, describe

from grader.catalog import load_catalog

EXERCISES = [e.id for e in load_catalog(REPO).exercises]


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_solution_passes_every_check(grade, catalog, exercise_id):
    exercise = catalog.get(exercise_id)
    results = grade(exercise_id, REPO / "solutions" / exercise.file, world_sizes=(2, 4))
    assert len(results) == 2 * len(exercise.checks)
    assert all(r.passed for r in results), describe(results)
    assert [r.tampered for r in results if r.tampered] == []  # the grader's own installs and restores are no tampering


@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_stub_fails_every_check_as_not_implemented(grade, catalog, exercise_id):
    exercise = catalog.get(exercise_id)
    results = grade(exercise_id, REPO / "exercises" / exercise.file, world_sizes=(2,))
    assert results
    for result in results:
        assert result.status == "failed", describe([result])
        assert result.message.startswith("not implemented yet"), describe([result])
