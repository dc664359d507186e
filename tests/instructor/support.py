"""Builders of submissions (as students hand them in) and of a course with a hidden check.

The kinds benchmarks/bench_grade.py grades too (solutions, stubs, a named mistake) come from
grader/instructor/sample_submissions.py, so the benchmark grades what the tests prove is graded right.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat

from grader import notebook_build, notebook_source
from grader.catalog import Catalog
from grader.instructor import sample_submissions

REPO = Path(__file__).resolve().parents[2]
SOLUTIONS = REPO / "solutions"
HIDDEN_CHECK = "seed_changes_order"  # exercise 2's hidden check (grader/checks/ex02_data_sharding/hidden.py)


def solutions(folder: Path) -> Path:
    return sample_submissions.solutions(REPO, folder)


def stubs(folder: Path) -> Path:
    return sample_submissions.stubs(REPO, folder)


def with_mistake(folder: Path, exercise_file: str, mistake: str) -> Path:
    """The solutions with one named mistake of tests/mistakes/ patched in."""
    return sample_submissions.with_mistake(REPO, folder, exercise_file, mistake)


def patched(folder: Path, exercise_file: str, old: str, new: str) -> Path:
    solutions(folder)
    path = folder / exercise_file
    source = path.read_text()
    assert old in source, f"{old!r} not in {exercise_file}"
    path.write_text(source.replace(old, new, 1))
    return folder


def hanging(folder: Path) -> Path:
    """start_epoch never returns: every run of exercise 2 hangs until its deadline."""
    return patched(
        folder,
        "ex02_data_sharding.py",
        "def start_epoch(loader: DataLoader, epoch: int) -> None:\n",
        "def start_epoch(loader: DataLoader, epoch: int) -> None:\n    while True:\n        pass\n",
    )


def syntax_error(folder: Path) -> Path:
    return patched(folder, "ex03_train_ddp.py", "def ", "def def ")


def notebook(path: Path, catalog: Catalog, exercise_id: str = "ex02_data_sharding") -> Path:
    """A notebook built by `grader notebook build`, with the solution typed into its exercise cell."""
    exercise = catalog.get(exercise_id)
    book = notebook_build.build_notebook(exercise, REPO / "exercises" / exercise.file)
    (cell,) = [c for c in book.cells if notebook_source.TAG in c.metadata.get("tags", [])]
    cell.source = (SOLUTIONS / exercise.file).read_text() + "\n%time\n"  # a magic line must not break it
    nbformat.write(book, path)
    return path


def course_copy(root: Path) -> Path:
    """A private copy of the course (with its grader package), for commands that write into it."""
    for name in ("exercises", "solutions", "quizzes", "docs"):
        shutil.copytree(REPO / name, root / name)
    shutil.copytree(REPO / "grader", root / "grader", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("README.md", "pyproject.toml"):
        if (REPO / name).is_file():
            shutil.copyfile(REPO / name, root / name)
    return root


def run_grader(
    course: Path, *args: str, cwd: Path | None = None, timeout: float = 300, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess:
    """`python -m grader ARGS` on `course` with that course's own grader package (and `env` added)."""
    env = {**os.environ, **(env or {}), "GRADER_COURSE": str(course), "PYTHONPATH": str(course), "NO_COLOR": "1"}
    return subprocess.run(
        [sys.executable, "-m", "grader", *args],
        cwd=cwd or course,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


CHEAP_EXERCISES = "ex01,ex02"  # what the batch tests grade: the two fastest exercises, one with a hidden check
CLASS_KINDS = (
    solutions,
    stubs,
    lambda folder: with_mistake(folder, "ex02_data_sharding.py", "forgot_set_epoch"),
    lambda folder: with_mistake(folder, "ex01_process_group.py", "no_destroy"),
    lambda folder: with_mistake(folder, "ex02_data_sharding.py", "seed_ignored"),  # only the hidden check fails
)


def a_class(folder: Path, count: int) -> list[Path]:
    """`count` submissions, solutions, stubs and named mistakes of exercises 1 and 2 in turn."""
    return [CLASS_KINDS[i % len(CLASS_KINDS)](folder / f"student{i:02d}") for i in range(count)]
