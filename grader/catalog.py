"""The exercise catalog: `exercises/catalog.toml` read into plain dataclasses.

Every command reads the course from here, so adding an exercise means adding a stub, a solution,
a checks package and a catalog entry; nothing in the engine or the CLI changes.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from grader.paths import CATALOG, SOLUTIONS, STUBS, course_root

FORMAT = 1  # the catalog's `format`: a loader refuses a catalog written for another one
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
class Hint:
    """One hint: checks point at it by `name`, students ask for it by its number (its place, from 1).
    `causes`: the proven causes (grader/judge/causes.toml) whose fix it teaches, so that a message naming one
    points here (`grader lint-course` holds the checks to it)."""

    name: str
    text: str
    causes: tuple[str, ...] = ()


@dataclass(frozen=True)
class Exercise:
    id: str
    number: int
    title: str
    file: str
    functions: tuple[str, ...]  # signatures as written in the stub, e.g. "setup_ddp(rank, world_size, backend=None)"
    checks_package: str
    objectives: tuple[str, ...]
    hints: tuple[Hint, ...]
    checks: tuple[CheckSpec, ...] = field(default=())
    debug_collectives: bool = True
    apis: tuple[str, ...] = ()  # torch APIs beyond torch.distributed's core that it needs (`grader doctor` asks)

    def hints_declaring(self, cause: str) -> list[str]:
        """The names of the hints that declare `cause`: those a message naming it may point at (one may be
        fixed in two places: ex14's row-then-column split, by hand or in a parallelize_module plan)."""
        return [hint.name for hint in self.hints if cause in hint.causes]

    def hint_number(self, name: str) -> int | None:
        """The number students see for the hint `name` (None for a name the catalog lacks)."""
        for number, hint in enumerate(self.hints, 1):
            if hint.name == name:
                return number
        return None

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

    @property
    def stubs_dir(self) -> Path:
        return self.root / STUBS

    @property
    def solutions_dir(self) -> Path:
        return self.root / SOLUTIONS

    def stub_path(self, exercise: Exercise) -> Path:
        """The exercise's file as handed out (and as the student edits it)."""
        return self.stubs_dir / exercise.file

    def solution_path(self, exercise: Exercise) -> Path:
        return self.solutions_dir / exercise.file

    def checks_path(self, exercise: Exercise, module: str) -> Path:
        """A module of the exercise's checks package ("checks", "hidden", "workers") in this course's copy
        of the grader: where a course author edits it, whichever grader is installed."""
        return self.root.joinpath(*exercise.checks_package.split("."), f"{module}.py")

    def select(self, keys: Sequence[str] | None) -> Catalog:
        """The part of the catalog named by `keys` (ids, numbers, prefixes), in catalog order; all for none."""
        if not keys:
            return self
        chosen = {self.get(key).id for key in keys}
        return replace(self, exercises=tuple(e for e in self.exercises if e.id in chosen))

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


_EXERCISE_KEYS = {
    "id",
    "number",
    "title",
    "file",
    "functions",
    "checks",
    "objectives",
    "hints",
    "check",
    "debug_collectives",
    "apis",
}
_CHECK_KEYS = {"name", "description", "points", "visibility", "world_sizes", "strays"}


def _apis(table: dict, where: str) -> tuple[str, ...]:
    apis = table.get("apis", [])
    if not isinstance(apis, list) or not all(isinstance(a, str) and re.fullmatch(r"torch(\.\w+)+", a) for a in apis):
        raise CatalogError(
            f"{where}: apis must be a list of dotted torch names, e.g. 'torch.distributed.fsdp.fully_shard'"
        )
    return tuple(apis)


def _no_unknown_keys(table: dict, allowed: set[str], where: str) -> None:
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise CatalogError(
            f"{where}: unknown field(s) {', '.join(map(repr, unknown))} "
            f"(known: {', '.join(sorted(allowed))}); a missing [[exercise]] line above?"
        )


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


def _hints(table: dict, where: str) -> tuple[Hint, ...]:
    hints = []
    for index, entry in enumerate(table.get("hints", ()), 1):
        at = f"{where} hint {index}"
        if not isinstance(entry, dict):
            raise CatalogError(f'{at}: write it as {{ name = "what_it_is_about", text = "..." }}')
        _no_unknown_keys(entry, {"name", "text", "causes"}, at)
        name = _require(entry, "name", str, at)
        if not name.isidentifier():
            raise CatalogError(f"{at}: name {name!r} should be a word like mean_loss (letters, digits, _)")
        causes = entry.get("causes", [])
        if not isinstance(causes, list) or not all(isinstance(c, str) and re.fullmatch(r"\w+", c) for c in causes):
            raise CatalogError(f'{at}: causes must be a list of cause names like "loss_summed"')
        hints.append(Hint(name, _require(entry, "text", str, at), tuple(causes)))
    names = [hint.name for hint in hints]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise CatalogError(f"{where}: hint name {twice[0]!r} is used twice; checks name a hint, so names are unique")
    return tuple(hints)


def _check_format(data: dict, text: str, path: Path) -> None:
    """Refuse a catalog written for another layout before reading it as this one (the error names its line)."""
    version = data.get("format")
    if version is None:
        raise CatalogError(
            f"{path}:1: no `format = {FORMAT}` line at the top: this grader reads catalogs of format {FORMAT}"
        )
    if version != FORMAT or isinstance(version, bool):
        line = next((n for n, row in enumerate(text.splitlines(), 1) if row.lstrip().startswith("format")), 1)
        raise CatalogError(f"{path}:{line}: format {version!r} is unknown to this grader, which reads format {FORMAT}")


def load_catalog(root: Path) -> Catalog:
    path = root / CATALOG
    try:
        text = path.read_text()
        data = tomllib.loads(text)
    except FileNotFoundError as exc:
        raise CatalogError(f"{path}: not found") from exc
    except OSError as exc:
        raise CatalogError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CatalogError(f"{path}: {exc}") from exc
    _check_format(data, text, path)
    exercises = []
    for index, table in enumerate(data.get("exercise", [])):
        where = f"{path.name}: exercise #{index + 1}"
        exercise_id = _require(table, "id", str, where)
        where = f"{path.name}: exercise {exercise_id!r}"
        _no_unknown_keys(table, _EXERCISE_KEYS, where)
        exercises.append(
            Exercise(
                id=exercise_id,
                number=_require(table, "number", int, where),
                title=_require(table, "title", str, where),
                file=_require(table, "file", str, where),
                functions=tuple(_require(table, "functions", list, where)),
                checks_package=_require(table, "checks", str, where),
                objectives=tuple(table.get("objectives", ())),
                hints=_hints(table, where),
                checks=tuple(_check(check, where) for check in _require(table, "check", list, where)),
                debug_collectives=bool(table.get("debug_collectives", True)),
                apis=_apis(table, where),
            )
        )
    if not exercises:
        raise CatalogError(f"{path}: no [[exercise]] entries")
    ids = [e.id for e in exercises]
    if len(set(ids)) != len(ids):
        raise CatalogError(f"{path}: exercise ids must be unique")
    return Catalog(root, tuple(sorted(exercises, key=lambda e: e.number)))


def course_catalog(exercises: Sequence[str] | None = None) -> Catalog:
    """The catalog of the course the grader runs in (see `course_root`), or the part of it `exercises` names."""
    return load_catalog(course_root()).select(exercises)
