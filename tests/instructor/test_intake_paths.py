"""Every layout students hand in, graded on both paths: `grader grade` given what a student handed in (a folder
or a zip named after them), and the Gradescope autograder given its upload folder (`/autograder/submission`,
which its run_autograder grades with `grader grade`). Both choose the same file for each exercise, for the same
reasons, by the one rule of grader/intake.py; `grader check --path` takes a zip as they do.

One layout is graded end to end on both paths, with the same score: tests/instructor/test_gradescope_bundle.py
(`test_an_upload_scores_what_grader_grade_scores_for_the_same_files`)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest

from grader import notebook_build
from grader.catalog import load_catalog
from grader.instructor import gradescope_bundle
from grader.instructor.submissions import Submission, prepare
from grader.intake import SubmissionError

from . import support

CATALOG = load_catalog(support.REPO)
CHEAP = CATALOG.select(support.CHEAP_EXERCISES.split(","))  # an assignment of exercises 1 and 2
EX01, EX02 = "ex01_process_group", "ex02_data_sharding"


def _put(folder: Path, name: str, source: Path) -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(source, folder / name)


def _solved(folder: Path, name: str, exercise_id: str) -> None:
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    support.notebook(folder / name, CATALOG, exercise_id)


def _stub_notebook(folder: Path, name: str, exercise_id: str) -> None:
    exercise = CATALOG.get(exercise_id)
    (folder / name).parent.mkdir(parents=True, exist_ok=True)
    nbformat.write(notebook_build.build_notebook(exercise, support.REPO / "exercises" / exercise.file), folder / name)


def _loose(folder: Path) -> None:
    _put(folder, f"{EX01}.py", support.SOLUTIONS / f"{EX01}.py")
    _solved(folder, f"{EX02}.ipynb", EX02)


def _course_folder(folder: Path) -> None:
    for exercise_id in (EX01, EX02):
        _put(folder, f"exercises/{exercise_id}.py", support.SOLUTIONS / f"{exercise_id}.py")


def _repository(folder: Path) -> None:
    """A whole repository as GitHub zips it: work in exercises/ and in a notebook, the other one the stub."""
    repo = folder / "repo-main"
    _put(repo, f"exercises/{EX01}.py", support.SOLUTIONS / f"{EX01}.py")
    _put(repo, f"exercises/{EX02}.py", support.REPO / "exercises" / f"{EX02}.py")
    _solved(repo, f"notebooks/{EX02}.ipynb", EX02)
    _stub_notebook(repo, f"notebooks/{EX01}.ipynb", EX01)
    (repo / "README.md").write_text("my course\n")
    (repo / ".git" / "objects").mkdir(parents=True)
    (repo / ".git" / "objects" / "ab").write_bytes(b"\0blob")


def _re_uploads(folder: Path) -> None:
    _put(folder, f"{EX01}-1.py", support.SOLUTIONS / f"{EX01}.py")
    _put(folder, f"{EX02}_late.py", support.SOLUTIONS / f"{EX02}.py")


def _canvas(folder: Path) -> None:
    """Canvas's bulk-download names (tests/instructor/test_submissions.py cites where Canvas makes them)."""
    _put(folder, f"smithjohn_12345_67890_{EX01}.py", support.SOLUTIONS / f"{EX01}.py")
    _put(folder, f"smithjohn_LATE_12345_67891_{EX02}-1.py", support.SOLUTIONS / f"{EX02}.py")


def _notebooks(folder: Path) -> None:
    """Notebooks told by their metadata; one of an exercise not in the assignment is simply not its file."""
    _solved(folder, "homework one.ipynb", EX01)
    _solved(folder, f"{EX02}-Copy1.ipynb", EX02)
    _solved(folder, "ex04_launch.ipynb", "ex04_launch")


def _two_versions(folder: Path) -> None:
    _put(folder, f"{EX01}.py", support.SOLUTIONS / f"{EX01}.py")
    (folder / "exercises").mkdir()
    (folder / f"exercises/{EX01}.py").write_text((support.SOLUTIONS / f"{EX01}.py").read_text() + "\nDEBUG = 1\n")
    _put(folder, f"{EX02}.py", support.SOLUTIONS / f"{EX02}.py")


# layout -> (what the student has, zipped or not; the files graded, as `exercise: graded (why)`; problems)
LAYOUTS: dict[str, tuple[Callable[[Path], None], bool, list[str], dict[str, str]]] = {
    "loose files": (
        _loose,
        False,
        [f"{EX01}: {EX01}.py (named as in the course)", f"{EX02}: {EX02}.ipynb (a notebook)"],
        {},
    ),
    "a course folder": (
        _course_folder,
        False,
        [f"{EX01}: exercises/{EX01}.py (in a course folder)", f"{EX02}: exercises/{EX02}.py (in a course folder)"],
        {},
    ),
    "a repository": (
        _repository,
        False,
        [
            f"{EX01}: repo-main/exercises/{EX01}.py (in a course folder); set aside: repo-main/notebooks/{EX01}.ipynb "
            "(the untouched stub)",
            f"{EX02}: repo-main/notebooks/{EX02}.ipynb (in a course folder, a notebook); set aside: "
            f"repo-main/exercises/{EX02}.py (the untouched stub)",
        ],
        {},
    ),
    "a zipped repository": (
        _repository,
        True,
        [
            f"{EX01}: exercises/{EX01}.py (in a course folder); set aside: notebooks/{EX01}.ipynb (the untouched stub)",
            f"{EX02}: notebooks/{EX02}.ipynb (in a course folder, a notebook); set aside: exercises/{EX02}.py (the "
            "untouched stub)",
        ],
        {},
    ),
    "re-uploads": (
        _re_uploads,
        False,
        [f"{EX01}: {EX01}-1.py (a re-upload's name)", f"{EX02}: {EX02}_late.py (a late submission's name)"],
        {},
    ),
    "Canvas's names": (
        _canvas,
        False,
        [
            f"{EX01}: smithjohn_12345_67890_{EX01}.py (Canvas's download name)",
            f"{EX02}: smithjohn_LATE_12345_67891_{EX02}-1.py (Canvas's download name, a re-upload's name)",
        ],
        {},
    ),
    "notebooks": (
        _notebooks,
        False,
        [
            f"{EX01}: homework one.ipynb (its grader metadata names {EX01})",
            f"{EX02}: {EX02}-Copy1.ipynb (a Jupyter copy's name, a notebook)",
        ],
        {},
    ),
    "two versions of one exercise": (
        _two_versions,
        False,
        [f"{EX02}: {EX02}.py (named as in the course)"],
        {
            EX01: f"2 files handed in could be {EX01}.py and their code differs: {EX01}.py, exercises/{EX01}.py; "
            "hand in one of them"
        },
    ),
}


