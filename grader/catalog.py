"""The exercise catalog: `exercises/catalog.toml` read into plain dataclasses.

Every command reads the course from here, so adding an exercise means adding a stub, a solution,
a checks package and a catalog entry; nothing in the engine or the CLI changes.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from grader.paths import CATALOG

VISIBILITIES = ("public", "hidden")
STRAY_POLICIES = ("warn", "fail")  # what a process the code left running costs a check


class CatalogError(Exception):
    """The catalog file is missing or malformed; the message says where."""


@dataclass(frozen=True)
class CheckSpec:
    name: str
    description: str
    points: float
    visibility: str
    world_sizes: tuple[int, ...]
    strays: str = "warn"  # "fail" where the exercise is about leaving no process behind


@dataclass(frozen=True)
class Exercise:
    id: str
    number: int
    title: str
    file: str
    functions: tuple[str, ...]  # signatures as written in the stub, e.g. "setup_ddp(rank, world_size, backend=None)"
    checks_package: str
    objectives: tuple[str, ...]
    hints: tuple[str, ...]
    checks: tuple[CheckSpec, ...] = field(default=())
    debug_collectives: bool = True

    @property
    def function_names(self) -> tuple[str, ...]:
        return tuple(signature.split("(", 1)[0].strip() for signature in self.functions)

    @property
    def workers_module(self) -> str:
        return f"{self.checks_package}.workers"


@dataclass(frozen=True)
class Catalog:
    root: Path
    exercises: tuple[Exercise, ...]

    def get(self, key: str) -> Exercise:
        """An exercise by id, by number ("3"), or by a unique prefix of its id."""
        for exercise in self.exercises:
            if key in (exercise.id, str(exercise.number), f"{exercise.number:02d}"):
                return exercise
        matches = [e for e in self.exercises if e.id.startswith(key) or e.id.split("_", 1)[-1] == key]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(e.id for e in self.exercises)
        raise CatalogError(f"no exercise {key!r}; the exercises are: {known}")


def _require(table: dict, key: str, kind: type, where: str):
    if key not in table:
        raise CatalogError(f"{where}: missing field {key!r}")
    value = table[key]
    if not isinstance(value, kind) or isinstance(value, bool) and kind is not bool:
        raise CatalogError(f"{where}: field {key!r} should be a {kind.__name__}, not {type(value).__name__}")
    return value


_EXERCISE_KEYS = {"id", "number", "title", "file", "functions", "checks", "objectives", "hints", "check",
                  "debug_collectives"}
_CHECK_KEYS = {"name", "description", "points", "visibility", "world_sizes", "strays"}


def _no_unknown_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise CatalogError(f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
                           f"(known: {', '.join(sorted(allowed))}); a missing [[exercise]] line above?")


def _check(table: dict, where: str) -> CheckSpec:
    name = _require(table, "name", str, where)
    where = f"{where} check {name!r}"
    _no_unknown_keys(table, _CHECK_KEYS, where)
    visibility = table.get("visibility", "public")
    if visibility not in VISIBILITIES:
        raise CatalogError(f"{where}: visibility must be one of {VISIBILITIES}, not {visibility!r}")
    sizes = tuple(table.get("world_sizes", (2, 4)))
    if not sizes or not all(isinstance(w, int) and w >= 1 for w in sizes):
        raise CatalogError(f"{where}: world_sizes must be a list of positive integers")
    points = table.get("points", 1)
    if not isinstance(points, (int, float)) or points < 0:
        raise CatalogError(f"{where}: points must be a non-negative number")
    strays = table.get("strays", "warn")
    if strays not in STRAY_POLICIES:
        raise CatalogError(f"{where}: strays must be one of {STRAY_POLICIES}, not {strays!r}")
    return CheckSpec(name, _require(table, "description", str, where), float(points), visibility, sizes, strays)


def load_catalog(root: Path) -> Catalog:
    path = root / CATALOG
    try:
        data = tomllib.loads(path.read_text())
    except FileNotFoundError as exc:
        raise CatalogError(f"{path}: not found") from exc
    except tomllib.TOMLDecodeError as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    exercises = []
    for index, table in enumerate(data.get("exercise", [])):
        where = f"{path.name}: exercise #{index + 1}"
        exercise_id = _require(table, "id", str, where)
        where = f"{path.name}: exercise {exercise_id!r}"
        _no_unknown_keys(table, _EXERCISE_KEYS, where)
        exercises.append(Exercise(
            id=exercise_id,
            number=_require(table, "number", int, where),
            title=_require(table, "title", str, where),
            file=_require(table, "file", str, where),
            functions=tuple(_require(table, "functions", list, where)),
            checks_package=_require(table, "checks", str, where),
            objectives=tuple(table.get("objectives", ())),
            hints=tuple(table.get("hints", ())),
            checks=tuple(_check(check, where) for check in _require(table, "check", list, where)),
            debug_collectives=bool(table.get("debug_collectives", True)),
        ))
    if not exercises:
        raise CatalogError(f"{path}: no [[exercise]] entries")
    ids = [e.id for e in exercises]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"{path}: exercise ids must be unique")
    return Catalog(root, tuple(sorted(exercises, key=lambda e: e.number)))
