"""Original copies of the stubs, for `grader reset`.

The grader keeps a copy of each stub the first time it sees it untouched (every function still
raising NotImplementedError), in `.grader/pristine/`. Resetting an exercise backs the student's
file up to `.grader/backups/` first: nothing is ever lost.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from grader import student_files
from grader.catalog import Catalog, Exercise
from grader.progress import STATE_DIR


class ResetError(Exception):
    pass


def _copy_path(root: Path, exercise: Exercise) -> Path:
    return root / STATE_DIR / "pristine" / exercise.file


def remember_stubs(catalog: Catalog) -> None:
    for exercise in catalog.exercises:
        stub = catalog.stub_path(exercise)
        copy = _copy_path(catalog.root, exercise)
        if not copy.exists() and stub.is_file() and student_files.is_untouched(stub, exercise):
            copy.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(stub, copy)


def reset(catalog: Catalog, exercise: Exercise) -> Path | None:
    """Restore the stub; returns where the student's version was backed up (None if absent)."""
    copy = _copy_path(catalog.root, exercise)
    target = catalog.stub_path(exercise)
    if not copy.is_file():
        raise ResetError(
            f"no original copy of {exercise.file} was recorded (the grader records one the first "
            f"time it sees the untouched stub); recover it from your course's git history, e.g. "
            f"`git log --diff-filter=A -- exercises/{exercise.file}`"
        )
    backup = None
    if target.exists():
        backup = catalog.root / STATE_DIR / "backups" / f"{target.stem}.{time.strftime('%Y%m%d-%H%M%S')}{target.suffix}"
        backup.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(target, backup)
    shutil.copyfile(copy, target)
    return backup
