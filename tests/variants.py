"""Variants of a reference solution kept as data: a mistake (tests/mistakes/) or a correct
alternative in another idiom (tests/alternatives/).

A variant is either a list of `replace = [[old, new], ...]` patches applied once each to the
solution (each must still apply, so a refactored solution cannot silently retire a variant), or a
whole file in `source`, for code written from scratch in another style. `base = "NAME"` applies the
patches to the correct alternative NAME of the same exercise instead of the solution (variants of
an FSDP1 solution, say).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


def variant_params(folder: str, table: str) -> list:
    """One pytest.param per variant in tests/<folder>/*.toml, with the exercise id and the variant."""
    cases = []
    for spec_file in sorted((REPO / "tests" / folder).glob("*.toml")):
        for variant in tomllib.loads(spec_file.read_text()).get(table, []):
            cases.append(pytest.param(spec_file.stem, variant, id=f"{spec_file.stem}:{variant['name']}"))
    return cases


def _alternative(exercise_file: str, name: str) -> dict:
    spec_file = REPO / "tests" / "alternatives" / f"{Path(exercise_file).stem}.toml"
    found = [v for v in tomllib.loads(spec_file.read_text()).get("alternative", []) if v["name"] == name]
    assert found, f"no alternative {name!r} in {spec_file.name}"
    return found[0]


def _source(exercise_file: str, variant: dict) -> str:
    if "source" in variant:
        return variant["source"]
    if "base" in variant:
        source = _source(exercise_file, _alternative(exercise_file, variant["base"]))
    else:
        source = (REPO / "solutions" / exercise_file).read_text()
    for old, new in variant.get("replace", []):
        assert old in source, f"variant {variant['name']!r} no longer applies: {old!r} not in its base"
        source = source.replace(old, new, 1)
    return source


def materialize(exercise_file: str, variant: dict, folder: Path) -> Path:
    """Write the variant's file into `folder` under the exercise's file name."""
    target = folder / exercise_file
    target.write_text(_source(exercise_file, variant))
    return target
