"""What the autograder grades of an upload, wherever Gradescope put the student's files."""

from __future__ import annotations

import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.instructor.gradescope_submission import LocateError, locate, main

from . import support

CATALOG = load_catalog(support.REPO)
CHEAP = dataclasses.replace(CATALOG, exercises=CATALOG.exercises[:2])
EX01, EX02 = "ex01_process_group.py", "ex02_data_sharding.py"


@pytest.fixture
def upload(tmp_path: Path) -> Path:
    folder = tmp_path / "submission"
    folder.mkdir()
    return folder


def _put(folder: Path, name: str, text: str = "x = 1\n") -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_loose_files_are_gathered_into_one_folder(upload: Path, tmp_path: Path) -> None:
    _put(upload, EX01, "one")
    _put(upload, f"repo/src/{EX02}", "two")  # an uploaded repository keeps its layout
    _put(upload, "notes.txt")
    target = locate(upload, tmp_path / "work", CHEAP)
    assert sorted(p.name for p in target.iterdir()) == [EX01, EX02]
    assert (target / EX02).read_text() == "two"


def test_the_shallowest_copy_wins_and_two_at_one_depth_are_refused(upload: Path, tmp_path: Path) -> None:
    _put(upload, EX01, "top")
    _put(upload, f"old/{EX01}", "older")
    assert (locate(upload, tmp_path / "w1", CHEAP) / EX01).read_text() == "top"
    _put(upload, f"a/{EX02}")
    _put(upload, f"b/{EX02}")
    with pytest.raises(LocateError, match=f"two copies of {EX02} \\(a/{EX02} and b/{EX02}\\)"):
        locate(upload, tmp_path / "w2", CHEAP)


def test_notebooks_named_as_the_exercises_are_gathered_too(upload: Path, tmp_path: Path) -> None:
    support.notebook(upload / "ex02_data_sharding.ipynb", CATALOG)
    target = locate(upload, tmp_path / "work", CHEAP)
    assert [p.name for p in target.iterdir()] == ["ex02_data_sharding.ipynb"]


def test_a_single_zip_or_notebook_is_handed_over_as_uploaded(upload: Path, tmp_path: Path) -> None:
    zipped = _put(upload, "homework.zip")
    assert locate(upload, tmp_path / "w1", CHEAP) == zipped
    zipped.unlink()
    notebook = _put(upload, "My work (1).ipynb")
    assert locate(upload, tmp_path / "w2", CHEAP) == notebook
    _put(upload, "Other.ipynb")
    with pytest.raises(LocateError, match="2 notebooks"):
        locate(upload, tmp_path / "w3", CHEAP)


def test_links_are_refused_never_followed(upload: Path, tmp_path: Path) -> None:
    secret = _put(tmp_path, "secret.py", "answers")
    os.symlink(secret, upload / EX01)
    with pytest.raises(LocateError, match="link"):
        locate(upload, tmp_path / "work", CHEAP)


def test_an_upload_with_nothing_of_the_course_is_graded_as_an_empty_folder(upload: Path, tmp_path: Path) -> None:
    _put(upload, "essay.txt")
    target = locate(upload, tmp_path / "work", CHEAP)
    assert target.is_dir() and not any(target.iterdir())


def test_the_module_prints_the_path_or_one_line_of_error(
    upload: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GRADER_COURSE", str(support.REPO))
    _put(upload, EX01)
    assert main([str(upload), str(tmp_path / "w1")]) == 0
    assert capsys.readouterr().out.strip() == str(tmp_path / "w1" / "submission")
    shutil.rmtree(upload)
    assert main([str(upload), str(tmp_path / "w2")]) == 2
    assert capsys.readouterr().err.startswith("grader: nothing was submitted")
