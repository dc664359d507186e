"""Building notebooks: one per exercise, for students who work in Jupyter (`grader notebook build`).

Reading them back for grading is grader/notebook_source.py, which the student side needs too.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import nbformat

from grader.catalog import Catalog, Exercise
from grader.notebook_source import METADATA_KEY, TAG, notebook_name


def _split_docstring(source: str) -> tuple[str, str]:
    """The module docstring (teaching text) and the code after it."""
    tree = ast.parse(source)
    docstring = ast.get_docstring(tree, clean=True) or ""
    first = tree.body[0] if tree.body else None
    if docstring and isinstance(first, ast.Expr):
        code = "\n".join(source.splitlines()[first.end_lineno :]).strip("\n")
        return docstring, code + "\n"
    return docstring, source


def _markdown(docstring: str) -> str:
    """The stub's docstring as notebook markdown: without its title line (the cell has a heading),
    arithmetic like `k*b*W` kept literal (not emphasis), and commands as they are run in a notebook."""
    lines = docstring.splitlines()
    if lines and re.match(r"Exercise \d+\b", lines[0]):
        lines = lines[1:]
    text = "\n".join(lines).strip("\n")
    parts = re.split(r"(`[^`\n]*`)", text)
    for index in range(0, len(parts), 2):  # outside code spans only
        parts[index] = re.sub(r"(?<=[\w)])\*(?=[\w(])", r"\\*", parts[index])
    text = "".join(parts)
    return re.sub(r"`grader (check|hint) ", r"`%grader \1 ", text)


def check_cell_source(exercise: Exercise) -> str:
    return f'from grader import notebook\n\nnotebook.check("{exercise.id}")'


def build_notebook(exercise: Exercise, stub: Path) -> nbformat.NotebookNode:
    """Teaching text as markdown, the stub in a tagged code cell, then a cell that checks it."""
    docstring, code = _split_docstring(stub.read_text())
    notebook = nbformat.v4.new_notebook()
    notebook.metadata[METADATA_KEY] = {"exercise": exercise.id}
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    objectives = "\n".join(f"- {objective}" for objective in exercise.objectives)
    short = f"ex{exercise.number:02d}"
    notebook.cells = [
        nbformat.v4.new_markdown_cell(
            f"# Exercise {exercise.number}: {exercise.title}\n\n{_markdown(docstring)}"
            + (f"\n\n## You will be able to\n\n{objectives}" if objectives else "")
        ),
        nbformat.v4.new_markdown_cell(
            f"Write your solution in the cell below. It is tagged `{TAG}`: the grader reads only cells with "
            "that tag, so put helpers your functions need in a tagged cell too, and keep test calls "
            "(`train(0, 1)`...) in other cells. Keep the function names and parameters."
        ),
        nbformat.v4.new_code_cell(code, metadata={"tags": [TAG]}),
        nbformat.v4.new_markdown_cell(
            "Run your exercise cell, then the cell below: it checks the code as this kernel last ran it "
            f"(`%grader check {short}` does the same, `%grader hint {short}` shows the hints). "
            "Save the notebook before you hand it in: the saved file is what gets graded."
        ),
        nbformat.v4.new_code_cell(check_cell_source(exercise)),
    ]
    return notebook


def build_all(catalog: Catalog, out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    written = []
    for exercise in catalog.exercises:
        path = out / notebook_name(exercise)
        nbformat.write(build_notebook(exercise, catalog.stub_path(exercise)), path)
        written.append(path)
    return written
