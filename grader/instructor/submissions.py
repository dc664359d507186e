"""A submission as handed in (a folder, a zip, a notebook or an exercise's .py) made into a folder of exercise
files, and named: `grader grade` grades each path it is given as one submission.

Which files are graded, and how what is handed in is read safely, is grader/intake.py's, the one rule every
path (`grader grade`, the Gradescope autograder, `grader check --path`) chooses files by; this adds what only
a batch has: the submission's name, and the tools' leftovers in a class folder that are no submission.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from grader.catalog import Catalog
from grader.intake import Intake, take_in


@dataclass(kw_only=True)
class Submission(Intake):
    """Its exercise files, ready to grade (`folder`), and what was handed in."""

    name: str
    source: Path
    notes: list[str] = field(default_factory=list)  # what grading it ran into (a sandbox's limit)


# What a file manager, an archiver or Jupyter leaves beside the submissions in a class folder: never one of
# them, so left out of a batch and named with this reason. Any other name is graded, a leading dot included.
_LEFTOVERS = {
    ".ds_store": "macOS Finder's folder settings",
    "__macosx": "the resource forks a macOS archiver leaves",
    "thumbs.db": "Windows Explorer's thumbnail cache",
    "desktop.ini": "Windows Explorer's folder settings",
    ".ipynb_checkpoints": "Jupyter's autosaves",
}


def leftover(path: Path) -> str | None:
    """Why an entry of a class folder is no submission but a tool's leftover (None: it is graded, whatever its
    name). A `._NAME` file is the AppleDouble half macOS writes beside NAME on a disk that cannot hold its
    metadata; a folder of that name is graded."""
    if path.name.startswith("._") and not path.is_dir():
        return "the AppleDouble metadata file macOS writes beside a file"
    return _LEFTOVERS.get(path.name.casefold())


def name_of(path: Path) -> str:
    for suffix in (".zip", ".ipynb", ".py"):
        if path.name.endswith(suffix) and path.name != suffix:
            return path.name.removesuffix(suffix)
    return path.name


def prepare(path: Path, catalog: Catalog, workdir: Path) -> Submission:
    """Turn one handed-in path into a folder of exercise files under `workdir` (which must be empty);
    SubmissionError (grader/intake.py) when nothing of it can be graded."""
    intake = take_in(path, catalog, workdir)
    return Submission(
        intake.folder, intake.problems, intake.source_maps, intake.choices, name=name_of(path), source=path
    )
