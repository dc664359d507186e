"""Correct code passes in every idiom a good engineer would write.

Each alternative (tests/alternatives/<exercise>.toml, see variants.py) is correct code written
another way than the reference solution: another rendezvous idiom, another device API, another
way to write a checkpoint. It must pass every check of its exercise, hidden ones included.
"""

from __future__ import annotations

import pytest
from conftest import describe
from variants import materialize, variant_params


@pytest.mark.parametrize(("exercise_id", "alternative"), variant_params("alternatives", "alternative"))
def test_alternative_passes_every_check(grade, catalog, tmp_path, exercise_id, alternative):
    exercise = catalog.get(exercise_id)
    path = materialize(exercise.file, alternative, tmp_path)
    world_sizes = tuple(alternative.get("world_sizes", [2]))
    results = grade(exercise_id, path, world_sizes=world_sizes)
    assert results
    failing = [r for r in results if not r.passed]
    assert not failing, describe(failing)
