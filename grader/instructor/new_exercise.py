"""`grader new-exercise NAME`: a new exercise, whole and working, for a course author to make their own.

It writes every piece an exercise has, each in the form the rest of the course reads: the stub and its
solution, the catalog entry with hints and a check, the checks package (manifest, typed facts, a worker,
a check), a quiz bank for both pools, and a mistake and an alternative as test data. As written, the
course lint accepts it, its solution passes, its stub fails, and its mistake is caught: the author changes
a working exercise instead of assembling one from the docs. It asks for `average(value)` (an all-reduce
divided by the world size), the smallest exercise that goes through every piece.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from grader.catalog import CatalogError, load_catalog
from grader.instructor.templating import UnsafeValue, render
from grader.paths import CATALOG, SOLUTIONS, STUBS

NAME = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")
MAX_NAME = 40
QUIZZES = Path("quizzes")
TITLE_REFUSED = re.compile(r'["\\\x00-\x1f\x7f]')  # what a TOML string in the catalog cannot hold as typed


class NewExerciseError(Exception):
    """The exercise cannot be made as asked; the message says why, and nothing was written."""


@dataclass(frozen=True)
class NewExercise:
    exercise_id: str
    written: tuple[Path, ...]  # relative to the course root, the catalog last


def new_exercise(root: Path, name: str, title: str | None = None) -> NewExercise:
    """Write exercise `name` into the course at `root`, numbered after the last one."""
    if not NAME.fullmatch(name) or len(name) > MAX_NAME:
        raise NewExerciseError(
            f"{name!r} is not an exercise name: lower-case words joined by '_', starting with a letter, "
            f"at most {MAX_NAME} characters (e.g. all_to_all)"
        )
    title = title if title is not None else name.replace("_", " ").capitalize()
    if not title.strip() or TITLE_REFUSED.search(title):
        raise NewExerciseError(f"the title {title!r} must be one line of text without quotes or backslashes")
    if not (root / SOLUTIONS).is_dir():
        raise NewExerciseError(
            f"{root} has no {SOLUTIONS}/: exercises are made in the instructor's course, not in a student copy"
        )
    try:
        catalog = load_catalog(root)
    except CatalogError as exc:
        raise NewExerciseError(f"the catalog cannot be read: {exc}") from exc
    taken = [e.id for e in catalog.exercises if e.id.split("_", 1)[-1] == name]
    if taken:
        raise NewExerciseError(f"the course already has an exercise named {name}: {taken[0]}")
    number = max((e.number for e in catalog.exercises), default=0) + 1
    exercise_id = f"ex{number:02d}_{name}"
    files = _files(root, exercise_id, name)
    values = {
        "exercise_id": exercise_id,
        "number": number,
        "short": f"ex{number:02d}",
        "title": title,
        "file": f"{exercise_id}.py",
        "slug": name.replace("_", "-"),
    }
    present = [path for path in files if (root / path).exists()]
    if present:
        raise NewExerciseError(f"{present[0]} exists already: move it away or choose another name")
    try:
        texts = {path: render(f"new_exercise/{template}", **values) for path, template in files.items()}
        entry = render("new_exercise/catalog_entry.toml.j2", **values)
    except UnsafeValue as exc:
        raise NewExerciseError(str(exc)) from exc
    return NewExercise(exercise_id, _write(root, texts, entry))


def _files(root: Path, exercise_id: str, name: str) -> dict[Path, str]:
    """Each file to write, relative to the course root, and its template."""
    package = Path("grader") / "checks" / exercise_id
    banks = [int(found[1]) for path in (root / QUIZZES).glob("*.toml") if (found := re.match(r"(\d+)_", path.name))]
    return {
        STUBS / f"{exercise_id}.py": "stub.py.j2",
        SOLUTIONS / f"{exercise_id}.py": "solution.py.j2",
        package / "__init__.py": "__init__.py.j2",
        package / "manifest.toml": "manifest.toml.j2",
        package / "facts.py": "facts.py.j2",
        package / "workers.py": "workers.py.j2",
        package / "checks.py": "checks.py.j2",
        package / "hypotheses.toml": "hypotheses.toml.j2",
        QUIZZES / f"{max(banks, default=0) + 1:02d}_{name}.toml": "quiz.toml.j2",
        Path("tests") / "mistakes" / f"{exercise_id}.toml": "mistakes.toml.j2",
        Path("tests") / "alternatives" / f"{exercise_id}.toml": "alternatives.toml.j2",
    }


def _write(root: Path, texts: dict[Path, str], entry: str) -> tuple[Path, ...]:
    """Write every file, then append the catalog entry; on any failure remove what was written."""
    written: list[Path] = []
    before = (root / CATALOG).read_text()
    current = CATALOG
    try:
        for current, text in texts.items():
            (root / current).parent.mkdir(parents=True, exist_ok=True)
            (root / current).write_text(text)
            written.append(current)
        current = CATALOG
        (root / CATALOG).write_text(before.rstrip("\n") + "\n" + entry)
    except OSError as exc:
        for path in written:
            (root / path).unlink(missing_ok=True)
        (root / CATALOG).write_text(before)
        raise NewExerciseError(f"could not write {current}: {exc.strerror or exc}; nothing was kept") from exc
    return (*written, CATALOG)
