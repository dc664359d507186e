"""A submission as handed in (a folder, a zip of one, or a notebook) made into a folder of exercise files.

Everything the grader later imports sits in one private folder per submission, named like the
exercises (`ex01_process_group.py`, ...). A notebook stands for its own exercise; a folder or zip may
hold notebooks in place of `.py` files. Archives are unpacked defensively: no member may escape the
folder and the unpacked size is capped, so a hostile zip cannot fill the disk or overwrite files.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader.catalog import Catalog
from grader.instructor import notebooks

MAX_UNPACKED_BYTES = 64 * 1024 * 1024


class SubmissionError(Exception):
    """The submission cannot be opened at all; it is graded zero with this message."""


@dataclass
class Submission:
    name: str
    source: Path
    folder: Path  # the exercise files, ready to grade
    problems: dict[str, str] = field(default_factory=dict)  # exercise id -> why its file is unusable


def name_of(path: Path) -> str:
    return path.name.removesuffix(".zip").removesuffix(".ipynb") or path.name


def _unzip(path: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(path) as archive:
            members = [m for m in archive.infolist() if not m.is_dir() and "__MACOSX" not in m.filename]
            if sum(m.file_size for m in members) > MAX_UNPACKED_BYTES:
                raise SubmissionError(f"{path.name} unpacks to more than {MAX_UNPACKED_BYTES >> 20} MiB")
            for member in members:
                target = (into / member.filename).resolve()
                if not target.is_relative_to(into.resolve()):
                    raise SubmissionError(f"{path.name}: member {member.filename!r} points outside the archive")
                target.parent.mkdir(parents=True, exist_ok=True)
                with archive.open(member) as source, open(target, "wb") as out:
                    shutil.copyfileobj(source, out)
    except (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError) as exc:
        raise SubmissionError(f"{path.name} is not a readable zip archive: {exc}") from exc
    return _content_root(into)


def _content_root(folder: Path) -> Path:
    """A zip of a folder holds that one folder: look inside it."""
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) == 1 and entries[0].is_dir():
        return _content_root(entries[0])
    return folder


def _collect(source: Path, catalog: Catalog, folder: Path, submission: Submission) -> None:
    """Copy each exercise's file, or extract it from the exercise's notebook when no file is there."""
    for exercise in catalog.exercises:
        module = source / exercise.file
        notebook = source / notebooks.notebook_name(exercise)
        if module.is_file():
            shutil.copyfile(module, folder / exercise.file)
        elif notebook.is_file():
            try:
                notebooks.extract(notebook, catalog, folder)
            except notebooks.NotebookError as exc:
                submission.problems[exercise.id] = str(exc)


def prepare(path: Path, catalog: Catalog, workdir: Path) -> Submission:
    """Turn one handed-in path into a folder of exercise files under `workdir` (which must be empty)."""
    folder = workdir / "files"
    folder.mkdir(parents=True)
    submission = Submission(name_of(path), path, folder)
    if path.is_dir():
        _collect(path, catalog, folder, submission)
    elif path.suffix == ".zip" and path.is_file():
        unpacked = workdir / "unpacked"
        unpacked.mkdir()
        _collect(_unzip(path, unpacked), catalog, folder, submission)
    elif path.suffix == ".ipynb" and path.is_file():
        try:
            notebooks.extract(path, catalog, folder)
        except notebooks.NotebookError as exc:
            raise SubmissionError(str(exc)) from exc
    elif not path.exists():
        raise SubmissionError(f"{path}: no such file or directory")
    else:
        raise SubmissionError(f"{path.name}: a submission is a folder, a .zip or an .ipynb notebook")
    return submission
