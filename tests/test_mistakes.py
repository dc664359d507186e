"""Every mistake the course names is caught and named.

A mistake is kept as a variant of the reference solution (tests/mistakes/<exercise>.toml, see
variants.py): the test grades it and expects the failure message to name the mistake, or, where
no replay proves a cause, to say plainly what was measured; `cause` pins the proven cause the
verdict carries ("" where none may be named). Every failure's message must also read cleanly
(grader/judge/wording.py), and one that names a cause must point at a hint that declares it
(catalog.toml's `causes`: the lint checks the pairs it can read; a hint chosen at run time, here).

A mistake of exercises 12-18 that crashes in torch is said in a few lines (issue 31): the rank(s), the phase it
was in, torch's own first error (type and message), and its traceback once, in the details.
"""

from __future__ import annotations

import re

import pytest
from conftest import describe
from variants import materialize, variant_params

from grader.judge import wording
from grader.judge.api import DEFAULT_DEADLINE_S
from grader.judge.diagnose import PHASE_PREFIX
from grader.judge.verdict import CheckResult

CRASH_SAID_BRIEFLY = ("ex12", "ex13", "ex14", "ex15", "ex16", "ex17", "ex18")  # exercises held to crash_problems
# a rank's error as a verdict says it: "rank 1 raised ValueError: ...", "every rank raised AssertionError"
RAISED = re.compile(r"\b(?:rank \d+|ranks [\d, -]+\d|every rank) raised [A-Z][\w.]*(?:: \S|$|\n)", re.M)
CRASH_LINES = 8  # at most, of the message; the traceback is in the details
TRACEBACK = "Traceback (most recent call last)"


def crash_problems(result: CheckResult) -> list[str]:
    """What a verdict that says a rank raised lacks of a few lines that explain the crash; [] for none."""
    if not RAISED.search(result.message):
        return []
    found = []
    if f"\n  {PHASE_PREFIX}" not in result.message:
        found.append("no phase (what the rank was doing: wrapping, step k, saving...)")
    if len(result.message.splitlines()) > CRASH_LINES:
        found.append(f"{len(result.message.splitlines())} lines, over {CRASH_LINES}")
    if TRACEBACK in result.message or re.search(r'^\s*File "', result.message, re.M):
        found.append("a traceback in the message, where the details hold it")
    blocks = [b.strip() for b in re.split(rf"{re.escape(TRACEBACK)}:|--- .*'s own error ---", result.details)]
    if len(set(filter(None, blocks))) < len(list(filter(None, blocks))):
        found.append("a traceback said twice in the details")
    return found


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
        if exercise_id.startswith(CRASH_SAID_BRIEFLY):
            assert not crash_problems(result), f"{crash_problems(result)} in: {describe([result])}"
