"""`grader new-exercise`: a new exercise passes the lint and the suite as made, its stub failing as designed."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor.new_exercise import NewExerciseError, new_exercise

from . import support


def _course(root: Path) -> Path:
    course = support.course_copy(root)
    shutil.copytree(support.REPO / "tests", course / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    return course


def test_a_new_exercise_passes_the_lint_and_the_suite_and_its_stub_fails(tmp_path: Path) -> None:
    course = _course(tmp_path / "course")
    made = support.run_grader(course, "new-exercise", "average_values", "--title", "Average a value across ranks")
    assert made.returncode == 0, made.stderr
    assert made.stdout.startswith("ex19_average_values written: exercises/ex19_average_values.py")
    lint = support.run_grader(course, "lint-course")
    assert lint.returncode == 0 and lint.stdout.startswith("course OK: 19 exercises"), lint.stdout + lint.stderr
    quiz = support.run_grader(course, "quiz", "lint")
    assert quiz.returncode == 0 and "no problems" in quiz.stdout, quiz.stdout + quiz.stderr
    solved = support.run_grader(course, "check", "--solutions", "ex19")
    assert solved.returncode == 0 and "PASS  averages [W=2 and W=4]" in solved.stdout, solved.stdout
    stub = support.run_grader(course, "check", "ex19")
    assert stub.returncode == 1, stub.stdout
    assert "not implemented yet: average() still raises NotImplementedError" in stub.stdout
    suite = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-k", "ex19"]
        + ["tests/test_mistakes.py", "tests/test_alternatives.py", "tests/test_null_submissions.py"],
        cwd=course,
        env={**os.environ, "PYTHONPATH": str(course), "GRADER_COURSE": str(course)},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert suite.returncode == 0, suite.stdout[-3000:]
    assert "6 passed" in suite.stdout, suite.stdout[-3000:]  # a mistake, an alternative, four null stubs


@pytest.fixture
def course(tmp_path: Path) -> Path:
    return support.course_copy(tmp_path / "course")


def _unchanged(course: Path, catalog: str) -> None:
    assert (course / "exercises" / "catalog.toml").read_text() == catalog
    assert not list(course.glob("**/ex19_*")), "a refused exercise wrote files"


@pytest.mark.parametrize(
    ("name", "title", "said"),
    [
        ("Average", None, "'Average' is not an exercise name"),
        ("two__words", None, "'two__words' is not an exercise name"),
        ("../escape", None, "'../escape' is not an exercise name"),
        ("process_group", None, "the course already has an exercise named process_group: ex01_process_group"),
        ("average", 'say "hi"', "must be one line of text without quotes or backslashes"),
        ("average", "two\nlines", "must be one line of text without quotes or backslashes"),
    ],
)
def test_a_refused_exercise_says_why_and_writes_nothing(course: Path, name: str, title: str | None, said: str) -> None:
    catalog = (course / "exercises" / "catalog.toml").read_text()
    with pytest.raises(NewExerciseError, match=re.escape(said)):
        new_exercise(course, name, title)
    _unchanged(course, catalog)


def test_a_student_copy_makes_no_exercise(course: Path) -> None:
    shutil.rmtree(course / "solutions")
    with pytest.raises(NewExerciseError, match="exercises are made in the instructor's course, not in a student copy"):
        new_exercise(course, "average")


def test_a_file_in_the_way_is_named_and_nothing_is_written(course: Path) -> None:
    (course / "tests" / "mistakes").mkdir(parents=True)
    (course / "tests" / "mistakes" / "ex19_average.toml").write_text("# mine\n")
    catalog = (course / "exercises" / "catalog.toml").read_text()
    with pytest.raises(NewExerciseError, match="tests/mistakes/ex19_average.toml exists already"):
        new_exercise(course, "average")
    assert (course / "exercises" / "catalog.toml").read_text() == catalog
    assert not (course / "exercises" / "ex19_average.py").exists()


def test_it_is_numbered_after_the_last_exercise_and_the_last_bank(course: Path) -> None:
    made = new_exercise(course, "average")
    assert made.exercise_id == "ex19_average"
    assert load_catalog(course).get("ex19_average").title == "Average"
    banks = sorted(path.name for path in (course / "quizzes").glob("*.toml"))
    assert banks[-1] == "14_average.toml"
