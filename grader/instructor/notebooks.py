"""Notebooks: one per exercise for students who work in Jupyter, and back to a module for grading.

A notebook's functions cannot be graded where they are defined: the ranks are separate processes,
and a function defined in a notebook cell cannot be pickled to them by reference. So the cells the
student writes in (tagged `exercise`) are joined into an ordinary `exNN_*.py` file that the grader
imports on every rank like any other submission.
"""

from __future__ import annotations

import ast
from pathlib import Path

import nbformat

from grader.catalog import Catalog, Exercise

TAG = "exercise"
METADATA_KEY = "grader"


class NotebookError(Exception):
    """A notebook cannot be read or holds nothing to grade; the message says which and why."""


def _split_docstring(source: str) -> tuple[str, str]:
    """The module docstring (teaching text) and the code after it."""
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree, clean=True) or ""
    first = tree.body[0] if tree.body else None
    if docstring and isinstance(first, ast.Expr):
        code = "\n".join(source.splitlines()[first.end_lineno:]).strip("\n")
        return docstring, code + "\n"
    return docstring, source


def notebook_name(exercise: Exercise) -> str:
    return f"{Path(exercise.file).stem}.ipynb"


def build_notebook(exercise: Exercise, stub: Path) -> nbformat.NotebookNode:
    """Teaching text as markdown, the stub in a tagged code cell, then a cell that checks it."""
    docstring, code = _split_docstring(stub.read_text())
    notebook = nbformat.v4.new_notebook()
    notebook.metadata[METADATA_KEY] = {"exercise": exercise.id}
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    objectives = "\n".join(f"- {objective}" for objective in exercise.objectives)
    notebook.cells = [
        nbformat.v4.new_markdown_cell(f"# Exercise {exercise.number}: {exercise.title}\n\n{docstring}"
                                      + (f"\n\n## You will be able to\n\n{objectives}" if objectives else "")),
        nbformat.v4.new_markdown_cell(f"Write your solution in the cell below (it is tagged `{TAG}`: the grader "
                                      "reads only cells with that tag). Keep the function names and parameters."),
        nbformat.v4.new_code_cell(code, metadata={"tags": [TAG]}),
        nbformat.v4.new_markdown_cell("Save the notebook, then run the checks (they read the saved file):"),
        nbformat.v4.new_code_cell(f"!grader check {notebook_name(exercise)}"),
    ]
    return notebook


def build_all(catalog: Catalog, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for exercise in catalog.exercises:
        path = out / notebook_name(exercise)
        nbformat.write(build_notebook(exercise, catalog.root / "exercises" / exercise.file), path)
        written.append(path)
    return written


def _read(path: Path) -> nbformat.NotebookNode:
    try:
        return nbformat.read(path, as_version=4)
    except OSError as exc:
        raise NotebookError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, nbformat.reader.NotJSONError) as exc:
        raise NotebookError(f"{path.name} is not a notebook (not valid notebook JSON)") from exc
    except (nbformat.ValidationError, KeyError, AttributeError, TypeError) as exc:
        raise NotebookError(f"{path.name} is not a valid notebook: {exc}") from exc


def exercise_of(notebook: nbformat.NotebookNode, path: Path, catalog: Catalog) -> Exercise:
    """From the notebook's metadata (set by `grader notebook build`), else from its file name."""
    recorded = (notebook.metadata.get(METADATA_KEY) or {}).get("exercise")
    for exercise in catalog.exercises:
        if exercise.id == recorded or Path(exercise.file).stem == path.stem:
            return exercise
    raise NotebookError(f"{path.name}: cannot tell which exercise it is (no grader metadata and no exercise "
                        "is named like it); name it like the exercise, e.g. ex01_process_group.ipynb")


def _without_magics(source: str) -> str:
    """Shell (`!`) and magic (`%`) lines are no Python: commented out, keeping line numbers."""
    return "\n".join(f"# {line}" if line.lstrip().startswith(("!", "%")) else line for line in source.splitlines())


def extract(path: Path, catalog: Catalog, folder: Path) -> Exercise:
    """Write the notebook's tagged cells as the exercise's file in `folder`; returns the exercise."""
    notebook = _read(path)
    exercise = exercise_of(notebook, path, catalog)
    cells = [c for c in notebook.cells if c.get("cell_type") == "code" and TAG in c.get("metadata", {}).get("tags", [])]
    if not cells:
        raise NotebookError(f"{path.name}: no code cell is tagged {TAG!r}; tag the cells that hold your solution")
    source = "\n\n".join(_without_magics(cell.source) for cell in cells)
    (folder / exercise.file).write_text(f"# extracted from {path.name} by the grader\n{source}\n")
    return exercise
