"""The student copy is a student's distribution: every file it holds is on an allow-list, its `grader` has the
student commands only, and what only the course can do is refused there in a sentence."""

from __future__ import annotations

import argparse
import fnmatch
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from grader import cli
from grader.catalog import load_catalog
from grader.instructor import cli as instructor_cli
from grader.instructor.release import ReleaseError, release

from . import support

# Every file a fresh release may hold, as patterns (`*` stays inside one folder): a file that matches none is
# refused, so anything new is placed here, for students, or left out of the copy (release.INSTRUCTOR_CODE,
# a manifest's `secret`).
ALLOWED = (
    ".gitignore",
    "README.md",
    "pyproject.toml",
    "exercises/catalog.toml",
    "exercises/ex[0-9][0-9]_*.py",
    "quizzes/practice.toml",
    "quizzes/practice-quiz.md",
    "quizzes/practice-quiz.html",
    # the student's commands and what they run
    "grader/__init__.py",
    "grader/__main__.py",
    "grader/catalog.py",
    "grader/cli.py",
    "grader/commands.py",
    "grader/doctor.py",
    "grader/grading.py",
    "grader/grading_engines.py",
    "grader/intake.py",
    "grader/notebook.py",
    "grader/notebook_build.py",
    "grader/notebook_source.py",
    "grader/paths.py",
    "grader/plan.py",
    "grader/private_network.py",
    "grader/pristine.py",
    "grader/progress.py",
    "grader/student_files.py",
    "grader/warm.py",
    "grader/engine/*.py",
    "grader/judge/*.py",
    "grader/judge/torch_errors.toml",
    "grader/rank/*.py",
    "grader/report/*.py",
    # `grader quiz list | practice`: the bank, drawing a version and marking an answer
    "grader/quiz/__init__.py",
    "grader/quiz/analysis.py",
    "grader/quiz/bank.py",
    "grader/quiz/cli.py",
    "grader/quiz/formula.py",
    "grader/quiz/grade.py",
    "grader/quiz/key.py",
    "grader/quiz/layouts.py",
    "grader/quiz/marks.py",
    "grader/quiz/practice.py",
    "grader/quiz/precision.py",
    "grader/quiz/responses.py",
    "grader/quiz/versions.py",
    # each exercise's rank and judge files, as its manifest lists them (no `secret` one)
    "grader/checks/__init__.py",
    "grader/checks/manifest.py",
    "grader/checks/ex[0-9][0-9]_*/__init__.py",
    "grader/checks/ex[0-9][0-9]_*/manifest.toml",
    "grader/checks/ex[0-9][0-9]_*/checks.py",
    "grader/checks/ex[0-9][0-9]_*/workers.py",
    "grader/checks/ex[0-9][0-9]_*/hypotheses.toml",
    "grader/checks/ex[0-9][0-9]_*/facts.py",
    "grader/checks/ex04_launch/protocol.py",
    "grader/checks/ex06_fsdp/cpu_fsdp1.py",
    "grader/checks/ex07_torchrun/shim.py",
    "grader/checks/ex08_ring_allreduce/inputs.py",
    "grader/checks/ex08_ring_allreduce/mixtures.py",
    "grader/checks/ex10_scaling/plots.py",
    "grader/checks/ex10_scaling/probes.py",
    "grader/checks/ex10_scaling/properties.py",
    "grader/checks/ex11_syncbn_unused/cpu_sync_batchnorm.py",
    "grader/checks/ex17_dcp_reshard/dcp_metadata.py",  # the restricted reader of a checkpoint's .metadata
)
STUDENT_HELP = ("list", "check", "hint", "watch", "reset", "node", "notebook", "doctor", "quiz")


def _allowed(path: str) -> bool:
    return any(fnmatch.fnmatchcase(path, p) and path.count("/") == p.count("/") for p in ALLOWED)


@pytest.fixture(scope="module")
def copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("release") / "student"
    done = support.run_grader(support.REPO, "release", "--out", str(out))
    assert done.returncode == 0, done.stderr
    return out


def _files(root: Path) -> list[str]:
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())


def test_every_file_of_the_copy_is_on_the_allow_list(copy: Path) -> None:
    files = _files(copy)
    refused = [path for path in files if not _allowed(path)]
    assert not refused, f"not on the allow-list (place them in ALLOWED, or leave them out of the copy): {refused}"
    unused = [p for p in ALLOWED if not any(fnmatch.fnmatchcase(f, p) and f.count("/") == p.count("/") for f in files)]
    assert not unused, f"allowed but not in the copy (stale entries): {unused}"


def test_the_allow_list_refuses_what_the_instructor_keeps() -> None:
    for kept in (
        "grader/instructor/release.py",
        "grader/course_lint.py",
        "grader/sandbox/bubblewrap.py",
        "grader/quiz/render.py",
        "grader/checks/ex10_scaling/answers.py",
        "grader/checks/ex02_data_sharding/hidden.py",
        "docs/SECURITY.md",
        "docs/maintainers/DIAGNOSES.md",
        "solutions/ex01_process_group.py",
        "tests/test_cli.py",
        "exercises/notes/ex01_extra.py",
    ):
        assert not _allowed(kept), kept


