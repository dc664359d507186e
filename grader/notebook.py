"""Checking an exercise from Jupyter: what this kernel ran is what gets graded.

    from grader import notebook
    notebook.check("ex03")          # or, once this module is imported: %grader check ex03

The check grades, for each function the exercise asks for, the last cell this kernel ran that
defines it, with the notebook's other cells tagged `exercise` (helpers) as the kernel last ran them.
When the saved notebook's tagged cells differ from that (an edit not saved, a function redefined in
an untagged cell), it says so: the saved file is what an instructor grades. If the kernel never ran
the exercise, the saved notebook is checked, with a warning.

Grading itself runs in a fresh `python -m grader check` of this kernel's own interpreter (no PATH
needed): the judge never runs in the process that ran the student's code, and the ranks never see
what else the kernel holds. Output is plain text, so no colour codes are saved in the notebook.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat

from grader import notebook_source
from grader.catalog import CatalogError, Exercise, course_catalog
from grader.paths import CourseNotFound

SAVE_ADVICE = "save the notebook (Ctrl-S) before you hand it in: the saved file is what gets graded"


class KernelCheckError(Exception):
    """Nothing can be checked yet (no course, no such exercise, no code run or saved)."""


@dataclass
class Graded:
    """The cells to grade, each with a label the student can find, and what to warn about."""

    cells: list[tuple[str, str]]  # (label, source), tagged
    context: list[tuple[str, str]] = field(default_factory=list)  # other cells the kernel ran
    warnings: list[str] = field(default_factory=list)


def _defines(source: str, name: str) -> bool:
    return re.search(rf"^(?:async\s+)?def\s+{re.escape(name)}\s*\(", source, re.M) is not None


def _same(a: str, b: str) -> bool:
    return a.strip() == b.strip()


def _label(index: int) -> str:
    return f"In [{index}]"


def _candidates(exercise: Exercise, folder: Path) -> list[Path]:
    stem = Path(exercise.file).stem
    found = []
    for path in sorted(folder.glob("*.ipynb")):
        try:
            recorded = notebook_source.recorded_exercise(notebook_source.read(path))
        except notebook_source.NotebookError:
            continue
        if recorded == exercise.id or (recorded is None and path.stem.startswith(stem)):
            found.append(path)
    return found


def _tagged(book: nbformat.NotebookNode) -> list[tuple[int, str]]:
    return [(i, c.source) for i, c in enumerate(book.cells) if notebook_source.is_exercise_cell(c)]


def saved_notebook(
    exercise: Exercise, history: Sequence[tuple[int, str]], session: str | None, folder: Path
) -> Path | None:
    """The notebook this kernel belongs to: the one Jupyter names (JPY_SESSION_NAME), else, of the
    notebooks of this exercise beside it (`-Copy1` ones too), the one whose exercise cells this
    kernel ran (the most recently saved on a tie)."""
    if session and session.endswith(".ipynb"):
        for named in (Path(session), folder / Path(session).name):  # a path, or one relative to Jupyter's root
            if named.is_file():
                return named
    ran = [source for _, source in history]

    def score(path: Path) -> tuple[int, float]:
        book = notebook_source.read(path)
        return sum(any(_same(s, r) for r in ran) for _, s in _tagged(book)), path.stat().st_mtime

    candidates = _candidates(exercise, folder)
    return max(candidates, key=score) if candidates else None


def kernel_cells(
    exercise: Exercise, history: Sequence[tuple[int, str]], saved: nbformat.NotebookNode | None, saved_name: str = ""
) -> Graded | None:
    """What to grade from what the kernel ran (None if it ran no cell defining a graded function)."""
    defining = {}
    for name in exercise.function_names:
        latest = next((i for i, source in reversed(history) if _defines(source, name)), None)
        if latest is not None:
            defining[name] = latest
    if not defining:
        return None
    chosen = set(defining.values())
    helpers: list[tuple[str, str]] = []
    tagged = _tagged(saved) if saved is not None else []
    for index, source in tagged:  # as last run (its imports, helpers), or as saved if never run
        ran = next((i for i, s in reversed(history) if _same(s, source)), None)
        if ran is not None:
            chosen.add(ran)
        elif not any(_defines(source, name) for name in exercise.function_names):
            helpers.append((f"cell {index + 1}", source))  # what the kernel defines instead stands for it
    sources = dict(history)
    graded = Graded(
        helpers + [(_label(i), sources[i]) for i in sorted(chosen)],
        [(_label(i), s) for i, s in history if i not in chosen],
    )
    if saved is not None:
        graded.warnings += _differences(defining, sources, saved, saved_name, graded.cells)
    return graded


def _differences(
    defining: dict[str, int],
    sources: dict[int, str],
    saved: nbformat.NotebookNode,
    saved_name: str,
    cells: list[tuple[str, str]],
) -> list[str]:
    """Why the saved notebook would be graded differently from what the kernel ran, if it would."""
    saved_code = [source for _, source in _tagged(saved)]
    ran_code = [source for _, source in cells]
    if len(saved_code) == len(ran_code) and all(map(_same, saved_code, ran_code)):
        return []
    untagged = [
        (i, c.source)
        for i, c in enumerate(saved.cells)
        if c.get("cell_type") == "code" and not notebook_source.is_exercise_cell(c)
    ]
    said = []
    for name, index in sorted(defining.items()):
        cell = next((i for i, s in untagged if _same(s, sources[index])), None)
        if cell is not None:
            said.append(
                f"{name}() comes from {_label(index)}, cell {cell + 1} of {saved_name}, which is not "
                f"tagged `{notebook_source.TAG}`: the saved notebook is graded without it. Tag that cell, or "
                "move the function into the exercise cell"
            )
    if not said:
        said.append(
            f"the exercise cells of the saved {saved_name} differ from what this kernel ran (edited "
            "or run again since the last save)"
        )
    return [f"{line}; checking what this kernel ran. Then {SAVE_ADVICE}." for line in said]


def _history(shell: Any) -> list[tuple[int, str]]:
    """Every cell this kernel ran, by execution number, but the one running now (the check)."""
    raw = list(shell.history_manager.input_hist_raw)
    now = len(raw) - 1
    return [(i, source) for i, source in enumerate(raw) if 0 < i < now and source.strip()]


def _write(exercise: Exercise, graded: Graded, folder: Path, saved: Path | None = None) -> Path:
    """The cells to grade as a notebook of their own, labelled as the student knows them; it names the saved
    notebook it came from, so that the check's result counts in progress (`grader list`) for that one."""
    book = nbformat.v4.new_notebook()
    book.metadata[notebook_source.METADATA_KEY] = {"exercise": exercise.id}
    if saved is not None:
        book.metadata[notebook_source.METADATA_KEY][notebook_source.SAVED_KEY] = str(saved.resolve())

    def cell(label: str, source: str, tags: list[str]) -> nbformat.NotebookNode:
        metadata = {"tags": tags, notebook_source.METADATA_KEY: {"label": label}}
        return nbformat.v4.new_code_cell(source, metadata=metadata)

    book.cells = [cell(label, source, []) for label, source in graded.context]
    book.cells += [cell(label, source, [notebook_source.TAG]) for label, source in graded.cells]
    path = folder / notebook_source.notebook_name(exercise)
    nbformat.write(book, path)
    return path


