"""Notebooks read back as modules: a notebook's exercise cells joined into the exercise's file, and where
each of its lines came from. What the student side (`grader check x.ipynb`, the notebook check) and the
instructor's batch both read, so it sits below both; building notebooks is grader/notebook_build.py.

A notebook's functions cannot be graded where they are defined: the ranks are separate processes,
and a function defined in a notebook cell cannot be pickled to them by reference. So the cells the
student writes in (tagged `exercise`) are joined into an ordinary `exNN_*.py` file that the grader
imports on every rank like any other submission. A `SourceMap` remembers which cell each line came
from, so that what the grader says points at the cell and its line, not at the joined file.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
import sys
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path

import nbformat

from grader.catalog import Catalog, Exercise
from grader.judge.verdict import CheckResult
from grader.report.inert import one_line

TAG = "exercise"
METADATA_KEY = "grader"
SAVED_KEY = "saved"  # in a kernel check's notebook: the path of the saved notebook it was run from
FUTURE_NOTE = "# moved to the top by the grader"
MAX_NOTEBOOK_BYTES = 16 << 20  # a notebook with its outputs cleared is KiBs; with plots a few MiB
MAX_NOTEBOOK_DEPTH = 100  # JSON nesting: a notebook's own structure is 6 deep; metadata and outputs add some


class NotebookError(Exception):
    """A notebook cannot be read or holds nothing to grade; the message says which and why."""


def notebook_name(exercise: Exercise) -> str:
    return f"{Path(exercise.file).stem}.ipynb"


# --- reading -----------------------------------------------------------------------------------


def _depth(value: object) -> int:
    """How deeply JSON arrays and objects nest in `value`, counted without recursion."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        value, depth = stack.pop()
        children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else None
        if children is not None:
            deepest = max(deepest, depth)
            stack += [(child, depth + 1) for child in children]
    return deepest


def _shape_problem(notebook: nbformat.NotebookNode) -> str | None:
    """What of the parts this module reads is not of the type it needs, if anything. nbformat only logs
    a notebook that fails its schema, so a cell whose source is a number would otherwise get through."""
    if not isinstance(notebook.get("metadata"), dict):
        return "its metadata is not a JSON object"
    if not isinstance(notebook.metadata.get(METADATA_KEY) or {}, dict):
        return f"its metadata's {METADATA_KEY!r} entry is not a JSON object"
    if not isinstance(notebook.get("cells"), list):
        return "its cells are not a list"
    for index, cell in enumerate(notebook.cells, 1):
        if not isinstance(cell, dict) or not isinstance(cell.get("cell_type"), str):
            return f"cell {index} is not a cell (a JSON object with a cell_type)"
        if not isinstance(cell.get("source"), str):
            return f"cell {index}'s source is not text"
        metadata = cell.get("metadata", {})
        if not isinstance(metadata, dict) or not isinstance(metadata.get(METADATA_KEY) or {}, dict):
            return f"cell {index}'s metadata is not a JSON object"
        tags = metadata.get("tags") or []
        if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
            return f"cell {index}'s tags are not a list of strings"
    return None


def read(path: Path) -> nbformat.NotebookNode:
    """The notebook as version 4, or NotebookError. Its size and nesting are bounded before any parser
    recursive enough to crash on them sees it: a submission's notebook is read on the trusted side."""
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_NOTEBOOK_BYTES + 1)
    except OSError as exc:
        raise NotebookError(f"{path}: cannot be read: {exc.strerror or exc}") from exc
    if len(data) > MAX_NOTEBOOK_BYTES:
        raise NotebookError(
            f"{path.name} is over {MAX_NOTEBOOK_BYTES >> 20} MiB, the most a notebook may be: "
            "clear its outputs and save it again"
        )
    too_deep = (
        f"{path.name} is nested too deeply to read: a notebook's JSON nests a few levels, at most {MAX_NOTEBOOK_DEPTH}"
    )
    try:
        text = data.decode("utf-8")
        parsed = json.loads(text)  # the C decoder stops at its recursion limit; nbformat's Python would go on
    except RecursionError as exc:
        raise NotebookError(too_deep) from exc
    except ValueError as exc:  # not UTF-8, not JSON
        raise NotebookError(f"{path.name} is not a notebook (not valid notebook JSON)") from exc
    if _depth(parsed) > MAX_NOTEBOOK_DEPTH:
        raise NotebookError(too_deep)
    try:
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            notebook = nbformat.reads(text, as_version=4)
    except Exception as exc:  # nbformat's readers and converters trip on malformed input in any way they do
        said = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__  # (AssertionError, NameError...)
        raise NotebookError(f"{path.name} is not a valid notebook: {said}") from exc
    problem = _shape_problem(notebook)
    if problem is not None:
        raise NotebookError(f"{path.name} is not a valid notebook: {problem}")
    _warn(path, [str(w.message) for w in warned])
    return notebook