def test_every_module_of_the_copy_imports_from_the_copy_alone(copy: Path) -> None:
    """No shipped module imports one the copy left out (the instructor's, the quiz authoring, the sandbox)."""
    modules = [
        ".".join(path.with_suffix("").parts).removesuffix(".__init__")
        for path in (p.relative_to(copy) for p in (copy / "grader").rglob("*.py"))
        if path.name != "__main__.py"  # runs the command line
    ]
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    done = subprocess.run(
        [sys.executable, "-c", script, *modules],
        cwd=copy,
        env={"PYTHONPATH": str(copy), "PATH": "/usr/bin:/bin", "GRADER_COURSE": str(copy)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_the_copys_help_shows_the_student_commands_only(copy: Path, tmp_path: Path) -> None:
    done = support.run_grader(copy, "--help", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    listed = done.stdout.split("COMMAND\n", 1)[1].split("\noptions:", 1)[0]
    commands = [line.split()[0] for line in listed.splitlines() if line.startswith("    ") and line.split()]
    assert tuple(commands) == STUDENT_HELP, done.stdout
    for instructor in ("grade", "gradescope", "slurm", "release", "lint-course", "gradebook", "report"):
        assert f"    {instructor} " not in done.stdout
    quiz = support.run_grader(copy, "quiz", "--help", cwd=tmp_path)
    assert "practice" in quiz.stdout and "render" not in quiz.stdout and "lint" not in quiz.stdout, quiz.stdout


def test_the_course_help_still_shows_every_command(tmp_path: Path) -> None:
    done = support.run_grader(support.REPO, "--help", cwd=tmp_path)
    for command in (*STUDENT_HELP, "grade", "release", "lint-course"):
        assert f"    {command}" in done.stdout, command


def test_an_instructor_command_in_the_copy_is_refused_in_one_sentence(copy: Path, tmp_path: Path) -> None:
    done = support.run_grader(copy, "release", "--out", str(tmp_path / "again"), cwd=tmp_path)
    assert done.returncode == 2 and not (tmp_path / "again").exists()
    assert done.stderr.strip().splitlines() == [
        "grader: `grader release` is an instructor's command, and this is a student copy of the course, whose "
        "grader has the student commands only (`grader --help` lists them)"
    ]


def test_every_command_only_the_course_has_is_on_the_copys_refused_list() -> None:
    """A command the copy's grader lacks must be refused there in a sentence, not failed as a usage error."""
    commands = argparse.ArgumentParser().add_subparsers()
    instructor_cli.register(commands)
    assert set(commands.choices) == set(cli.INSTRUCTOR_COMMANDS)


def test_new_exercise_in_the_copy_is_refused_in_one_sentence(copy: Path, tmp_path: Path) -> None:
    done = support.run_grader(copy, "new-exercise", "all_to_all", cwd=tmp_path)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines() == [
        "grader: `grader new-exercise` is an instructor's command, and this is a student copy of the course, whose "
        "grader has the student commands only (`grader --help` lists them)"
    ]


def test_the_instructors_release_refuses_a_student_copy_as_its_course(copy: Path, tmp_path: Path) -> None:
    """Run from a copy, a release would hand out the student's solved files as the new stubs."""
    with pytest.raises(ReleaseError, match="is a student copy of the course .*release from the instructor's course"):
        release(load_catalog(copy), tmp_path / "again", support.REPO / "grader")
    assert not (tmp_path / "again").exists()


def test_solutions_in_the_copy_are_said_not_to_ship(copy: Path, tmp_path: Path) -> None:
    done = support.run_grader(copy, "check", "--solutions", "ex02", cwd=tmp_path)
    assert done.returncode == 2
    assert "the reference solutions are not part of a student copy of the course" in done.stderr
    assert "reset" not in done.stderr and "Traceback" not in done.stderr


def test_the_copys_pyproject_is_written_for_the_copy(copy: Path) -> None:
    pyproject = tomllib.loads((copy / "pyproject.toml").read_text())
    course = tomllib.loads((support.REPO / "pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    assert set(extras) == {"notebook", "plots"}, "the test and lint extras install what does not ship"
    assert extras["notebook"] == course["project"]["optional-dependencies"]["notebook"]
    assert "pytest" not in pyproject["tool"] and "ruff" not in pyproject["tool"] and "mypy" not in pyproject["tool"]
    assert pyproject["tool"]["grader"] == {"edition": "student"}
    assert [d for d in pyproject["project"]["dependencies"] if d.startswith("torch")] == [
        d for d in course["project"]["dependencies"] if d.startswith("torch")
    ]
    assert not any(d.startswith("jinja2") for d in pyproject["project"]["dependencies"])
    assert "README" not in (copy / "pyproject.toml").read_text().replace('readme = "README.md"', "")
    assert pyproject["project"]["scripts"] == {"grader": "grader.cli:main"}


def test_the_readme_shows_the_notebook_path_and_it_works_in_the_copy(copy: Path, tmp_path: Path) -> None:
    readme = (copy / "README.md").read_text()
    block = readme.split("## Working in Jupyter notebooks", 1)[1].split("```bash\n", 1)[1].split("```", 1)[0]
    commands = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["pip install -e '.[notebook]'", "grader notebook build", "jupyter lab notebooks/"]
    extra = tomllib.loads((copy / "pyproject.toml").read_text())["project"]["optional-dependencies"]["notebook"]
    assert {package.split(">")[0] for package in extra} >= {"jupyterlab", "ipykernel"}
    course = tmp_path / "course"
    shutil.copytree(copy, course)  # the build writes into the course
    done = support.run_grader(course, "notebook", "build", cwd=course)
    assert done.returncode == 0, done.stderr
    built = sorted(p.name for p in (course / "notebooks").glob("*.ipynb"))
    assert len(built) == len(load_catalog(course).exercises) and "ex02_data_sharding.ipynb" in built
    assert "jupyter lab notebooks/ex02_data_sharding.ipynb" in readme
