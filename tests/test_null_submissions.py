"""The null-submission sweep: every check of every exercise gives 0 points to graded functions that do nothing.

A stub whose bodies are `pass`, `return None`, a return of the wrong type or an early `sys.exit(0)` did
none of the exercise's work; a check that passes it asserts something it never measured (before this test,
exercise 7's "the group is destroyed" and exercise 8's "no built-in collective" did).
"""

from __future__ import annotations

import pytest
from conftest import describe
from null_submissions import BODIES, write_null

from grader.catalog import load_catalog
from grader.paths import course_root

DEADLINE_S = 15.0  # a null submission fails at once; a check that waits for it is a defect of its own
EXERCISES = [exercise.id for exercise in load_catalog(course_root()).exercises]


@pytest.mark.parametrize("variant", sorted(BODIES))
@pytest.mark.parametrize("exercise_id", EXERCISES)
def test_a_null_submission_scores_nothing(grade, catalog, tmp_path, exercise_id: str, variant: str) -> None:
    exercise = catalog.get(exercise_id)
    path = write_null(catalog.stub_path(exercise), exercise.function_names, variant, tmp_path)
    results = grade(exercise_id, path, deadline=DEADLINE_S)
    assert results
    scored = [result for result in results if result.passed or result.points > 0]
    assert not scored, describe(scored)


def test_the_rewrite_keeps_the_docstring_and_replaces_the_body() -> None:
    from null_submissions import null_source

    source = 'def f(x):\n    """Doc."""\n    raise NotImplementedError\n\n\ndef g():\n    return 1\n'
    assert null_source(source, ("f",), BODIES["return_none"]) == (
        'def f(x):\n    """Doc."""\n    return None\n\ndef g():\n    return 1\n'
    )
