"""Every mistake the course names is caught and named.

A mistake is kept as a patch on the reference solution (tests/mistakes/<exercise>.toml): the test
applies it, checks the patch still applies (so a refactored solution cannot silently retire a
mistake), grades the result and expects the failure message to name the mistake.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from conftest import REPO, describe

MISTAKES = REPO / "tests" / "mistakes"


def _mistakes() -> list:
    cases = []
    for spec_file in sorted(MISTAKES.glob("*.toml")):
        for mistake in tomllib.loads(spec_file.read_text())["mistake"]:
            cases.append(pytest.param(spec_file.stem, mistake, id=f"{spec_file.stem}:{mistake['name']}"))
    return cases


def materialize(exercise_file: str, mistake: dict, folder: Path) -> Path:
    source = (REPO / "solutions" / exercise_file).read_text()
    for old, new in mistake["replace"]:
        assert old in source, f"mistake {mistake['name']!r} no longer applies: {old!r} not in the solution"
        source = source.replace(old, new, 1)
    target = folder / exercise_file
    target.write_text(source)
    return target


@pytest.mark.parametrize(("exercise_id", "mistake"), _mistakes())
def test_mistake_is_named(grade, catalog, tmp_path, exercise_id, mistake):
    exercise = catalog.get(exercise_id)
    path = materialize(exercise.file, mistake, tmp_path)
    world_sizes = tuple(mistake.get("world_sizes", [2]))
    results = grade(exercise_id, path, world_sizes=world_sizes, deadline=mistake.get("deadline", 30.0),
                    checks={mistake["check"]})
    assert results, f"no check named {mistake['check']!r}"
    failed = [r for r in results if r.status == "failed"]
    assert failed, describe(results)
    for result in failed:
        assert re.search(mistake["expect"], result.message, re.I), describe([result])
