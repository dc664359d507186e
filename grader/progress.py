"""The student's progress: which exercises pass, kept in `.grader/` inside the course.

A result is remembered with the hash of the file it was obtained on, so an exercise edited since
its last check shows as "changed" instead of a stale "passing". An exercise last checked in a notebook
(`grader check x.ipynb`, or `notebook.check` from a kernel) is remembered with that notebook and the
hash of its exercise cells, and its status follows the notebook: its stub in exercises/ stays untouched.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from pathlib import Path

from grader import notebook_source, student_files
from grader.catalog import Exercise
from grader.judge.verdict import CheckResult

STATE_DIR = ".grader"


def file_hash(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return ""


class Progress:
    def __init__(self, root: Path) -> None:
        self.path = root / STATE_DIR / "progress.json"
        try:
            self._state: dict[str, dict] = json.loads(self.path.read_text())
        except (OSError, ValueError):
            self._state = {}

    def record(self, exercise: Exercise, path: Path, results: Sequence[CheckResult]) -> None:
        self._save(exercise, {"hash": file_hash(path)}, results)

    def record_notebook(
        self, exercise: Exercise, notebook: Path, code_hash: str, results: Sequence[CheckResult]
    ) -> None:
        """A check of the notebook's exercise cells (`code_hash`, see notebook_source.code_hash)."""
        self._save(exercise, {"hash": code_hash, "notebook": str(notebook.resolve())}, results)

    def _save(self, exercise: Exercise, entry: dict, results: Sequence[CheckResult]) -> None:
        self._state[exercise.id] = {**entry, "passed": bool(results) and all(r.passed for r in results)}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self._state, indent=2, sort_keys=True))

    def status(self, exercise: Exercise, path: Path) -> str:
        """One of: not started, passing, failing, changed (edited since its last check)."""
        entry = self._state.get(exercise.id)
        notebook = Path(entry["notebook"]) if entry and entry.get("notebook") else None
        if entry and notebook is not None and notebook.is_file():
            try:
                same = notebook_source.code_hash(notebook_source.read(notebook)) == entry["hash"]
            except notebook_source.NotebookError:
                same = False
            return ("passing" if entry["passed"] else "failing") if same else "changed"
        if student_files.is_untouched(path, exercise):
            return "not started"
        if entry is None or entry["hash"] != file_hash(path):
            return "changed" if entry else "not checked"
        return "passing" if entry["passed"] else "failing"
