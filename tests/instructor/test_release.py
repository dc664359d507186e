"""`grader release`: a student copy that grades on its own and holds no solution and no hidden check."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor.release import ReleaseError, public_catalog, release
from grader.quiz.bank import Question, load_banks

from . import support

GRADER_PACKAGE = support.REPO / "grader"


def _solution_bodies() -> list[str]:
    """The source of every function body of the reference solutions (the code students must write), but
    for a body that only returns a name (an identity's `return x`), which any code may hold."""
    bodies = []
    for path in sorted(support.SOLUTIONS.glob("*.py")):
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef):
                only = node.body[0] if len(node.body) == 1 else None
                if isinstance(only, ast.Return) and isinstance(only.value, ast.Name):
                    continue
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
    banks = [p.name for p in (released / "quizzes").glob("*.toml")]
    assert banks == ["practice.toml"], "the instructor's banks hold the exam pool and its key"
    assert sorted(p.name for p in (released / "quizzes").iterdir()) == [
        "practice-quiz.html",
        "practice-quiz.md",
        "practice.toml",
    ]
    assert not (released / "docs" / "INSTRUCTORS.md").exists()
    assert (support.REPO / "docs" / "maintainers").is_dir()
    assert not (released / "docs" / "maintainers").exists(), "maintainers' notes are not for students"
    assert not (released / "docs").exists(), "every doc is the instructor's (the sandbox, grading, the notes)"
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
    assert {entry["check"] for entry in json.loads(done.stdout)} == {  # --json -: only JSON on stdout
        spec.name for spec in load_catalog(hidden_course).get("ex02").checks if spec.visibility == "public"
    }
    assert "public checks passed" in done.stderr and "all checks passed" not in done.stderr  # the report


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


def _documented(document: Path, command: str) -> list[str]:
    """The arguments of the one line of `document`'s code blocks that starts with `command`, comment left out."""
    lines = [line for line in document.read_text().splitlines() if line.strip().startswith(command + " ")]
    assert len(lines) == 1, f"{document.name} shows `{command}` {len(lines)} times"
    return shlex.split(lines[0], comments=True)


def test_the_readmes_release_command_works_as_written(tmp_path: Path) -> None:
    """Run in the course, as an instructor who copies it from the README would."""
    course = support.course_copy(tmp_path / "course")
    argv = _documented(support.REPO / "README.md", "grader release")
    done = support.run_grader(course, *argv[1:], cwd=course)
    assert done.returncode == 0, done.stderr
    out = (course / argv[argv.index("--out") + 1]).resolve()
    assert (out / "exercises" / "catalog.toml").is_file() and not (course / "student-copy").exists()


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


def _bank() -> tuple[list[Question], list[Question]]:
    """The course's practice pool and exam pool."""

    bank = load_banks(support.REPO / "quizzes")
    return [q for q in bank.questions if q.pool == "practice"], [q for q in bank.questions if q.pool == "exam"]


def test_the_practice_bank_holds_the_practice_pool_and_no_exam_question_ships(released: Path) -> None:
    """The copy's bank is the practice pool, whole; no exam question's id or text is anywhere in the copy."""
    practice, exam = _bank()
    shipped = load_banks(released / "quizzes", [e.id for e in load_catalog(released).exercises])
    assert not shipped.problems, shipped.problems
    assert sorted(q.id for q in shipped.questions) == sorted(q.id for q in practice)
    assert {q.pool for q in shipped.questions} == {"practice"}
    texts = {p: p.read_text(errors="replace") for p in released.rglob("*") if p.is_file()}
    for question in exam:
        found = [p for p, text in texts.items() if re.search(rf"(?<![\w-]){re.escape(question.id)}(?![\w-])", text)]
        assert not found, f"exam question id {question.id} in {found}"
        longest_line = max(question.text.strip().splitlines(), key=len)
        assert not [p for p, text in texts.items() if longest_line in text], f"exam question {question.id} shipped"


def _readme_commands(readme: str) -> list[str]:
    """The commands of the README's first code block, comments left out."""
    block = readme.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip() and not line.startswith("#")]


def test_the_copy_has_a_readme_for_students(released: Path) -> None:
    readme = (released / "README.md").read_text()
    assert readme != (support.REPO / "README.md").read_text(), "the instructor's README shipped"
    assert _readme_commands(readme) == [
        "python3.11 -m venv .venv && . .venv/bin/activate && pip install torch==2.13.0 && pip install -e .",
        "grader check",
    ]
    assert readme.index("grader watch") < readme.index("grader list"), "grader watch is the loop it leads with"
    for instructor_only in ("--solutions", "pytest", "INSTRUCTORS.md", "QUIZZES.md", "solutions/", "benchmarks"):
        assert instructor_only not in readme, instructor_only
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", readme)
    relative = [link for link in links if not re.match(r"[a-z]+://", link)]
    assert relative, "the README links the exercise files"
    for link in relative:
        assert (released / link).is_file(), f"README links {link}, which does not ship"
    for exercise in load_catalog(released).exercises:
        assert f"(exercises/{exercise.file})" in readme, f"{exercise.id} missing from the exercises table"


