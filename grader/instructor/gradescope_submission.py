"""What to grade in the folder Gradescope fills with a student's upload.

Gradescope puts whatever the student uploaded into `/autograder/submission`: loose exercise files,
the same files inside a folder (an uploaded repository, a zip it unpacked), a zip, notebooks. This
finds the exercise files wherever they sit (by their catalog names, the shallowest copy of each)
and gathers them into one folder for `grader grade`; failing that, a single zip or a single notebook
is handed over as it is. Symbolic links and special files are refused, never followed. A submission
with nothing of the course in it is graded as an empty folder, so the student sees every check with
"file missing" rather than a bare zero.

Run by the autograder's `run_autograder`:  python -m grader.instructor.gradescope_submission SUBMISSION WORKDIR
(prints the path to grade; on a problem, one line `grader: ...` on stderr and exit status 2).
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from grader.catalog import Catalog, CatalogError, course_catalog
from grader.notebook_source import notebook_name
from grader.paths import CourseNotFound
from grader.report.inert import one_line

SKIPPED_FOLDERS = ("__MACOSX", "__pycache__")


class LocateError(Exception):
    """The upload cannot be graded as it is; the message tells the student what to change."""


def _regular(path: Path, root: Path) -> Path:
    if path.is_symlink() or not path.is_file():
        raise LocateError(f"{path.relative_to(root)} is a link or a special file: upload the file itself")
    return path


def _scan(root: Path, wanted: set[str]) -> tuple[dict[str, list[Path]], list[Path], list[Path]]:
    """Exercise files by name (every copy), other zips, other notebooks; links are never followed."""
    found: dict[str, list[Path]] = {}
    zips: list[Path] = []
    notebooks: list[Path] = []
    for folder, folders, files in os.walk(root):
        folders[:] = sorted(f for f in folders if not f.startswith(".") and f not in SKIPPED_FOLDERS)
        for name in sorted(files):
            path = Path(folder) / name
            if name in wanted:
                found.setdefault(name, []).append(path)
            elif name.endswith(".zip"):
                zips.append(path)
            elif name.endswith(".ipynb") and not name.startswith("."):
                notebooks.append(path)
    return found, zips, notebooks


def _shallowest(name: str, copies: list[Path], root: Path) -> Path:
    depth = min(len(p.relative_to(root).parts) for p in copies)
    closest = [p for p in copies if len(p.relative_to(root).parts) == depth]
    if len(closest) > 1:
        places = " and ".join(str(p.relative_to(root)) for p in closest)
        raise LocateError(f"two copies of {name} ({places}): upload one")
    return _regular(closest[0], root)


def locate(submission: Path, workdir: Path, catalog: Catalog) -> Path:
    """The path `grader grade` should grade: a folder made under `workdir`, or a zip or notebook as uploaded."""
    if not submission.is_dir():
        raise LocateError(f"nothing was submitted ({submission} is not a folder)")
    wanted = {name for e in catalog.exercises for name in (e.file, notebook_name(e))}
    found, zips, notebooks = _scan(submission, wanted)
    folder = workdir / "submission"
    folder.mkdir(parents=True)
    if found:
        for name, copies in sorted(found.items()):
            shutil.copyfile(_shallowest(name, copies, submission), folder / name)
        return folder
    for kind, paths in (("zip", zips), ("notebook", notebooks)):
        if len(paths) == 1:
            return _regular(paths[0], submission)
        if paths:
            names = ", ".join(str(p.relative_to(submission)) for p in paths)
            raise LocateError(
                f"{len(paths)} {kind}s and no exercise file named as in the course ({names}): "
                "upload one, or the exercise files themselves"
            )
    return folder  # nothing of the course: every check says "file missing"


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m grader.instructor.gradescope_submission SUBMISSION WORKDIR", file=sys.stderr)
        return 2
    try:
        print(locate(Path(argv[0]), Path(argv[1]), course_catalog()))
    except (LocateError, OSError, CatalogError, CourseNotFound) as exc:
        print(f"grader: {one_line(str(exc))}", file=sys.stderr)  # one line: run_autograder shows it to the student
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