def _run_grader(argv: Sequence[str]) -> int:
    """`python -m grader ARGV` with this kernel's interpreter, its output shown as it comes."""
    env = {**os.environ, "NO_COLOR": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(
        [sys.executable, "-m", "grader", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    try:
        assert process.stdout is not None
        for line in process.stdout:
            print(line, end="", flush=True)
        return process.wait()
    except KeyboardInterrupt:  # the kernel was interrupted: the grader stops its ranks and exits
        process.send_signal(2)
        process.wait()
        raise


def _shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def check(
    exercise: str, world_size: int | None = None, verbose: bool = False, notebook: str | os.PathLike[str] | None = None
) -> None:
    """Check an exercise as this kernel last ran it (see the module's docstring)."""
    options = [*(["--world-size", str(world_size)] if world_size else []), *(["-v"] if verbose else [])]
    try:
        _check(exercise, options, Path(notebook) if notebook else None)
    except (KernelCheckError, CatalogError, CourseNotFound, notebook_source.NotebookError) as exc:
        print(f"grader: {exc}")


def _check(key: str, options: Sequence[str], explicit: Path | None) -> None:
    catalog = course_catalog()
    exercise = catalog.get(key)
    shell = _shell()
    history = _history(shell) if shell is not None else []
    session = os.environ.get("JPY_SESSION_NAME") or (shell.user_ns.get("__session__") if shell else None)
    path = explicit or saved_notebook(exercise, history, session, Path.cwd())
    saved = notebook_source.read(path) if path is not None else None
    # path is not None wherever saved is (read above only for a path); the test tells mypy so.
    if saved is not None and path is not None and notebook_source.exercise_of(saved, path, catalog).id != exercise.id:
        saved, path = None, None  # the notebook Jupyter names holds another exercise
    graded = kernel_cells(exercise, history, saved, path.name if path else "")
    if graded is None:
        if path is None:
            raise KernelCheckError(
                f"this kernel has not run a cell that defines "
                f"{exercise.function_names[0]}(), and no saved notebook of {exercise.id} is "
                "in this folder: run your exercise cell, then check again"
            )
        print(
            f"warning: this kernel has not run a cell that defines {exercise.function_names[0]}(): "
            f"checking the saved {path.name} instead."
        )
        _run_grader(["check", str(path), *options])
        return
    for warning in graded.warnings:
        print(f"warning: {warning}")
    with tempfile.TemporaryDirectory(prefix="grader-kernel-") as folder:
        _run_grader(["check", str(_write(exercise, graded, Path(folder), path)), *options])


def grader_magic(line: str) -> None:
    """`%grader check ex03 [--world-size N] [-v]` checks what this kernel ran; `%grader hint ex03`
    and the other commands run as `grader ...` would in a terminal."""
    argv = shlex.split(line)
    if not argv or argv[0] != "check":
        _run_grader(argv or ["--help"])
        return
    keys = [a for a in argv[1:] if re.fullmatch(r"[\w.-]+", a) and not a.startswith("-")]
    values = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a in ("--world-size", "--deadline", "--backend")}
    keys = [k for k in keys if k not in values]
    options = [a for a in argv[1:] if a not in keys]
    if not keys:
        print("grader: name the exercise to check, e.g. %grader check ex03")
        return
    for key in keys:
        try:
            _check(key, options, None)
        except (KernelCheckError, CatalogError, CourseNotFound, notebook_source.NotebookError) as exc:
            print(f"grader: {exc}")


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext grader.notebook`; importing this module in IPython does it too."""
    ipython.register_magic_function(grader_magic, "line", "grader")


if _shell() is not None:
    load_ipython_extension(_shell())
