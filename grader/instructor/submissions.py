"""A submission as handed in (a folder, a zip of one, or a notebook) made into a folder of exercise files.

Everything the grader later imports sits in one private folder per submission, named like the
exercises (`ex01_process_group.py`, ...). A notebook stands for its own exercise; a folder or zip may
hold notebooks in place of `.py` files, and where it holds several files for one exercise, one is
chosen by a stated rule (`_choose`) and the choice is reported.

What is handed in is read once, defensively, into a private copy that everything later works on:
a symbolic link or special file anywhere in it (the submission itself, an entry of its folder at
any depth, a zip member) refuses the submission, and nothing is ever followed, even a link swapped
in after the check (files are opened with O_NOFOLLOW). Sizes and counts are capped, and no zip
member may escape the folder, so a hostile submission cannot read the grader's files, fill the
disk or overwrite files.
"""

from __future__ import annotations

import errno
import lzma
import os
import shutil
import stat
import zipfile
import zlib
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from grader import notebook_source, student_files
from grader.catalog import Catalog, Exercise
from grader.grading import ExerciseFiles

MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # a submission's files, unpacked or copied, and a zip as handed in
MAX_MEMBERS = 10_000  # entries of a zip, or files and folders of a submission folder
MAX_FOLDER_DEPTH = 64  # folders a zip member may sit in: each is made, and pathlib makes them recursively
_ENCRYPTED = 0x1  # a zip member's flag bit
_UNREADABLE_ZIP = (zipfile.BadZipFile, zipfile.LargeZipFile, NotImplementedError, EOFError, zlib.error, lzma.LZMAError)
_KINDS = {
    stat.S_IFLNK: "a symbolic link",
    stat.S_IFIFO: "a named pipe (FIFO)",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}
_NO_FOLLOW = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO swapped in cannot hang


class SubmissionError(Exception):
    """The submission cannot be opened at all; it is graded zero with this message."""


@dataclass(kw_only=True)
class Submission(ExerciseFiles):
    """Its exercise files, ready to grade (`folder`), and what was handed in."""

    name: str
    source: Path
    notes: list[str] = field(default_factory=list)  # which file was graded where there was a choice

    def problem(self, exercise: Exercise) -> str | None:
        """A submission must hold each exercise's file: one it lacks is said missing, not left to its checks."""
        if exercise.id in self.problems:
            return self.problems[exercise.id]
        if not (self.folder / exercise.file).is_file():
            return f"file missing: {exercise.file} is not in the submission"
        return None


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
    return path.name.removesuffix(".zip").removesuffix(".ipynb") or path.name


def _shown(name: str) -> str:
    """A file name as messages and the private copy spell it: bytes that are not UTF-8 as escapes, so
    that no report (the gradebook is UTF-8) chokes on them."""
    return name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")


def _not_regular(name: str, mode: int) -> SubmissionError:
    kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
    return SubmissionError(f"{_shown(name)} is {kind}: submissions hold regular files only")


