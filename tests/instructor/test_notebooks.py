"""Notebooks built from the exercises, and notebooks turned back into exercise files."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader import notebook_build, notebook_source, student_files
from grader.catalog import load_catalog
from grader.cli import main
from grader.judge.runner import CheckResult

from . import support

CATALOG = load_catalog(support.REPO)


def test_build_writes_one_checked_notebook_per_exercise(tmp_path: Path) -> None:
    written = notebook_build.build_all(CATALOG, tmp_path)
    assert [p.name for p in written] == [notebook_source.notebook_name(e) for e in CATALOG.exercises]
    for path, exercise in zip(written, CATALOG.exercises):
        book = nbformat.read(path, as_version=4)
        nbformat.validate(book)
        assert book.metadata["grader"]["exercise"] == exercise.id
        assert exercise.title in book.cells[0].source
        assert f'notebook.check("{exercise.id}")' in book.cells[-1].source
        folder = tmp_path / exercise.id
        folder.mkdir()
        assert notebook_source.extract(path, CATALOG, folder).exercise == exercise
        extracted = (folder / exercise.file).read_text()
        assert all(f"def {name}(" in extracted for name in exercise.function_names)
        assert '"""' not in extracted.split("\n", 2)[1], "the teaching text belongs in markdown, not code"


def test_the_text_of_a_built_notebook_tells_what_to_run_there(tmp_path: Path) -> None:
    """Not `grader check exNN` (that grades the stub in exercises/), nor `!grader` (needs PATH)."""
    for exercise in CATALOG.exercises:
        book = notebook_build.build_notebook(exercise, support.REPO / "exercises" / exercise.file)
        text = "\n".join(cell.source for cell in book.cells)
        assert "`grader check" not in text and "!grader" not in text, exercise.id
        assert f"%grader check ex{exercise.number:02d}" in text
        heading = book.cells[0].source
        assert heading.count(f"xercise {exercise.number}:") == 1, "the title appears once"


def test_arithmetic_in_the_teaching_text_keeps_its_asterisks() -> None:
    exercise = CATALOG.get("ex05")
    book = notebook_build.build_notebook(exercise, support.REPO / "exercises" / exercise.file)
    markdown = book.cells[0].source
    assert "k\\*b\\*W" in markdown and "k*b*W" not in markdown.replace("k\\*b\\*W", "")
    assert "*micro-batches*" in markdown, "emphasis the docstring means stays emphasis"


def test_magics_are_commented_out_and_lines_kept(tmp_path: Path) -> None:
    path = support.notebook(tmp_path / "mine.ipynb", CATALOG)
    exercise = notebook_source.extract(path, CATALOG, tmp_path).exercise
    lines = (tmp_path / exercise.file).read_text().splitlines()
    assert "# %time" in lines
    compile("\n".join(lines), "x", "exec")


def _notebook(path: Path, exercise_id: str, *cells: tuple[str, bool]) -> Path:
    """A notebook of `exercise_id` made of (source, tagged) code cells, after a markdown cell."""
    book = nbformat.v4.new_notebook()
    book.metadata["grader"] = {"exercise": exercise_id}
    book.cells = [nbformat.v4.new_markdown_cell("# my work")]
    book.cells += [
        nbformat.v4.new_code_cell(source, metadata={"tags": ["exercise"] if tagged else []}) for source, tagged in cells
    ]
    nbformat.write(book, path)
    return path


def test_code_above_the_future_import_is_no_syntax_error(tmp_path: Path) -> None:
    solution = (support.SOLUTIONS / "ex02_data_sharding.py").read_text()
    path = _notebook(tmp_path / "nb.ipynb", "ex02_data_sharding", ("import os\nprint(os.getpid())\n" + solution, True))
    exercise = notebook_source.extract(path, CATALOG, tmp_path).exercise
    module = (tmp_path / exercise.file).read_text()
    compile(module, exercise.file, "exec")
    assert module.splitlines()[0].startswith("from __future__ import annotations")
    assert student_files.problems(tmp_path / exercise.file, exercise) is None


def test_what_the_grader_says_points_at_the_cell_and_its_line(tmp_path: Path) -> None:
    path = _notebook(tmp_path / "nb.ipynb", "ex02_data_sharding", ("x = 1", False), ("import torch\n\nbad(", True))
    extracted = notebook_source.extract(path, CATALOG, tmp_path)
    problem = student_files.problems(tmp_path / extracted.exercise.file, extracted.exercise)
    result = CheckResult(
        "error",
        problem or "",
        exercise="ex02_data_sharding",
        check="c",
        world_size=2,
        seconds=0.0,
        points=0.0,
        max_points=1.0,
        visibility="public",
        details=f'  File "{tmp_path}/ex02_data_sharding.py", line 4, in f',
    )
    located = extracted.source_map.apply(result)
    assert "syntax error in cell 3, line 3" in located.message, located.message
    assert located.details == '  File "nb.ipynb", cell 3, line 3, in f'


