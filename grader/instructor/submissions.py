"""A submission as handed in (a folder, a zip of one, or a notebook) made into a folder of exercise files.

Everything the grader later imports sits in one private folder per submission, named like the
exercises (`ex01_process_group.py`, ...). A notebook stands for its own exercise; a folder or zip may
hold notebooks in place of `.py` files, and where it holds several files for one exercise, one is
chosen by a stated rule (`_choose`) and the choice is reported. Archives are unpacked defensively:
no member may escape the folder and the unpacked size is capped, so a hostile zip cannot fill the
disk or overwrite files.
"""

from __future__ import annotations

import shutil
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from grader import student_files
from grader.catalog import Catalog, Exercise
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
    notes: list[str] = field(default_factory=list)  # which file was graded where there was a choice
    source_maps: dict[str, notebooks.SourceMap] = field(default_factory=dict)  # exercise id -> its cells


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


def _notebooks_by_exercise(source: Path, catalog: Catalog, submission: Submission) -> dict[str, list[Path]]:
    """Each exercise's notebooks: named like it (`ex04_launch.ipynb`, `ex04_launch-Copy1.ipynb`), or
    whatever their name, with grader metadata naming it. An unreadable one named like an exercise is
    that exercise's problem; other stray notebooks are ignored."""
    found: dict[str, list[Path]] = {}
    for path in sorted(source.glob("*.ipynb")):
        named = next((e for e in catalog.exercises if path.stem.startswith(Path(e.file).stem)), None)
        try:
            recorded = notebooks.recorded_exercise(notebooks.read(path))
        except notebooks.NotebookError as exc:
            if named is not None:
                submission.problems.setdefault(named.id, str(exc))
            continue
        exercise = next((e for e in catalog.exercises if e.id == recorded), named)
        if exercise is not None:
            found.setdefault(exercise.id, []).append(path)
    return found


def _candidate(path: Path, exercise: Exercise, catalog: Catalog, into: Path) -> notebooks.SourceMap | None:
    """Put one candidate file for an exercise into `into` as the exercise's file."""
    into.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".ipynb":
        return notebooks.extract(path, catalog, into).source_map
    shutil.copyfile(path, into / exercise.file)
    return None


def _choose(exercise: Exercise, candidates: list[Path], catalog: Catalog, folder: Path,
            submission: Submission) -> None:
    """The stated rule (docs/INSTRUCTORS.md): a file that is still the untouched stub is set aside
    when another holds work; of the rest, the .py, then the notebook named like the exercise, then
    other notebooks by name. Any choice, and a notebook graded under another name, is reported."""
    usable: list[tuple[Path, Path, notebooks.SourceMap | None]] = []
    for index, path in enumerate(candidates):
        staged = folder.parent / "candidates" / exercise.id / str(index)
        try:
            usable.append((path, staged, _candidate(path, exercise, catalog, staged)))
        except notebooks.NotebookError as exc:
            submission.problems.setdefault(exercise.id, str(exc))
    if not usable:
        return
    submission.problems.pop(exercise.id, None)
    worked = [u for u in usable if not student_files.is_untouched(u[1] / exercise.file, exercise)]
    path, staged, source_map = (worked or usable)[0]
    shutil.copyfile(staged / exercise.file, folder / exercise.file)
    if source_map is not None:
        submission.source_maps[exercise.id] = source_map
    others = [p.name for p, _, _ in usable if p != path]
    why = []
    if others:
        stubs = [p.name for p, s, _ in usable if p != path and student_files.is_untouched(s / exercise.file, exercise)]
        rest = [name for name in others if name not in stubs]
        why += [f"{name} is the untouched stub" for name in stubs]
        why += [f"{name} was not graded (one file per exercise: the .py, then {notebooks.notebook_name(exercise)}, "
                "then other notebooks by name)" for name in rest]
    if path.suffix == ".ipynb" and path.name != notebooks.notebook_name(exercise):
        why.append(f"its metadata or name makes it {exercise.id}")
    if why:
        submission.notes.append(f"{exercise.id}: graded {path.name}; {'; '.join(why)}")


def _collect(source: Path, catalog: Catalog, folder: Path, submission: Submission) -> None:
    """Choose each exercise's file among the .py and the notebooks that stand for it."""
    by_exercise = _notebooks_by_exercise(source, catalog, submission)
    for exercise in catalog.exercises:
        module = source / exercise.file
        exact = source / notebooks.notebook_name(exercise)
        found = by_exercise.get(exercise.id, [])
        candidates = [module] if module.is_file() else []
        candidates += [exact] if exact in found else []
        candidates += [p for p in found if p != exact]
        if candidates:
            _choose(exercise, candidates, catalog, folder, submission)


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
            extracted = notebooks.extract(path, catalog, folder)
        except notebooks.NotebookError as exc:
            raise SubmissionError(str(exc)) from exc
        submission.source_maps[extracted.exercise.id] = extracted.source_map
    elif not path.exists():
        raise SubmissionError(f"{path}: no such file or directory")
    else:
        raise SubmissionError(f"{path.name}: a submission is a folder, a .zip or an .ipynb notebook")
    return submission