def _grade_path(tmp_path: Path, layout: str) -> Submission:
    """`grader grade submissions/alice` (or `alice.zip`): what it grades of the student's hand-in."""
    build, zipped, _, _ = LAYOUTS[layout]
    if zipped:
        build(tmp_path / "staging")
        handed_in = Path(shutil.make_archive(str(tmp_path / "alice"), "zip", tmp_path / "staging"))
    else:
        build(tmp_path / "alice")
        handed_in = tmp_path / "alice"
    return prepare(handed_in, CHEAP, tmp_path / "grade-work")


def _gradescope_path(tmp_path: Path, layout: str) -> Submission:
    """The autograder: Gradescope puts the upload in /autograder/submission, a zip as uploaded, and
    run_autograder grades that folder with `grader grade` (test_run_autograder_grades_the_upload_folder_itself)."""
    build, zipped, _, _ = LAYOUTS[layout]
    upload = tmp_path / "autograder" / "submission"
    upload.mkdir(parents=True)
    if zipped:
        build(tmp_path / "gs-staging")
        shutil.make_archive(str(upload / "repo-main"), "zip", tmp_path / "gs-staging")
    else:
        build(upload)
    return prepare(upload, CHEAP, tmp_path / "gradescope-work")


def _chosen(submission: Submission) -> dict[str, tuple[bytes, str]]:
    """Each exercise's graded bytes, and the file it came from below the zip it was in, if any."""
    return {
        choice.exercise: ((submission.folder / f"{choice.exercise}.py").read_bytes(), choice.graded.split(": ")[-1])
        for choice in submission.choices
    }


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_both_paths_grade_the_same_files_for_the_same_reasons(tmp_path: Path, layout: str) -> None:
    _, zipped, choices, problems = LAYOUTS[layout]
    graded, uploaded = _grade_path(tmp_path, layout), _gradescope_path(tmp_path, layout)
    assert [str(c) for c in graded.choices] == choices
    assert graded.problems == problems == uploaded.problems
    assert _chosen(graded) == _chosen(uploaded) and len(_chosen(graded)) == len(choices)
    if zipped:  # the upload holds the zip itself: the same files, found in it
        assert [c.graded for c in uploaded.choices] == [f"repo-main.zip: {c.graded}" for c in graded.choices]
    else:
        assert uploaded.choices == graded.choices


@pytest.mark.parametrize("layout", ["a course folder", "Canvas's names"])
def test_both_paths_say_the_same_when_nothing_is_an_exercise_s(tmp_path: Path, layout: str) -> None:
    """The same layouts with every exercise's file renamed past recognition: a sentence, on both paths alike."""
    build = LAYOUTS[layout][0]
    for folder in (tmp_path / "alice", tmp_path / "autograder" / "submission"):
        build(folder)
        for path in [p for p in folder.rglob("*ex0*") if p.is_file()]:
            path.rename(path.with_name(path.name.replace("ex0", "exercise0")))
    said: list[str] = []
    for folder in (tmp_path / "alice", tmp_path / "autograder" / "submission"):
        with pytest.raises(SubmissionError) as nothing:
            prepare(folder, CHEAP, tmp_path / f"work-{len(said)}")
        said.append(str(nothing.value))
    assert said[0] == said[1] and said[0].startswith("nothing handed in is an exercise's file: found ")
    assert f"expected files named like {EX01}.py or {EX02}.py" in said[0]


def test_run_autograder_grades_the_upload_folder_itself() -> None:
    """What makes the Gradescope path the grade path: the upload is handed to `grader grade` as it is, so no
    other code chooses its files (grader/intake.py is the only rule)."""
    script = gradescope_bundle._scripts(gradescope_bundle.BundleOptions(torch_version="2.13.0"))["run_autograder"]
    (grading,) = [line for line in script.splitlines() if " -m grader " in line]
    assert grading.startswith('"$PYTHON" -m grader grade "$SUBMISSION" --out "$WORK/out"')
    assert script.index('chmod o-rwx "$SUBMISSION"') < script.index(grading), "the upload closed to other users first"
    assert "gradescope_submission" not in script and "unzip" not in script


def test_check_path_takes_a_zip_and_says_which_file_it_checks(tmp_path: Path) -> None:
    _repository(tmp_path / "staging")
    handed_in = shutil.make_archive(str(tmp_path / "alice"), "zip", tmp_path / "staging")
    done = support.run_grader(
        support.REPO, "check", "--path", handed_in, "ex01", "--world-size", "2", "--no-warm", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"graded: {EX01}: exercises/{EX01}.py (in a course folder); set aside: notebooks/{EX01}.ipynb" in done.stdout
    assert "public checks passed" in done.stdout