def _copy_regular(source: Path | str, name: str, target: Path, budget: int, dir_fd: int | None = None) -> int:
    """Copy one regular file, never through a link (not even one swapped in since the folder was checked),
    and return its size; SubmissionError if it is no regular file or is bigger than `budget` bytes."""
    try:
        fd = os.open(source, _NO_FOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _not_regular(name, stat.S_IFLNK) from exc
        raise SubmissionError(f"{_shown(name)} cannot be read: {exc.strerror}") from exc
    with open(fd, "rb") as handle:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise _not_regular(name, mode)
        copied = 0
        with open(target, "wb") as out:
            while chunk := handle.read(min(1 << 20, budget + 1 - copied)):
                copied += len(chunk)
                if copied > budget:
                    raise SubmissionError(
                        f"{_shown(name)} takes the submission over {MAX_UNPACKED_BYTES >> 20} "
                        "MiB, the most a submission's files may add up to"
                    )
                out.write(chunk)
    return copied


def _top_files(root: Path) -> list[str]:
    """The names of the regular files at the top of `root`, once every entry at any depth is known to be a
    regular file or folder (lstat only: nothing is followed or opened)."""
    top: list[str] = []
    folders, seen = [root], 0
    while folders:
        folder = folders.pop()
        with os.scandir(folder) as entries:
            for entry in entries:
                seen += 1
                if seen > MAX_MEMBERS:
                    raise SubmissionError(f"{_shown(root.name)} holds more than {MAX_MEMBERS} files and folders")
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    folders.append(Path(entry.path))
                elif not stat.S_ISREG(mode):
                    raise _not_regular(os.path.relpath(entry.path, root), mode)
                elif folder == root:
                    top.append(entry.name)
    return top


def _copy_folder(path: Path, catalog: Catalog, into: Path) -> Path:
    """The folder's exercise files and notebooks (all the grader reads of it), copied into `into`."""
    wanted = {exercise.file for exercise in catalog.exercises}
    into.mkdir()
    try:
        names = [n for n in sorted(_top_files(path)) if n in wanted or n.endswith(".ipynb")]
        dir_fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:  # a folder in it that is closed to the grader, say
        where = os.path.relpath(exc.filename, path) if isinstance(exc.filename, str) else path.name
        raise SubmissionError(f"{_shown(path.name)} cannot be read: {_shown(where)}: {exc.strerror}") from exc
    try:
        budget = MAX_UNPACKED_BYTES
        for name in names:
            budget -= _copy_regular(name, name, into / _shown(name), budget, dir_fd)
    finally:
        os.close(dir_fd)
    return into


def _member(member: zipfile.ZipInfo) -> str:
    """A member's name for a message: a zip may name a member with 64 KiB of characters."""
    return repr(member.filename if len(member.filename) <= 200 else member.filename[:200] + "...")


def _member_problem(member: zipfile.ZipInfo) -> str | None:
    """Why a zip member is refused, if it is: zipfile itself would cut a name at a NUL and unpack a link
    as a file holding its target."""
    mode = member.external_attr >> 16
    if "\0" in member.orig_filename:
        return "has a NUL byte in its name"
    if member.filename.startswith(("/", "\\")) or PureWindowsPath(member.filename).drive:
        return "is an absolute path"
    if len(PurePosixPath(member.filename).parts) > MAX_FOLDER_DEPTH:
        return f"sits in folders nested more than {MAX_FOLDER_DEPTH} folders deep"
    if member.flag_bits & _ENCRYPTED:
        return "is encrypted: hand in an archive without a password"
    if stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):
        return f"is {_KINDS.get(stat.S_IFMT(mode), 'a special file')}: submissions hold regular files only"
    return None


def _unzip(path: Path, into: Path) -> Path:
    try:
        with zipfile.ZipFile(path) as archive:
            members = archive.infolist()
            if len(members) > MAX_MEMBERS:
                raise SubmissionError(
                    f"{path.name} holds {len(members)} members; a submission holds at most {MAX_MEMBERS}"
                )
            for member in members:
                if (problem := _member_problem(member)) is not None:
                    raise SubmissionError(f"{path.name}: member {_member(member)} {problem}")
            files = [m for m in members if not m.is_dir() and "__MACOSX" not in m.filename]
            if sum(m.file_size for m in files) > MAX_UNPACKED_BYTES:
                raise SubmissionError(f"{path.name} unpacks to more than {MAX_UNPACKED_BYTES >> 20} MiB")
            root = into.resolve()
            targets: set[Path] = set()
            for member in files:
                target = (into / member.filename).resolve()
                if not target.is_relative_to(root):
                    raise SubmissionError(f"{path.name}: member {_member(member)} points outside the archive")
                if target in targets:  # zipfile would unpack both, the last one winning, with nothing said
                    raise SubmissionError(
                        f"{path.name}: member {_member(member)} is in the archive twice: which copy to grade is "
                        "ambiguous; hand in an archive that holds each file once"
                    )
                targets.add(target)
                try:
                    target.parent.mkdir(parents=True, exist_ok=True)
                    with archive.open(member) as source, open(target, "wb") as out:
                        shutil.copyfileobj(source, out)
                except OSError as exc:  # a member named like a folder another member made, a name too long...
                    raise SubmissionError(
                        f"{path.name}: member {_member(member)} cannot be unpacked: {exc.strerror or exc}"
                    ) from exc
    except _UNREADABLE_ZIP as exc:
        raise SubmissionError(f"{path.name} is not a readable zip archive: {exc}") from exc
    return _content_root(into)


def _content_root(folder: Path) -> Path:
    """A zip of a folder holds that one folder: look inside it (however deep the zip nests it)."""
    while len(entries := [p for p in folder.iterdir() if not p.name.startswith(".")]) == 1 and entries[0].is_dir():
        folder = entries[0]
    return folder


