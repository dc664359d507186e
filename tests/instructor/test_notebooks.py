"""Notebooks built from the exercises, and notebooks turned back into exercise files."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest

from grader.catalog import load_catalog
from grader.cli import main
from grader.instructor import notebooks

from . import support

CATALOG = load_catalog(support.REPO)


def test_build_writes_one_checked_notebook_per_exercise(tmp_path: Path) -> None:
    written = notebooks.build_all(CATALOG, tmp_path)
    assert [p.name for p in written] == [notebooks.notebook_name(e) for e in CATALOG.exercises]
    for path, exercise in zip(written, CATALOG.exercises):
        book = nbformat.read(path, as_version=4)
        nbformat.validate(book)
        assert book.metadata["grader"]["exercise"] == exercise.id
        assert exercise.title in book.cells[0].source
        assert f"!grader check {path.name}" in book.cells[-1].source
        folder = tmp_path / exercise.id
        folder.mkdir()
        assert notebooks.extract(path, CATALOG, folder) == exercise
        extracted = (folder / exercise.file).read_text()
        assert all(f"def {name}(" in extracted for name in exercise.function_names)
        assert '"""' not in extracted.split("\n", 2)[1], "the teaching text belongs in markdown, not code"


def test_magics_are_commented_out_and_lines_kept(tmp_path: Path) -> None:
    path = support.notebook(tmp_path / "mine.ipynb", CATALOG)
    exercise = notebooks.extract(path, CATALOG, tmp_path)
    lines = (tmp_path / exercise.file).read_text().splitlines()
    assert "# %time" in lines
    compile("\n".join(lines), "x", "exec")


@pytest.mark.parametrize(("content", "message"), [
    ("{ nope", "not a notebook"),
    ('{"cells": 3, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "not a valid notebook"),
])
def test_unreadable_notebooks_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "ex02_data_sharding.ipynb"
    path.write_text(content)
    with pytest.raises(notebooks.NotebookError, match=message):
        notebooks.extract(path, CATALOG, tmp_path)


def test_untagged_or_unknown_notebooks_are_refused(tmp_path: Path) -> None:
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell("def make_loader(): pass")]
    untagged = tmp_path / "ex02_data_sharding.ipynb"
    nbformat.write(book, untagged)
    with pytest.raises(notebooks.NotebookError, match="no code cell is tagged 'exercise'"):
        notebooks.extract(untagged, CATALOG, tmp_path)
    unknown = tmp_path / "homework.ipynb"
    nbformat.write(book, unknown)
    with pytest.raises(notebooks.NotebookError, match="cannot tell which exercise"):
        notebooks.extract(unknown, CATALOG, tmp_path)


def test_check_of_a_bad_notebook_is_one_clear_line(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GRADER_COURSE", str(support.REPO))
    path = tmp_path / "ex01_process_group.ipynb"
    path.write_text("[]")
    assert main(["check", str(path)]) == 2
    assert capsys.readouterr().err.startswith("grader: ex01_process_group.ipynb is not a valid notebook")


def test_check_of_a_notebook_grades_its_cells(tmp_path: Path) -> None:
    path = support.notebook(tmp_path / "ex02_data_sharding.ipynb", CATALOG)
    done = support.run_grader(support.REPO, "check", str(path), "--world-size", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "public checks passed: 3/3" in done.stdout
