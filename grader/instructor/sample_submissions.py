"""Submissions of known kinds, as students hand them in: the solutions, the untouched stubs, the solutions
with one named mistake of the course's tests/mistakes/ patched in.

Here, not in the tests, so that benchmarks/bench_grade.py grades the same kinds of submission the tests
prove are graded right without importing the tests.
"""

from __future__ import annotations

import shutil
import tomllib
from pathlib import Path


def solutions(root: Path, folder: Path) -> Path:
    """The course at `root`'s reference solutions, as a submission in `folder`."""
    shutil.copytree(root / "solutions", folder)
    return folder


def stubs(root: Path, folder: Path) -> Path:
    """The exercises as handed out: every function still raises NotImplementedError."""
    shutil.copytree(root / "exercises", folder, ignore=shutil.ignore_patterns("*.toml", "__pycache__"))
    return folder


def with_mistake(root: Path, folder: Path, exercise_file: str, mistake: str) -> Path:
    """The solutions with one named mistake of `root`/tests/mistakes/ patched in."""
    solutions(root, folder)
    spec = tomllib.loads((root / "tests" / "mistakes" / f"{Path(exercise_file).stem}.toml").read_text())
    (entry,) = [m for m in spec["mistake"] if m["name"] == mistake]
    path = folder / exercise_file
    source = path.read_text()
    for old, new in entry["replace"]:
        assert old in source, f"mistake {mistake!r} no longer applies"
        source = source.replace(old, new, 1)
    path.write_text(source)
    return folder