_WARNED: set[tuple[str, str]] = set()  # (notebook, warning) said already: a notebook is read more than once


def _warn(path: Path, messages: list[str]) -> None:
    """nbformat's warnings (a cell without an id...) on stderr, each once, naming the notebook, which nbformat's
    own do not; their first sentence only, since the rest is advice to nbformat's users."""
    for message in messages:
        said = one_line(message.split(". ")[0].rstrip("."), 300)
        if (str(path), said) not in _WARNED:
            _WARNED.add((str(path), said))
            print(f"grader: warning: {one_line(path.name, 200)}: {said}", file=sys.stderr)


def recorded_exercise(notebook: nbformat.NotebookNode) -> str | None:
    """The exercise id `grader notebook build` wrote into the notebook's metadata, if any."""
    recorded = (notebook.metadata.get(METADATA_KEY) or {}).get("exercise")
    return recorded if isinstance(recorded, str) else None


def exercise_of(notebook: nbformat.NotebookNode, path: Path, catalog: Catalog) -> Exercise:
    """From the notebook's metadata (set by `grader notebook build`), else from its file name."""
    recorded = recorded_exercise(notebook)
    for exercise in catalog.exercises:
        if exercise.id == recorded:
            return exercise
    for exercise in catalog.exercises:
        if Path(exercise.file).stem == path.stem:
            return exercise
    raise NotebookError(
        f"{path.name}: cannot tell which exercise it is (no grader metadata and no exercise "
        "is named like it); name it like the exercise, e.g. ex01_process_group.ipynb"
    )


def is_exercise_cell(cell: nbformat.NotebookNode) -> bool:
    return cell.get("cell_type") == "code" and TAG in (cell.get("metadata", {}).get("tags") or [])


def code_hash(notebook: nbformat.NotebookNode) -> str:
    """What progress remembers of a checked notebook: its exercise cells' code, so that saving outputs or
    prose is no edit, and a kernel check of code equal to the saved cells counts for the saved notebook."""
    sources = [cell.source.strip() for cell in notebook.cells if is_exercise_cell(cell)]
    return hashlib.sha256("\0".join(sources).encode("utf-8", "backslashreplace")).hexdigest()


def saved_notebook_of(notebook: nbformat.NotebookNode, path: Path) -> Path:
    """The student's own notebook that `notebook` stands for: the one a kernel check names in its metadata
    (it grades a copy written elsewhere), else `path` itself."""
    saved = (notebook.metadata.get(METADATA_KEY) or {}).get(SAVED_KEY)
    return Path(saved) if isinstance(saved, str) and saved else path


def without_magics(source: str) -> str:
    """Shell (`!`) and magic (`%`) lines are no Python: commented out, keeping line numbers."""
    return "\n".join(f"# {line}" if line.lstrip().startswith(("!", "%")) else line for line in source.splitlines())


def _cell_label(cell: nbformat.NotebookNode, index: int) -> str:
    label = (cell.get("metadata", {}).get(METADATA_KEY) or {}).get("label")
    return label if isinstance(label, str) else f"cell {index + 1}"


def _top_level_names(source: str) -> set[str]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # reported when the joined file is checked
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


# --- where a line of the joined module came from -----------------------------------------------


@dataclass(frozen=True)
class CellSpan:
    label: str  # "cell 3" (its place in the notebook) or "In [7]" (as the kernel ran it)
    first: int  # the joined module's line that holds the cell's first line
    lines: int


