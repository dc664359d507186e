"""Where the course lives on disk.

The grader works on a course directory (the one holding `exercises/catalog.toml`), found from the
current directory upwards so that students can run `grader` from anywhere inside their clone, and
falling back to the checkout the package was installed from.
"""

from __future__ import annotations

import os
from pathlib import Path

STUBS = Path("exercises")  # the files students edit, and the catalog beside them
SOLUTIONS = Path("solutions")
CATALOG = STUBS / "catalog.toml"
NOTEBOOKS = Path("notebooks")  # where `grader notebook build` writes by default: inside the course, so checks count


class CourseNotFound(Exception):
    """No course directory could be located."""


def course_root(start: Path | None = None) -> Path:
    """The course directory: $GRADER_COURSE, else the nearest parent holding the catalog."""
    override = os.environ.get("GRADER_COURSE")
    if override:
        root = Path(override).resolve()
        if not (root / CATALOG).is_file():
            raise CourseNotFound(f"GRADER_COURSE={override} holds no {CATALOG}")
        return root
    here = (start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if (candidate / CATALOG).is_file():
            return candidate
    installed = Path(__file__).resolve().parent.parent
    if (installed / CATALOG).is_file():
        return installed
    raise CourseNotFound(
        f"no course found: no {CATALOG} in {here} or its parents; run grader inside the course "
        "directory or set GRADER_COURSE"
    )


def course_origin(root: Path, start: Path | None = None) -> str:
    """How `course_root` came to `root`, for a command that must say which course it uses: the installed
    checkout, reached from a folder in no course, would otherwise be used without a word."""
    if os.environ.get("GRADER_COURSE"):
        return "set by GRADER_COURSE"
    here = (start or Path.cwd()).resolve()
    if here.is_relative_to(root):
        return "the course the current folder is in"
    return (
        f"the course this grader was installed from, since {here} is in no course; run it inside a course, or set "
        "GRADER_COURSE, to use another"
    )


def ships(part: str) -> bool:
    """Whether `part` (a module or package of grader/, by file name) is in this grader: a student copy leaves the
    instructor's parts out. Asked of the files, not of the import system, which may find an editable install's."""
    return (Path(__file__).parent / part).exists()