def test_the_readmes_check_command_works_in_the_copy(released: Path, tmp_path: Path) -> None:
    """`grader check` on the untouched copy stops at ex01, not implemented; nothing asks for solutions."""
    copy = tmp_path / "copy"
    shutil.copytree(released, copy)  # `grader check` records progress in the copy: keep the shared one clean
    done = support.run_grader(copy, "check", cwd=copy)
    output = done.stdout + done.stderr
    assert done.returncode != 0, output
    assert "ex01_process_group" in output and "not implemented" in output, output
    assert "solutions" not in output.lower(), output


def test_quiz_list_and_practice_work_in_the_copy(released: Path, tmp_path: Path) -> None:
    practice, _ = _bank()
    listing = support.run_grader(released, "quiz", "list", cwd=tmp_path)
    assert listing.returncode == 0, listing.stderr
    assert f"{len(practice)} question(s)" in listing.stdout

    from grader.quiz.key import key_data
    from grader.quiz.versions import draw, select

    chosen = select([q for q in practice if q.exercise == "ex01_process_group"], seed=3, count=2)
    assert len(chosen) == 2 and all(not q.parametric for q in chosen)
    entries = key_data(draw(chosen, 3, 1, "Practice quiz", "practice"))["questions"]
    right = ";".join(entries[0]["answer"])
    letters = [option["letter"] for option in entries[1]["options"]]
    wrong = next(letter for letter in letters if letter not in entries[1]["answer"])
    done = subprocess.run(
        [sys.executable, "-m", "grader", "quiz", "practice", "--exercise", "ex01", "--count", "2", "--seed", "3"],
        cwd=tmp_path,
        env={**os.environ, "GRADER_COURSE": str(released), "PYTHONPATH": str(released), "NO_COLOR": "1"},
        input=f"{right}\nnot a letter\n{wrong}\n",
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert out.index("Right.") < out.index("could not read") < out.index("Wrong."), out
    assert "1/2 right" in out
    for entry in entries:
        assert entry["id"] in out
        if entry["explanation"]:
            assert entry["explanation"] in out, entry["id"]
    right_options = [o for o in entries[0]["options"] if o["correct"] and o["explanation"]]
    assert all(o["explanation"] in out for o in right_options)
    wrong_option = next(o for o in entries[1]["options"] if o["letter"] == wrong)
    assert wrong_option["explanation"] in out


@pytest.mark.skipif(not os.environ.get("GRADER_TEST_FRESH_INSTALL"), reason="slow: set GRADER_TEST_FRESH_INSTALL=1")
def test_the_readmes_install_command_works_in_a_fresh_venv(released: Path, tmp_path: Path) -> None:
    """The README's first command, as a student types it (downloads torch: minutes, and needs the network)."""
    copy = tmp_path / "copy"
    shutil.copytree(released, copy)
    install, check = _readme_commands((copy / "README.md").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "GRADER_COURSE", "VIRTUAL_ENV")}
    done = subprocess.run(
        ["bash", "-c", f"{install} && {check}"], cwd=copy, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode != 0 and "not implemented" in done.stdout, done.stdout + done.stderr


def test_the_practice_bank_keeps_text_that_looks_like_a_comment() -> None:
    from grader.instructor.release import practice_bank

    bank = (
        '# about the exam question below\n[[questions]]\nid = "e"\npool = "exam"\n# trailing note\n\n'
        '[[questions]]\nid = "p"\npool = "practice"\ntext = """\nRun this:\n# a shell comment in the code\n"""\n'
        "# the next one is an exam question\n"
    )
    text = practice_bank([bank])
    assert '"e"' not in text and "exam question" not in text and "about the exam" not in text
    assert "# a shell comment in the code" in text and 'id = "p"' in text


def test_the_readmes_hand_in_check_works_in_the_copy(released: Path, tmp_path: Path) -> None:
    """ "What to hand in": a zip of the course folder, checked as the grader will grade it, each choice said."""
    readme = (released / "README.md").read_text()
    assert "grader check --path handin.zip" in readme
    handin = shutil.make_archive(str(tmp_path / "handin"), "zip", released.parent, released.name)
    done = support.run_grader(released, "check", "--path", handin, "ex01", "--world-size", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr  # the stub: checked, and failing
    assert "graded: ex01_process_group: exercises/ex01_process_group.py (in a course folder)" in done.stdout
    assert "not implemented" in done.stdout + done.stderr
