"""Every mistake the course names is caught and named.

A mistake is kept as a variant of the reference solution (tests/mistakes/<exercise>.toml, see
variants.py): the test grades it and expects the failure message to name the mistake, or, where
no replay proves a cause, to say plainly what was measured; `cause` pins the proven cause the
verdict carries ("" where none may be named). Every failure's message must also read cleanly
(grader/judge/wording.py), and one that names a cause must point at a hint that declares it
(catalog.toml's `causes`: the lint checks the pairs it can read; a hint chosen at run time, here).
"""

from __future__ import annotations

import re

import pytest
from conftest import describe
from variants import materialize, variant_params

from grader.judge import wording
from grader.judge.api import DEFAULT_DEADLINE_S


@pytest.mark.parametrize(("exercise_id", "mistake"), variant_params("mistakes", "mistake"))
def test_mistake_is_named(grade, catalog, tmp_path, exercise_id, mistake):
    exercise = catalog.get(exercise_id)
    path = materialize(exercise.file, mistake, tmp_path)
    world_sizes = tuple(mistake.get("world_sizes", [2]))
    results = grade(
        exercise_id,
        path,
        world_sizes=world_sizes,
        deadline=mistake.get("deadline", DEFAULT_DEADLINE_S),
        checks={mistake["check"]},
    )
    assert results, f"no check named {mistake['check']!r}"
    failed = [r for r in results if r.status == "failed"]
    assert failed, describe(results)
    for result in failed:
        assert re.search(mistake["expect"], result.message, re.I), describe([result])
        assert not wording.problems(result.message), f"{wording.problems(result.message)} in: {result.message}"
        if result.cause:  # a hint it declares, where the exercise declares it (a generic slip: the function's)
            declaring = exercise.hints_declaring(result.cause)
            assert result.hint in (declaring or [result.hint]) and result.hint, (
                f"the message names cause {result.cause!r} and points at hint {result.hint!r}, not at {declaring}"
            )
        if "cause" in mistake:  # the cause proven ("" where the message must name none)
            assert result.cause == mistake["cause"], describe([result])