def test_a_name_defined_in_an_untagged_cell_says_to_tag_it(tmp_path: Path) -> None:
    path = _notebook(
        tmp_path / "nb.ipynb",
        "ex02_data_sharding",
        ("def helper():\n    return 1", False),
        ("def make_loader():\n    return helper()", True),
    )
    source_map = notebook_source.extract(path, CATALOG, tmp_path).source_map
    message = "every rank raised NameError: name 'helper' is not defined\n  at ex02_data_sharding.py:3 in make_loader()"
    located = source_map.apply(
        CheckResult(
            "failed",
            message,
            exercise="ex02_data_sharding",
            check="c",
            world_size=2,
            seconds=0.0,
            points=0.0,
            max_points=1.0,
            visibility="public",
        )
    )
    assert "at cell 3, line 2 in make_loader()" in located.message
    assert "`helper` is defined in cell 2, which is not tagged `exercise`" in located.message
    assert "Tag that cell" in located.message


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{ nope", "not a notebook"),
        ('{"cells": 3, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}', "not a valid notebook"),
    ],
)
def test_unreadable_notebooks_are_named(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "ex02_data_sharding.ipynb"
    path.write_text(content)
    with pytest.raises(notebook_source.NotebookError, match=message):
        notebook_source.extract(path, CATALOG, tmp_path)


def test_untagged_or_unknown_notebooks_are_refused(tmp_path: Path) -> None:
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell("def make_loader(): pass")]
    untagged = tmp_path / "ex02_data_sharding.ipynb"
    nbformat.write(book, untagged)
    with pytest.raises(notebook_source.NotebookError, match="no code cell is tagged 'exercise'"):
        notebook_source.extract(untagged, CATALOG, tmp_path)
    unknown = tmp_path / "homework.ipynb"
    nbformat.write(book, unknown)
    with pytest.raises(notebook_source.NotebookError, match="cannot tell which exercise"):
        notebook_source.extract(unknown, CATALOG, tmp_path)


def test_check_of_a_bad_notebook_is_one_clear_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
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


def test_check_of_a_notebook_names_the_cell_of_an_error_and_the_tag_it_lacks(tmp_path: Path) -> None:
    """A helper in an untagged cell, code above the future import: one clear NameError, in cell terms."""
    solution = (support.SOLUTIONS / "ex02_data_sharding.py").read_text()
    anchor = "    sampler = DistributedSampler("
    broken = solution.replace(anchor, "    seed = pick_seed(seed)\n" + anchor)
    assert broken != solution
    path = _notebook(
        tmp_path / "ex02_data_sharding.ipynb",
        "ex02_data_sharding",
        ("def pick_seed(seed):\n    return seed", False),
        ("import os\n" + broken, True),
    )
    done = support.run_grader(support.REPO, "check", str(path), "--world-size", "2", cwd=tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    out = done.stdout
    assert "SyntaxError" not in out and "Traceback" in out
    assert out.count("NameError: name 'pick_seed' is not defined") == 2, out  # the message and its traceback
    assert "(a knock-on: shards_are_disjoint says why)" in out  # the checks sharing the failed run point at it
    assert "`pick_seed` is defined in cell 2, which is not tagged `exercise`" in out
    line = next(n for n, text in enumerate(("import os\n" + broken).splitlines(), 1) if "pick_seed" in text)
    assert f"at cell 3, line {line} in make_loader()" in out, out
    assert "grader/engine" not in out and "workers.py" not in out, "the grader's frames only with -v"


def test_build_writes_into_the_course_by_default_and_says_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`grader notebook build` as the README shows it, without --out: notebooks/ in the course."""
    course = support.course_copy(tmp_path / "course")
    monkeypatch.setenv("GRADER_COURSE", str(course))
    assert main(["notebook", "build"]) == 0
    out = capsys.readouterr().out
    assert f"{len(CATALOG.exercises)} notebook(s) written to {course / 'notebooks'}" in out
    assert sorted(p.name for p in (course / "notebooks").iterdir()) == sorted(
        notebook_source.notebook_name(e) for e in CATALOG.exercises
    )


def test_a_notebook_check_counts_in_grader_list_as_a_file_check_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Checked from the notebook (the saved one, or a kernel's copy of it), a solved exercise is passing in
    `grader list`; editing the notebook's exercise cell makes it "changed", as editing a file does."""
    from grader import notebook

    course = support.course_copy(tmp_path / "course")
    monkeypatch.setenv("GRADER_COURSE", str(course))
    monkeypatch.setenv("PYTHONPATH", str(course))  # the check runs in `python -m grader`, on this course

    def status() -> str:
        assert main(["list", "--json"]) == 0
        return {row["id"]: row["status"] for row in json.loads(capsys.readouterr().out)}["ex10_scaling"]

    (course / "notebooks").mkdir()
    path = support.notebook(course / "notebooks" / "ex10_scaling.ipynb", CATALOG, "ex10_scaling")
    assert status() == "not started"
    notebook.check("ex10", notebook=path)
    assert "public checks passed" in capsys.readouterr().out
    assert status() == "passing"

    book = nbformat.read(path, as_version=4)
    (cell,) = [c for c in book.cells if notebook_source.is_exercise_cell(c)]
    cell.source += "\n# edited\n"
    nbformat.write(book, path)
    assert status() == "changed"

    ran = notebook.Graded([("In [1]", cell.source)])  # what a kernel ran, equal to the saved cell
    copy = notebook._write(CATALOG.get("ex10"), ran, tmp_path, saved=path)
    assert main(["check", str(copy)]) == 0
    capsys.readouterr()
    assert status() == "passing"


def test_nbformat_s_warnings_name_the_notebook_once_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A notebook whose cells have no id (an older Jupyter's, or one written by hand) makes nbformat warn on
    stderr without naming it: the grader's warning names the file, once however often it is read."""
    catalog = load_catalog(support.REPO)
    built = notebook_build.build_notebook(catalog.get("ex01"), support.REPO / "exercises" / "ex01_process_group.py")
    book = json.loads(nbformat.writes(built))
    for cell in book["cells"]:
        del cell["id"]
    path = tmp_path / "my_work.ipynb"
    path.write_text(json.dumps(book))
    notebook_source.read(path)
    notebook_source.extract(path, catalog, tmp_path)
    err = capsys.readouterr().err
    (line,) = err.splitlines()
    assert line.startswith("grader: warning: my_work.ipynb: ") and "missing an id" in line, err