def _notebooks_by_exercise(source: Path, catalog: Catalog, submission: Submission) -> dict[str, list[Path]]:
    """Each exercise's notebooks: named like it (`ex04_launch.ipynb`, `ex04_launch-Copy1.ipynb`), or
    whatever their name, with grader metadata naming it. An unreadable one named like an exercise is
    that exercise's problem; other stray notebooks are ignored."""
    found: dict[str, list[Path]] = {}
    for path in sorted(source.glob("*.ipynb")):
        named = next((e for e in catalog.exercises if path.stem.startswith(Path(e.file).stem)), None)
        try:
            recorded = notebook_source.recorded_exercise(notebook_source.read(path))
        except notebook_source.NotebookError as exc:
            if named is not None:
                submission.problems.setdefault(named.id, str(exc))
            continue
        exercise = next((e for e in catalog.exercises if e.id == recorded), named)
        if exercise is not None:
            found.setdefault(exercise.id, []).append(path)
    return found


def _candidate(path: Path, exercise: Exercise, catalog: Catalog, into: Path) -> notebook_source.SourceMap | None:
    """Put one candidate file for an exercise into `into` as the exercise's file."""
    into.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".ipynb":
        return notebook_source.extract(path, catalog, into).source_map
    shutil.copyfile(path, into / exercise.file)
    return None


def _choose(exercise: Exercise, candidates: list[Path], catalog: Catalog, folder: Path, submission: Submission) -> None:
    """The stated rule (docs/INSTRUCTORS.md): a file that is still the untouched stub is set aside
    when another holds work; of the rest, the .py, then the notebook named like the exercise, then
    other notebooks by name. Any choice, and a notebook graded under another name, is reported."""
    usable: list[tuple[Path, Path, notebook_source.SourceMap | None]] = []
    for index, path in enumerate(candidates):
        staged = folder.parent / "candidates" / exercise.id / str(index)
        try:
            usable.append((path, staged, _candidate(path, exercise, catalog, staged)))
        except notebook_source.NotebookError as exc:
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
        named = notebook_source.notebook_name(exercise)
        why += [
            f"{name} was not graded (one file per exercise: the .py, then {named}, then other notebooks by name)"
            for name in rest
        ]
    if path.suffix == ".ipynb" and path.name != notebook_source.notebook_name(exercise):
        why.append(f"its metadata or name makes it {exercise.id}")
    if why:
        submission.notes.append(f"{exercise.id}: graded {path.name}; {'; '.join(why)}")


def _collect(source: Path, catalog: Catalog, folder: Path, submission: Submission) -> None:
    """Choose each exercise's file among the .py and the notebooks that stand for it."""
    by_exercise = _notebooks_by_exercise(source, catalog, submission)
    for exercise in catalog.exercises:
        module = source / exercise.file
        exact = source / notebook_source.notebook_name(exercise)
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
    submission = Submission(folder, name=name_of(path), source=path)
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError as exc:
        raise SubmissionError(f"{path}: no such file or directory") from exc
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot be read: {exc.strerror}") from exc
    if stat.S_ISLNK(mode):
        raise SubmissionError(f"{_shown(path.name)} is a symbolic link: hand in the folder, zip or notebook itself")
    if not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
        raise _not_regular(path.name, mode)
    if stat.S_ISDIR(mode):
        _collect(_copy_folder(path, catalog, workdir / "handed_in"), catalog, folder, submission)
    elif path.suffix == ".zip":
        unpacked = workdir / "unpacked"
        unpacked.mkdir()
        _collect(_unzip(_copy_handed_in(path, workdir), unpacked), catalog, folder, submission)
    elif path.suffix == ".ipynb":
        try:
            extracted = notebook_source.extract(_copy_handed_in(path, workdir), catalog, folder)
        except notebook_source.NotebookError as exc:
            raise SubmissionError(str(exc)) from exc
        submission.source_maps[extracted.exercise.id] = extracted.source_map
    else:
        raise SubmissionError(f"{_shown(path.name)}: a submission is a folder, a .zip or an .ipynb notebook")
    return submission


def _copy_handed_in(path: Path, workdir: Path) -> Path:
    """A zip or notebook handed in, copied (never through a link) to where only the grader can change it."""
    copy = workdir / "handed_in" / path.name
    copy.parent.mkdir()
    _copy_regular(path, path.name, copy, MAX_UNPACKED_BYTES)
    return copy
