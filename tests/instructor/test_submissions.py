"""Submissions as handed in: folders, zips (also hostile ones) and notebooks."""

from __future__ import annotations

import csv
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import notebook_build
from grader.catalog import load_catalog
from grader.instructor.batch import grade_batch
from grader.instructor.gradebook import Gradebook
from grader.instructor.submissions import SubmissionError, prepare
from grader.plan import GradingPlan

from . import support

CATALOG = load_catalog(support.REPO)


def test_a_zip_of_a_folder_is_unpacked(tmp_path: Path) -> None:
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.write(support.SOLUTIONS / "ex01_process_group.py", "alice/ex01_process_group.py")
        out.writestr("__MACOSX/alice/._ex01_process_group.py", "junk")
    submission = prepare(archive, CATALOG, tmp_path / "work")
    assert submission.name == "alice"
    assert [p.name for p in submission.folder.iterdir()] == ["ex01_process_group.py"]


def test_a_zip_cannot_write_outside_its_folder(tmp_path: Path) -> None:
    archive = tmp_path / "mallory.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("../../escaped.py", "x = 1")
    with pytest.raises(SubmissionError, match="points outside the archive"):
        prepare(archive, CATALOG, tmp_path / "work")
    assert not (tmp_path / "escaped.py").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bob.zip", "not a readable zip archive"),
        ("bob.txt", "a submission is a folder, a .zip or an .ipynb"),
    ],
)
def test_unusable_files_are_refused(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / name).write_text("hello")
    with pytest.raises(SubmissionError, match=message):
        prepare(tmp_path / name, CATALOG, tmp_path / "work")


def test_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SubmissionError, match="no such file"):
        prepare(tmp_path / "ghost", CATALOG, tmp_path / "work")


def test_notebooks_in_a_folder_stand_for_their_exercise(tmp_path: Path) -> None:
    folder = tmp_path / "carol"
    folder.mkdir()
    support.notebook(folder / "ex02_data_sharding.ipynb", CATALOG)
    (folder / "ex03_train_ddp.ipynb").write_text("{")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert (submission.folder / "ex02_data_sharding.py").is_file()
    assert "not a notebook" in submission.problems["ex03_train_ddp"]


def _built(path: Path, exercise_id: str, solved: bool) -> Path:
    """A notebook as `grader notebook build` writes it, solved or still the stub."""
    if solved:
        return support.notebook(path, CATALOG, exercise_id)
    exercise = CATALOG.get(exercise_id)
    nbformat.write(notebook_build.build_notebook(exercise, support.REPO / "exercises" / exercise.file), path)
    return path


def test_a_stub_beside_a_solved_notebook_is_set_aside_and_said(tmp_path: Path) -> None:
    folder = tmp_path / "dave"
    folder.mkdir()
    shutil.copyfile(support.REPO / "exercises" / "ex05_no_sync.py", folder / "ex05_no_sync.py")
    _built(folder / "ex05_no_sync.ipynb", "ex05_no_sync", solved=True)
    submission = prepare(folder, CATALOG, tmp_path / "work")
    graded = (submission.folder / "ex05_no_sync.py").read_text()
    assert "no_sync()" in graded and "NotImplementedError" not in graded
    assert submission.notes == ["ex05_no_sync: graded ex05_no_sync.ipynb; ex05_no_sync.py is the untouched stub"]
    assert "ex05_no_sync" in submission.source_maps


def test_a_notebook_under_another_name_is_matched_by_its_metadata_and_said(tmp_path: Path) -> None:
    folder = tmp_path / "erin"
    folder.mkdir()
    _built(folder / "ex04_launch-Copy1.ipynb", "ex04_launch", solved=True)
    _built(folder / "homework two.ipynb", "ex02_data_sharding", solved=True)  # any name: the metadata decides
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert sorted(p.name for p in submission.folder.iterdir()) == ["ex02_data_sharding.py", "ex04_launch.py"]
    assert "ex04_launch: graded ex04_launch-Copy1.ipynb; its metadata or name makes it ex04_launch" in submission.notes
    assert not submission.problems


def test_two_files_with_work_follow_the_stated_order(tmp_path: Path) -> None:
    folder = tmp_path / "frank"
    folder.mkdir()
    shutil.copyfile(support.SOLUTIONS / "ex02_data_sharding.py", folder / "ex02_data_sharding.py")
    _built(folder / "ex02_data_sharding.ipynb", "ex02_data_sharding", solved=True)
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert (submission.folder / "ex02_data_sharding.py").read_bytes() == (
        support.SOLUTIONS / "ex02_data_sharding.py"
    ).read_bytes()
    assert submission.notes == [
        "ex02_data_sharding: graded ex02_data_sharding.py; ex02_data_sharding.ipynb was not "
        "graded (one file per exercise: the .py, then ex02_data_sharding.ipynb, then other "
        "notebooks by name)"
    ]


def test_the_choice_reaches_the_gradebooks_problem_column(tmp_path: Path) -> None:
    folder = tmp_path / "gina"
    folder.mkdir()
    shutil.copyfile(support.REPO / "exercises" / "ex02_data_sharding.py", folder / "ex02_data_sharding.py")
    _built(folder / "ex02_data_sharding-Copy1.ipynb", "ex02_data_sharding", solved=True)
    options = GradingPlan(jobs=1, world_sizes=(2,), deadline=20)
    (grade,) = grade_batch(CATALOG, [folder], options, sandbox=None)  # which file is graded: no sandbox involved
    assert grade.exercise_score("ex02_data_sharding") == sum(
        c.points for c in CATALOG.get("ex02").checks if c.visibility == "public"
    )
    book = Gradebook(tmp_path / "gradebook.csv", CATALOG)
    book.on_result(grade)
    book.close()
    (row,) = list(csv.DictReader((tmp_path / "gradebook.csv").open()))
    assert row["problem"] == (
        "ex02_data_sharding: graded ex02_data_sharding-Copy1.ipynb; ex02_data_sharding.py is "
        "the untouched stub; its metadata or name makes it ex02_data_sharding"
    )
    assert not grade.problem, "a choice of file is no error of the submission"
