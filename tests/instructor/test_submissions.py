"""Submissions as handed in: folders, zips (also hostile ones) and notebooks."""

from __future__ import annotations

import zipfile
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor.submissions import SubmissionError, prepare

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


@pytest.mark.parametrize(("name", "message"), [
    ("bob.zip", "not a readable zip archive"),
    ("bob.txt", "a submission is a folder, a .zip or an .ipynb"),
])
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