@dataclass
class SourceMap:
    """Points what the grader says about the joined module back at the notebook's cells."""

    notebook: str
    module: str  # the joined file's name, as messages name it
    cells: list[CellSpan] = field(default_factory=list)
    untagged: dict[str, str] = field(default_factory=dict)  # a name defined in an untagged cell -> its label

    def where(self, line: int) -> str:
        for cell in self.cells:
            if cell.first <= line < cell.first + cell.lines:
                return f"{cell.label}, line {line - cell.first + 1}"
        return f"line {line} of the code joined from the exercise cells"

    def rewrite(self, text: str) -> str:
        module = re.escape(self.module)
        text = re.sub(
            rf'File "(?:[^"]*/)?{module}", line (\d+)',
            lambda m: f'File "{self.notebook}", {self.where(int(m[1]))}',
            text,
        )
        text = re.sub(rf"(?<![\w/.-]){module}(?::|, line )(\d+)", lambda m: self.where(int(m[1])), text)
        return re.sub(rf"(?<![\w/.-]){module}", f"{self.notebook} (its exercise cells)", text)

    def _tag_hints(self, text: str) -> list[str]:
        missing = dict.fromkeys(re.findall(r"NameError: name '(\w+)' is not defined", text))
        return [
            f"`{name}` is defined in {self.untagged[name]}, which is not tagged `{TAG}`: the grader runs only "
            f"tagged cells. Tag that cell `{TAG}` too, or move `{name}` into an exercise cell"
            for name in missing
            if name in self.untagged
        ]

    def apply(self, result: CheckResult) -> CheckResult:
        hints = self._tag_hints(f"{result.message}\n{result.details}")
        return replace(
            result,
            message="\n".join([self.rewrite(result.message), *hints]),
            details=self.rewrite(result.details),
            verbose_details=self.rewrite(result.verbose_details),
            notes=[self.rewrite(note) for note in result.notes],
        )


def _hoist_future_imports(lines: list[str]) -> str:
    """`from __future__` must open a module; in a notebook it opens a cell, perhaps after other
    code or cells. Moved up to the joined file's first line, the other lines keep their numbers."""
    try:
        tree = ast.parse("\n".join(lines))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return ""  # the syntax error is reported, pointing at its cell
    features: list[str] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            features += [alias.name for alias in node.names if alias.name not in features]
            for number in range(node.lineno, (node.end_lineno or node.lineno) + 1):
                lines[number - 1] = ""
    return f"from __future__ import {', '.join(features)}  {FUTURE_NOTE}" if features else ""


@dataclass(frozen=True)
class Extracted:
    exercise: Exercise
    source_map: SourceMap
    saved: Path | None = None  # the student's notebook these cells stand for (see saved_notebook_of)
    code_hash: str = ""  # its exercise cells, as progress remembers them


def extract(path: Path, catalog: Catalog, folder: Path, exercise: Exercise | None = None) -> Extracted:
    """Write the notebook's tagged cells as the exercise's file in `folder`: `exercise`'s when given (a
    submission's notebook, whose exercise grader/intake.py tells from a renamed file), else its own."""
    notebook = read(path)
    exercise = exercise or exercise_of(notebook, path, catalog)
    source_map = SourceMap(path.name, exercise.file)
    lines = [f"# extracted from {path.name} by the grader"]
    for index, cell in enumerate(notebook.cells):
        if cell.get("cell_type") != "code":
            continue
        code = without_magics(cell.source)
        if not is_exercise_cell(cell):
            for name in _top_level_names(code):
                source_map.untagged.setdefault(name, _cell_label(cell, index))
            continue
        cell_lines = code.splitlines() or [""]
        source_map.cells.append(CellSpan(_cell_label(cell, index), len(lines) + 1, len(cell_lines)))
        lines += [*cell_lines, ""]
    if not source_map.cells:
        raise NotebookError(f"{path.name}: no code cell is tagged {TAG!r}; tag the cells that hold your solution")
    for cell in source_map.cells:  # a name the graded cells define is no hint to tag another
        for name in _top_level_names("\n".join(lines[cell.first - 1 : cell.first - 1 + cell.lines])):
            source_map.untagged.pop(name, None)
    header = _hoist_future_imports(lines)
    if header:
        lines[0] = header
    # JSON may spell a lone surrogate, which UTF-8 cannot hold: written as its escape, as in a string literal
    (folder / exercise.file).write_text("\n".join(lines) + "\n", encoding="utf-8", errors="backslashreplace")
    return Extracted(exercise, source_map, saved_notebook_of(notebook, path), code_hash(notebook))
