"""An exercise's manifest: which files of its checks package run where, as an allow-list by side.

Each package `grader/checks/<exercise>/` has a `manifest.toml` naming every file beside it in one of
three lists: `rank` (enters the sandbox, runs beside student code), `judge` (the grader's own process;
a student release ships it) and `secret` (the grader's process only: never in a sandbox or a release).
`__init__.py` is implicit and rank side. The sandbox's view (grader/sandbox/rank_view.py), the release
and `grader lint-course` all read it, so a new file is judge-only until its manifest says otherwise.
Read with tomllib, without torch: the judge and the lint use it too.
"""

from __future__ import annotations

import json
import tomllib
from dataclasses import dataclass
from pathlib import Path

MANIFEST = "manifest.toml"
IMPLICIT = ("__init__.py", MANIFEST)  # never listed: the package's __init__ (rank side) and the manifest itself
SIDES = ("rank", "judge", "secret")
MISSING = "missing: every exercise package lists its files by side (rank, judge, secret) in one"
HEADER = "# Which of this exercise's files run where (grader/checks/manifest.py reads it).\n"


class ManifestError(Exception):
    """A manifest that cannot be trusted to draw the trust boundary; the message names the file and the reason."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


@dataclass(frozen=True)
class Manifest:
    """The files of one exercise package by side, as its manifest lists them (names, not paths)."""

    rank: tuple[str, ...] = ()
    judge: tuple[str, ...] = ()
    secret: tuple[str, ...] = ()

    def sides(self) -> list[tuple[str, str]]:
        """(file, side) for every listed file, rank's first, then judge's and secret's; a file listed twice comes
        twice."""
        return [(name, side) for side in SIDES for name in getattr(self, side)]

    def text(self) -> str:
        """The manifest as `manifest.toml` holds it (a release writes its students' copy with this)."""
        return HEADER + "".join(f"{side} = {json.dumps(list(getattr(self, side)))}\n" for side in SIDES)


def _name_problem(name: object) -> str | None:
    """Why a list entry is not the name of a file of the package, or None: a name with a folder in it
    could put a file from anywhere into a sandbox."""
    if not isinstance(name, str):
        return f"{name!r} is not a file name (a string)"
    if not name or name in (".", "..") or "/" in name or "\\" in name:
        return f"{name!r} is not the name of a file beside the manifest (no folders)"
    if name in IMPLICIT:
        return f"{name} is implicit and is not listed ({IMPLICIT[0]} is always rank side)"
    return None


def parse(text: str, path: Path) -> Manifest:
    """The manifest in `text` (read from `path`, which errors name); its shape only, not its files."""
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ManifestError(path, f"not valid TOML: {exc}") from exc
    unknown = sorted(set(table) - set(SIDES))
    if unknown:
        raise ManifestError(
            path, f"unknown key(s) {', '.join(map(repr, unknown))}: a manifest has only {', '.join(SIDES)}"
        )
    for side, names in table.items():
        if not isinstance(names, list):
            raise ManifestError(path, f"{side} must be a list of file names, not {type(names).__name__} {names!r}")
        for name in names:
            problem = _name_problem(name)
            if problem is not None:
                raise ManifestError(path, f"{side}: {problem}")
    return Manifest(*(tuple(table.get(side, ())) for side in SIDES))


def duplicates(manifest: Manifest) -> list[tuple[str, str, str]]:
    """(file, first side, second side) for each file listed again after its first listing."""
    first: dict[str, str] = {}
    again = []
    for name, side in manifest.sides():
        if name in first:
            again.append((name, first[name], side))
        first.setdefault(name, side)
    return again


def twice(name: str, first: str, second: str) -> str:
    """Why a file listed twice is refused."""
    where = f"twice in {first}" if first == second else f"in both {first} and {second}"
    return f"{name} is listed {where}: each file runs on exactly one side"


def missing_reason(name: str, side: str, package_dir: Path) -> str:
    """Why a listed file that the package does not hold is refused."""
    return f"{name} is listed in {side}, but {package_dir} has no such file"


def package_files(package_dir: Path) -> list[str]:
    """The names in the package folder that its manifest must list: all but the implicit ones and bytecode."""
    return sorted(
        path.name
        for path in package_dir.iterdir()
        if path.name not in IMPLICIT and path.name != "__pycache__" and path.suffix != ".pyc"
    )


def load_manifest(package_dir: Path) -> Manifest:
    """The manifest of the exercise package at `package_dir`, checked: each file listed once and present."""
    path = package_dir / MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise ManifestError(path, MISSING) from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ManifestError(path, f"cannot be read: {exc}") from exc
    manifest = parse(text, path)
    again = duplicates(manifest)
    if again:
        raise ManifestError(path, twice(*again[0]))
    absent = [(name, side) for name, side in manifest.sides() if not (package_dir / name).is_file()]
    if absent:
        raise ManifestError(path, missing_reason(*absent[0], package_dir))
    return manifest
