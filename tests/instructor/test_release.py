"""`grader release`: a student copy that grades on its own and holds no solution and no hidden check."""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor.release import ReleaseError, public_catalog, release

from . import support

GRADER_PACKAGE = support.REPO / "grader"


def _solution_bodies() -> list[str]:
    """The source of every function body of the reference solutions (the code students must write)."""
    bodies = []
    for path in sorted(support.SOLUTIONS.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                bodies.append("\n".join(ast.get_source_segment(source, stmt) or "" for stmt in node.body))
    return bodies


@pytest.fixture(scope="module")
def released(hidden_course: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student"
    done = support.run_grader(hidden_course, "release", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def test_release_holds_no_solution_and_no_hidden_check(released: Path) -> None:
    assert not (released / "solutions").exists() and not (released / "tests").exists()
    assert not list(released.rglob("hidden.py"))
    assert not list((released / "quizzes").glob("*.toml")), "question banks hold the answers"
    assert sorted(p.name for p in (released / "quizzes").iterdir()) == ["practice-quiz.html", "practice-quiz.md"]
    assert not (released / "docs" / "INSTRUCTORS.md").exists()
    assert (support.REPO / "docs" / "maintainers").is_dir()
    assert not (released / "docs" / "maintainers").exists(), "maintainers' notes are not for students"
    assert (released / "docs" / "SECURITY.md").is_file()
    texts = {p: p.read_text(errors="replace") for p in released.rglob("*") if p.is_file()}
    leaks = [p for p, text in texts.items() if support.HIDDEN_CHECK in text]
    assert not leaks, f"hidden check named in {leaks}"
    for body in _solution_bodies():
        assert not [p for p, text in texts.items() if body in text], f"solution code shipped:\n{body}"
    assert len(load_catalog(released).exercises) == len(load_catalog(support.REPO).exercises)


def test_released_copy_grades_stubs_and_solutions(released: Path, tmp_path: Path) -> None:
    stubs = support.run_grader(released, "check", "ex02", cwd=tmp_path)
    assert stubs.returncode == 1, stubs.stdout + stubs.stderr
    assert "not implemented yet" in stubs.stdout
    student = tmp_path / "student"
    student.mkdir()
    shutil.copyfile(support.SOLUTIONS / "ex02_data_sharding.py", student / "ex02_data_sharding.py")
    solved = support.run_grader(released, "check", "ex02", "--path", str(student), cwd=tmp_path)
    assert solved.returncode == 0, solved.stdout + solved.stderr
    assert "public checks passed" in solved.stdout and "all checks passed" not in solved.stdout


def test_public_runs_never_show_hidden_checks(hidden_course: Path, tmp_path: Path) -> None:
    done = support.run_grader(
        hidden_course, "check", "ex02", "--path", str(hidden_course / "solutions"), "--json", "-", cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert support.HIDDEN_CHECK not in done.stdout + done.stderr
    assert "public checks passed" in done.stdout and "all checks passed" not in done.stdout


def test_the_reference_solutions_are_checked_with_the_hidden_checks_too(hidden_course: Path, tmp_path: Path) -> None:
    done = support.run_grader(hidden_course, "check", "ex02", "--solutions", "--world-size", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert f"PASS  {support.HIDDEN_CHECK}" in done.stdout and "all checks passed: 4/4" in done.stdout


def test_hidden_entries_leave_the_catalog_with_comments_kept() -> None:
    text = (
        '# the course\n[[exercise]]\nid = "a"\n\n[[exercise.check]]\nname = "shown"\n\n'
        '[[exercise.check]]\nname = "secret"\nvisibility = "hidden"\n# trailing note\n'
    )
    released = public_catalog(text)
    assert "secret" not in released and "shown" in released and released.startswith("# the course")


def test_release_refuses_hidden_code_that_would_ship(tmp_path: Path) -> None:
    course = tmp_path / "course"
    shutil.copytree(support.REPO / "exercises", course / "exercises")
    catalog_file = course / "exercises" / "catalog.toml"
    catalog_file.write_text(
        catalog_file.read_text().replace(
            'name = "reshuffles_each_epoch"', 'name = "reshuffles_each_epoch"\nvisibility = "hidden"'
        )
    )
    with pytest.raises(ReleaseError, match="reshuffles_each_epoch.*move it to hidden.py"):
        release(load_catalog(course), tmp_path / "out", GRADER_PACKAGE)


def test_release_refuses_a_non_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(ReleaseError, match="not empty"):
        release(load_catalog(support.REPO), tmp_path / "out", GRADER_PACKAGE)


def test_release_ships_only_the_practice_pool(released: Path) -> None:
    """Exam questions stay with the instructor: the practice sheet holds the practice pool, whole."""
    from grader.quiz.bank import load_banks

    bank = load_banks(support.REPO / "quizzes")
    practice = [q for q in bank.questions if q.pool == "practice"]
    exam = [q for q in bank.questions if q.pool == "exam"]
    assert practice and exam
    sheet = (released / "quizzes" / "practice-quiz.md").read_text()
    assert sheet.count("\n### ") == len(practice)
    for question in practice:
        if not question.parametric:
            assert question.text.strip() in sheet, question.id
    for question in exam:
        longest_line = max(question.text.strip().splitlines(), key=len)
        assert longest_line not in sheet, f"exam question {question.id} shipped"
        for option in question.options:
            assert option.text not in sheet, f"an option of exam question {question.id} shipped"
