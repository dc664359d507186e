"""A run's folders as both launchers keep them (zygote.py, pool.py): a private folder per run,
removed when the run ends, scratch folders shared by the runs of one grading, and the `ended`
event that names what the run left running."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from grader.engine import spawn_log
from grader.engine.processes import Stray

MAX_STRAYS_REPORTED = 50


def new_run(scratch_root: Path, scratch: str) -> Path:
    """A fresh folder for one run; `scratch` (or "") is the grading's shared folder, made if new."""
    run_dir = Path(tempfile.mkdtemp(prefix="run-", dir=scratch_root))
    if scratch:
        os.makedirs(scratch, exist_ok=True)
    return run_dir


def ended(run_id: str, run_dir: Path, strays: Sequence[Stray]) -> dict[str, Any]:
    """The run's last event: its strays, each with where the ranks started it. Removes the folder."""
    origins = spawn_log.read(run_dir)
    shutil.rmtree(run_dir, ignore_errors=True)
    reported = [{**stray.to_json(), "origin": origins.get(stray.pid, "")} for stray in strays]
    return {"event": "ended", "run": run_id, "strays": reported[:MAX_STRAYS_REPORTED], "stray_count": len(reported)}


def discard(scratch_root: Path, path: str) -> None:
    """Remove a grading's scratch folder (only ever one below the scratch root)."""
    folder = Path(path).resolve()
    if folder.is_relative_to(scratch_root.resolve()) and folder != scratch_root.resolve():
        shutil.rmtree(folder, ignore_errors=True)
