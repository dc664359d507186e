"""`grader gradescope`: the course as a Gradescope autograder, one zip to upload as it is.

The zip holds `setup.sh` and `run_autograder` (rendered from templates) and `course/`: the student
copy that `grader release` makes (stubs, README, pyproject; no solutions, no question banks, and its
refusal of a hidden check left in checks.py), with the whole grader package put back, hidden checks
and all judge code included, and the course's full catalog (or the exercises chosen for this
assignment: `--exercises`). The entries are sorted and dated 1980-01-01, so the same course gives the same bytes.
"""

from __future__ import annotations

import importlib.metadata
import os
import shutil
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor.release import release
from grader.instructor.templating import render
from grader.paths import CATALOG

ZIP_NAME = "autograder.zip"
COURSE_DIR = "course"
TORCH_CPU_INDEX = "https://download.pytorch.org/whl/cpu"
PYTHON_MIN = (3, 11)  # pyproject's requires-python
PYTHON_NEWEST_TRIED = 14  # setup.sh looks for python3.14 down to python3.11
NOT_FOR_GRADING = ("docs", "quizzes")  # in the student copy, of no use to the autograder
SCRIPTS = {"setup.sh": "setup.sh.j2", "run_autograder": "run_autograder.j2"}
FIXED_DATE = (1980, 1, 1, 0, 0, 0)


@dataclass(frozen=True)
class BundleOptions:
    torch_version: str
    hidden_visibility: str = "hidden"


def installed_torch() -> str | None:
    """The version of the torch installed here (without a local label such as +cpu), read without importing it."""
    try:
        return importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return None


def _blocks(text: str) -> list[str]:
    """The catalog cut at its table headers, each block with its own comments."""
    blocks: list[list[str]] = [[]]
    for line in text.splitlines(keepends=True):
        if line.startswith("["):
            blocks.append([])
        blocks[-1].append(line)
    return ["".join(block) for block in blocks if block]


def catalog_text(text: str, keep: Iterable[str]) -> str:
    """The catalog's text with only the exercises in `keep`, hidden checks and comments kept."""
    wanted = set(keep)
    kept, current = [], None
    for block in _blocks(text):
        if block.startswith("[[exercise]]"):
            current = tomllib.loads(block.replace("[[exercise]]", "", 1)).get("id")
        if current is None or current in wanted:
            kept.append(block)
    return "".join(kept)


def _stage_course(catalog: Catalog, grader_package: Path, course: Path) -> None:
    """The student copy of `catalog`'s exercises, with the grader and the catalog whole again."""
    release(catalog, course, grader_package)
    for name in NOT_FOR_GRADING:
        shutil.rmtree(course / name, ignore_errors=True)
    shutil.rmtree(course / "grader")
    shutil.copytree(grader_package, course / "grader", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (course / CATALOG).write_text(catalog_text((catalog.root / CATALOG).read_text(), (e.id for e in catalog.exercises)))


def _scripts(options: BundleOptions) -> dict[str, str]:
    values = dict(
        course_dir=COURSE_DIR,
        torch=options.torch_version,
        torch_index=TORCH_CPU_INDEX,
        python_min=".".join(map(str, PYTHON_MIN)),
        python_min_tuple=", ".join(map(str, PYTHON_MIN)),
        python_candidates=["python3", *(f"python3.{m}" for m in range(PYTHON_NEWEST_TRIED, PYTHON_MIN[1] - 1, -1))],
        hidden_visibility=options.hidden_visibility,
    )
    return {name: render(template, **values) for name, template in SCRIPTS.items()}


def _add(archive: zipfile.ZipFile, name: str, data: bytes, executable: bool) -> None:
    info = zipfile.ZipInfo(name, date_time=FIXED_DATE)
    info.external_attr = ((0o755 if executable else 0o644) | 0o100000) << 16  # a regular file, with its mode
    info.compress_type = zipfile.ZIP_DEFLATED
    archive.writestr(info, data)


def build(catalog: Catalog, out_dir: Path, grader_package: Path, options: BundleOptions) -> Path:
    """Write `out_dir/autograder.zip` for `catalog`'s exercises (all of the course's, or an assignment's).

    Raises ReleaseError when the course cannot be shipped safely."""
    with tempfile.TemporaryDirectory(prefix="grader-gradescope-") as staging:
        course = Path(staging) / COURSE_DIR
        _stage_course(catalog, grader_package, course)
        out_dir.mkdir(parents=True, exist_ok=True)
        path = out_dir / ZIP_NAME
        partial = path.with_suffix(".zip.part")
        with zipfile.ZipFile(partial, "w") as archive:
            for name, text in _scripts(options).items():
                _add(archive, name, text.encode(), executable=True)
            for file in sorted(p for p in course.rglob("*") if p.is_file()):
                relative = file.relative_to(course.parent).as_posix()
                _add(archive, relative, file.read_bytes(), executable=os.access(file, os.X_OK))
        partial.replace(path)
    return path
