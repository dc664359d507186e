"""What produced a batch's grades (`Provenance`): the grader's version, the course's commit, and hashes of the
catalog and of each graded exercise's checks, so a regrade can say "ex03's checks changed" and why scores moved.

The hashes are sha256, hex:
- `course`: the bytes of the catalog file, `exercises/catalog.toml`.
- one per graded exercise: its catalog entry (every field, points and world sizes included, as canonical JSON),
  then every file of its checks package as it was imported to grade (`grader/checks/<exercise>/`: checks.py,
  hidden.py, workers.py, facts.py, hypotheses.toml, manifest.toml...; `__pycache__` left out), each as its path
  in the package, a NUL, its size, a NUL and its bytes, in order of path.
What all exercises share (the judge, the engine) is the grader's: its version and, in a git checkout, the commit.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.metadata
import importlib.util
import json
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from grader.catalog import Catalog, Exercise
from grader.paths import CATALOG

DISTRIBUTION = "ddp-course"  # pyproject.toml's name: the grader's version is this distribution's
SKIPPED = ("__pycache__",)


@dataclass(frozen=True)
class Provenance:
    version: str  # the grader's package version
    commit: str | None  # the course checkout's git commit; None when it is no git checkout
    course: str  # sha256 of the catalog file
    exercises: Mapping[str, str]  # exercise id -> sha256 of its catalog entry and checks

    def to_json(self) -> dict[str, Any]:
        return {
            "version": self.version,
            "commit": self.commit,
            "course": self.course,
            "exercises": dict(self.exercises),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Provenance:
        """Raises KeyError, TypeError or ValueError for what is no provenance (the reader says whose file)."""
        exercises = data["exercises"]
        if not isinstance(exercises, dict):
            raise TypeError(f"exercises is {type(exercises).__name__}, not an object")
        commit = data.get("commit")
        return cls(
            str(data["version"]),
            None if commit is None else str(commit),
            str(data["course"]),
            {str(k): str(v) for k, v in exercises.items()},
        )


def stamp(provenance: Provenance, seed: int | None) -> dict[str, Any]:
    """What each grade carries of its batch (a grades.jsonl line, a results.json's extra_data): the provenance
    and the seed."""
    return {**provenance.to_json(), "seed": seed}


def version() -> str:
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def commit(root: Path) -> str | None:
    """The commit checked out at `root` when `root` itself is a git checkout (not a folder inside another's)."""
    if not (root / ".git").exists():
        return None
    try:
        done = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--verify", "HEAD"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.SubprocessError):
        return None
    sha = done.stdout.strip()
    return sha if done.returncode == 0 and sha else None


def checks_folder(exercise: Exercise) -> Path:
    """The folder of the exercise's checks package, as the judge imports it (what grades, wherever it lives)."""
    spec = importlib.util.find_spec(exercise.checks_package)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"the checks package {exercise.checks_package} of {exercise.id} is not importable")
    return Path(list(spec.submodule_search_locations)[0])


def exercise_hash(exercise: Exercise, folder: Path) -> str:
    """sha256 of the exercise's catalog entry and of every file under `folder` (its checks package)."""
    digest = hashlib.sha256()
    digest.update(json.dumps(dataclasses.asdict(exercise), sort_keys=True).encode() + b"\0")
    files = sorted(
        p for p in folder.rglob("*") if p.is_file() and not any(part in SKIPPED for part in p.relative_to(folder).parts)
    )
    for path in files:
        data = path.read_bytes()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{len(data)}\0".encode() + data)
    return digest.hexdigest()


def of_batch(catalog: Catalog) -> Provenance:
    """The provenance of grades made now with `catalog` (only its exercises: those graded)."""
    return Provenance(
        version(),
        commit(catalog.root),
        hashlib.sha256((catalog.root / CATALOG).read_bytes()).hexdigest(),
        {e.id: exercise_hash(e, checks_folder(e)) for e in catalog.exercises},
    )


def changes(old: Provenance | None, new: Provenance) -> list[str]:
    """What changed between two provenances, one sentence each (none when nothing did)."""
    if old is None:
        return ["the old batch recorded no provenance (an older grader): what changed is unknown"]
    said = []
    if old.version != new.version:
        said.append(f"grader version {old.version} -> {new.version}")
    if old.commit != new.commit:
        said.append(f"course commit {old.commit or 'none'} -> {new.commit or 'none'}")
    if old.course != new.course:
        said.append("the catalog file changed")
    for exercise, digest in new.exercises.items():
        before = old.exercises.get(exercise)
        if before is None:
            said.append(f"{exercise}: not graded before")
        elif before != digest:
            said.append(f"{exercise}: its checks changed")
    said += [f"{exercise}: no longer graded" for exercise in old.exercises if exercise not in new.exercises]
    return said
