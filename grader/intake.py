"""What a student hands in, made into one folder of exercise files by one rule, whoever grades it.

`grader grade` (grader/instructor/submissions.py), the Gradescope autograder (its run_autograder grades the
upload folder with `grader grade`) and `grader check --path` all call `take_in`, so a submission's files are
chosen the same way, for the same recorded reasons, on every path. The rule, stated for students in the
course README ("What to hand in") and for instructors in docs/INSTRUCTORS.md:

- What is handed in is a folder, a zip, a notebook or an exercise's `.py` file. Files are looked for at any
  depth, except in folders that hold no student work: `__MACOSX`, `__pycache__` and any whose name starts
  with a dot (`.git`, `.venv`, `.ipynb_checkpoints`), which are never entered.
- A file stands for an exercise when it is named like the exercise's file or notebook, as such or as an LMS,
  a browser or Jupyter renames it (`_CANVAS`, `_MARKS`), or when it is a notebook whose grader metadata names
  the exercise. A notebook whose metadata names another exercise is that one's, whatever its name.
- A zip inside is opened only when nothing outside it stands for an exercise; a zip in that zip is not.
- Of an exercise's files, an untouched stub is set aside when another holds work, and files with the same
  code count once. One left is graded, and the choice is recorded with why (`Choice`). Several left are the
  exercise's problem, which names them: the grader never guesses which one was meant.
- Nothing handed in stands for any exercise: SubmissionError says what was found and what was expected.

Everything is read once, defensively, into a private copy that the rest works on: a symbolic link or special
file anywhere that is looked at refuses what was handed in, and nothing is ever followed (each folder and file
is opened relative to its folder without following a link, so a link swapped in after a check is refused
too). Sizes and counts are capped, and no zip member may escape its folder, so a hostile submission cannot
read the grader's files, fill the disk or overwrite files.
"""

from __future__ import annotations

import ast
import errno
import lzma
import os
import re
import shutil
import stat
import zipfile
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

from grader import notebook_source, student_files
from grader.catalog import Catalog, Exercise
from grader.grading import ExerciseFiles
from grader.report.inert import one_line

MAX_UNPACKED_BYTES = 64 * 1024 * 1024  # the files copied or unpacked of one submission, zips inside included
MAX_MEMBERS = 10_000  # entries of a zip, or files and folders of a submission folder
MAX_FOLDER_DEPTH = 64  # folders a file may sit in: each is made or opened in turn
SKIPPED_FOLDERS = ("__MACOSX", "__pycache__")  # never entered, nor any folder whose name starts with a dot
SHOWN_FOUND = 8  # files named in the sentence of a submission where nothing stands for an exercise
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
_FOLDER = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC

# Canvas's "Download Submissions" names each file `<sortable name>[_LATE]_<user id>_<attachment id>_<file>`,
# with `anon_<id>` for the user on an anonymously graded assignment (lib/content_zipper.rb of Canvas).
_CANVAS = r"(?:[^\W_]\w*?_)??(?:LATE_|late_)?(?:\d+|anon_[A-Za-z0-9]+)_\d+_"
# what is added to a file's own name when it is handed in again, downloaded twice, late, or copied in Jupyter
_MARKS = {
    r"-\d+": "a re-upload's name",  # Canvas: a file named like one the student already uploaded (Attachment)
    r" \(\d+\)": "a downloaded copy's name",  # a browser's second download of one name
    r"[-_ ](?:late|LATE|Late)": "a late submission's name",
    r"-Copy\d+": "a Jupyter copy's name",  # Jupyter's File > Make a Copy
}
_MARKED = re.compile(f"(?:{'|'.join(_MARKS)})*")


class SubmissionError(Exception):
    """What was handed in cannot be graded at all; it is graded zero with this message."""


@dataclass(frozen=True)
class Choice:
    """Which file was graded for an exercise, and why; the files set aside beside it, each with why."""

    exercise: str
    graded: str  # as it sits in what was handed in: "exercises/ex03_train_ddp.py", "work.zip: ex03_train_ddp.py"
    why: str  # "in a course folder", "a re-upload's name", ...
    set_aside: tuple[str, ...] = ()

    def __str__(self) -> str:
        aside = f"; set aside: {', '.join(self.set_aside)}" if self.set_aside else ""
        return f"{self.exercise}: {self.graded} ({self.why}){aside}"


@dataclass
class Intake(ExerciseFiles):
    """The exercise files chosen from what was handed in (`folder`), and each choice with its reasons."""

    choices: list[Choice] = field(default_factory=list)

    def problem(self, exercise: Exercise) -> str | None:
        """An exercise nothing was handed in for is said missing, not left to its checks."""
        if exercise.id in self.problems:
            return self.problems[exercise.id]
        if not (self.folder / exercise.file).is_file():
            return f"file missing: nothing handed in is {exercise.file} or its notebook"
        return None


def _shown(name: str) -> str:
    """A file name as messages and the private copy spell it: bytes that are not UTF-8 and control characters
    (a newline included) as escapes, so that no report chokes on it and no name starts a line of its own."""
    return one_line(name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace"))


def _not_regular(name: str, mode: int) -> SubmissionError:
    kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
    return SubmissionError(f"{_shown(name)} is {kind}: submissions hold regular files only")


def _skipped(name: str) -> bool:
    """A folder that holds no student work (a tool's), never entered; a file so named is no student's either."""
    return name.startswith(".") or name in SKIPPED_FOLDERS


# --- names ---------------------------------------------------------------------------------------


def _named(name: str, exercises: Sequence[Exercise]) -> tuple[Exercise, list[str]] | None:
    """The exercise a file is named for, as such or renamed (`ex03_train_ddp-1.py`), and what renamed it."""
    stem, dot, suffix = name.rpartition(".")
    if not dot or suffix not in ("py", "ipynb") or len(name) > 255:
        return None
    for exercise in exercises:
        own = re.escape(Path(exercise.file).stem)
        match = re.fullmatch(f"(?P<canvas>{_CANVAS})?{own}(?P<marks>{_MARKED.pattern})", stem)
        if match:
            why = ["Canvas's download name"] if match["canvas"] else []
            why += [said for mark, said in _MARKS.items() if re.search(mark, match["marks"])]
            return exercise, why
    return None


# --- reading what was handed in, into a private copy ---------------------------------------------


def _copy_regular(source: Path | str, name: str, target: Path, budget: int, dir_fd: int | None = None) -> int:
    """Copy one regular file, never through a link (not even one swapped in since its folder was read),
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
        target.parent.mkdir(parents=True, exist_ok=True)
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


@dataclass
class _Tree:
    """The private copy of what was handed in: the files that may stand for an exercise, at `root`. `seen`
    lists every file handed in (outside skipped folders) by its path there; `fetch` copies one more of them
    (a zip, opened only when nothing else stands for an exercise) and returns where it put it."""

    root: Path
    seen: list[str]
    fetch: Callable[[str], Path]
    budget: list[int]  # bytes left to copy or unpack, shared by every step
    base: int = 0  # folders every file sits in that are not shown: a zip's own folder (`alice.zip: alice/...`)


class _Folder:
    """A folder handed in, read without following anything: each folder on the way is opened relative to the
    one above it with O_NOFOLLOW, so a link anywhere, even one swapped in since the folder was listed, is
    refused and never read through."""

    def __init__(self, path: Path, exercises: Sequence[Exercise], into: Path, budget: list[int]) -> None:
        self.path = path
        self.exercises = exercises
        self.into = into
        self.budget = budget
        self.names: dict[str, str] = {}  # a file's path as shown -> as the file system spells it

    def _open(self, parts: Sequence[str]) -> int:
        """The folder at `parts` below the one handed in, each step opened without following a link."""
        fd = -1
        try:
            fd = os.open(self.path, _FOLDER)
            for part in parts:
                child = os.open(part, _FOLDER, dir_fd=fd)
                os.close(fd)
                fd = child
        except OSError as exc:
            if fd >= 0:
                os.close(fd)
            where = "/".join(parts) or self.path.name
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a folder turned into a link (or a file) since
                raise _not_regular(where, stat.S_IFLNK) from exc
            raise SubmissionError(f"{_shown(self.path.name)} cannot be read: {_shown(where)}: {exc.strerror}") from exc
        return fd

    def _copy(self, name: str, relative: str, dir_fd: int) -> Path:
        target = self.into / _shown(relative)
        self.budget[0] -= _copy_regular(name, relative, target, self.budget[0], dir_fd)
        return target

    def read(self) -> list[str]:
        """Copy what may stand for an exercise (files named like one, notebooks) into `into`; every file's path."""
        seen: list[str] = []
        pending: list[tuple[str, ...]] = [()]
        entries = 0
        self.into.mkdir(parents=True)
        while pending:
            parts = pending.pop()
            if len(parts) >= MAX_FOLDER_DEPTH:  # what is in it: as a zip member named with as many parts
                raise SubmissionError(
                    f"{_shown('/'.join(parts))}: its files sit in folders nested more than {MAX_FOLDER_DEPTH - 1} "
                    "folders deep"
                )
            fd = self._open(parts)
            try:
                with os.scandir(fd) as listing:
                    found = sorted(listing, key=lambda entry: entry.name)
                for entry in found:
                    entries += 1
                    if entries > MAX_MEMBERS:
                        raise SubmissionError(
                            f"{_shown(self.path.name)} holds more than {MAX_MEMBERS} files and folders"
                        )
                    if _skipped(entry.name):
                        continue
                    relative = "/".join((*parts, entry.name))
                    mode = entry.stat(follow_symlinks=False).st_mode
                    if stat.S_ISDIR(mode):
                        pending.append((*parts, entry.name))
                    elif not stat.S_ISREG(mode):
                        raise _not_regular(relative, mode)
                    else:
                        seen.append(_shown(relative))
                        self.names[_shown(relative)] = relative
                        if entry.name.endswith(".ipynb") or _named(_shown(entry.name), self.exercises):
                            self._copy(entry.name, relative, fd)
            except OSError as exc:  # a folder in it that is closed to the grader, say
                raise SubmissionError(f"{_shown(self.path.name)} cannot be read: {exc.strerror}") from exc
            finally:
                os.close(fd)
        return sorted(seen)

    def fetch(self, shown: str) -> Path:
        *parts, name = self.names[shown].split("/")
        fd = self._open(parts)
        try:
            return self._copy(name, self.names[shown], fd)
        finally:
            os.close(fd)


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


def _unzip(path: Path, into: Path, budget: list[int]) -> None:
    """Unpack a zip (our private copy) into `into`, or SubmissionError naming what is wrong with it."""
    into.mkdir(parents=True)
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
            size = sum(m.file_size for m in files)
            if size > budget[0]:
                raise SubmissionError(f"{path.name} unpacks to more than {MAX_UNPACKED_BYTES >> 20} MiB")
            budget[0] -= size
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


def _listed(root: Path) -> list[str]:
    """Every file of a tree the grader made (an unpacked zip: it holds no link), outside skipped folders."""
    seen = []
    for folder, folders, files in os.walk(root):
        folders[:] = [name for name in folders if not _skipped(name)]
        seen += [(Path(folder) / name).relative_to(root).as_posix() for name in files if not _skipped(name)]
    return sorted(seen)


def _copy_handed_in(path: Path, workdir: Path, budget: list[int]) -> Path:
    """A zip or single file handed in, copied (never through a link) to where only the grader can change it."""
    copy = workdir / "handed_in" / _shown(path.name)
    budget[0] -= _copy_regular(path, path.name, copy, budget[0])
    return copy


def _read(path: Path, catalog: Catalog, workdir: Path) -> _Tree:
    budget = [MAX_UNPACKED_BYTES]
    try:
        mode = path.lstat().st_mode
    except FileNotFoundError as exc:
        raise SubmissionError(f"{path}: no such file or directory") from exc
    except OSError as exc:
        raise SubmissionError(f"{path}: cannot be read: {exc.strerror}") from exc
    if stat.S_ISLNK(mode):
        raise SubmissionError(f"{_shown(path.name)} is a symbolic link: hand in the folder, zip or notebook itself")
    if stat.S_ISDIR(mode):
        folder = _Folder(path, catalog.exercises, workdir / "handed_in", budget)
        return _Tree(folder.into, folder.read(), folder.fetch, budget)
    if not stat.S_ISREG(mode):
        raise _not_regular(path.name, mode)
    if path.suffix == ".zip":
        unpacked = workdir / "unpacked"
        _unzip(_copy_handed_in(path, workdir, budget), unpacked, budget)
        seen = _listed(unpacked)
        return _Tree(unpacked, seen, lambda relative: unpacked / relative, budget, len(_common_folder(seen)))
    if path.suffix in (".ipynb", ".py"):
        copy = _copy_handed_in(path, workdir, budget)
        return _Tree(copy.parent, [copy.name], lambda relative: copy.parent / relative, budget)
    raise SubmissionError(
        f"{_shown(path.name)}: a submission is a folder, a .zip, an .ipynb notebook or an exercise's .py file"
    )


# --- which file stands for which exercise ----------------------------------------------------------


@dataclass
class _Candidate:
    """A file handed in that stands for an exercise."""

    source: Path  # in the private copy
    shown: str  # as handed in
    why: list[str]
    notebook: bool
    renamed: bool  # not named as in the course, or in a folder
    module: Path | None = None  # the exercise's module it makes, once staged
    source_map: notebook_source.SourceMap | None = None
    error: str = ""  # why it cannot be staged (an unreadable notebook)

    @property
    def rank(self) -> tuple[bool, bool, int, str]:
        """Of files with the same code, the one graded: a .py (no cells to map), named as in the course,
        the shallowest, then by name."""
        return self.notebook, self.renamed, self.shown.count("/"), self.shown


@dataclass
class _Found:
    candidates: dict[str, list[_Candidate]] = field(default_factory=dict)  # exercise id -> its files
    others: list[str] = field(default_factory=list)  # every other file, with what it is where that helps


def _common_folder(seen: Sequence[str]) -> tuple[str, ...]:
    """The folder every file of a zip sits in (a zip of a folder): its paths are shown below it."""
    folders = [tuple(relative.split("/")[:-1]) for relative in seen]
    common = folders[0] if folders else ()
    for parts in folders[1:]:
        while parts[: len(common)] != common:
            common = common[:-1]
    return common


def _below(relative: str, base: int) -> str:
    """A path as shown: below the folder every file of its tree sits in."""
    return "/".join(relative.split("/")[base:])


def _look(root: Path, seen: Sequence[str], catalog: Catalog, found: _Found, zipped: str = "", base: int = 0) -> None:
    """Sort `seen` (the files under `root`; the zip `zipped`'s, unpacked, if given) into candidates and others,
    shown below their first `base` folders."""
    by_id = {e.id: e for e in catalog.exercises}
    for relative in seen:
        name = relative.rsplit("/", 1)[-1]
        shown = _shown(f"{zipped}: {_below(relative, base)}" if zipped else _below(relative, base))
        where = [f"in {zipped}"] if zipped else []
        where += ["in a course folder"] if "/" in _below(relative, base) else []
        named = _named(name, catalog.exercises)
        if name.endswith(".ipynb"):
            _notebook(root / relative, shown, where, named, by_id, found)
        elif named is not None:
            why = [*where, *named[1]]
            candidate = _Candidate(root / relative, shown, why or ["named as in the course"], False, bool(why))
            found.candidates.setdefault(named[0].id, []).append(candidate)
        else:
            found.others.append(shown)


def _notebook(
    source: Path,
    shown: str,
    where: list[str],
    named: tuple[Exercise, list[str]] | None,
    by_id: dict[str, Exercise],
    found: _Found,
) -> None:
    """A notebook stands for the exercise its grader metadata names (or, without metadata, its name's)."""
    try:
        recorded = notebook_source.recorded_exercise(notebook_source.read(source))
    except notebook_source.NotebookError as exc:
        if named is None:
            found.others.append(f"{shown} (not readable: {exc})")
        else:
            candidate = _Candidate(source, shown, [*where, *named[1], "a notebook"], True, True, error=str(exc))
            found.candidates.setdefault(named[0].id, []).append(candidate)
        return
    if recorded is not None:
        exercise = by_id.get(recorded)
        if exercise is None:
            found.others.append(f"{shown} (a notebook of {_shown(recorded[:100])}, not of an exercise graded here)")
            return
    elif named is not None:
        exercise = named[0]
    else:
        found.others.append(f"{shown} (a notebook without the grader's metadata, named like no exercise)")
        return
    marks = named[1] if named is not None and named[0] is exercise else None
    why = [*where, *(marks or []), "a notebook" if marks is not None else f"its grader metadata names {exercise.id}"]
    candidate = _Candidate(source, shown, why, True, bool(where) or marks != [])
    found.candidates.setdefault(exercise.id, []).append(candidate)


def _code(path: Path) -> str | bytes:
    """What two files must share to be the same code: their syntax trees without top-level strings (the module
    docstring, which a notebook moves to a markdown cell or below its hoisted `from __future__`), else, where
    a file does not parse, its bytes."""
    with path.open("rb") as handle:
        data = handle.read(student_files.MAX_SOURCE_BYTES + 1)
    try:
        body = [
            node
            for node in ast.parse(data).body
            if not (
                isinstance(node, ast.Expr)
                and isinstance(node.value, ast.Constant)
                and isinstance(node.value.value, str)
            )
        ]
        return ast.dump(ast.Module(body=body, type_ignores=[]))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return data


def _listing(names: Sequence[str]) -> str:
    shown = ", ".join(names[:SHOWN_FOUND])
    return shown + (f" and {len(names) - SHOWN_FOUND} more" if len(names) > SHOWN_FOUND else "")


def _stage(exercise: Exercise, candidates: list[_Candidate], catalog: Catalog, workdir: Path) -> None:
    """Each candidate's module: a .py as it is, a notebook's tagged cells joined (or why they cannot be)."""
    for index, candidate in enumerate(candidates):
        if candidate.error:
            continue
        if not candidate.notebook:
            candidate.module = candidate.source
            continue
        folder = workdir / "candidates" / exercise.id / str(index)
        folder.mkdir(parents=True)
        try:
            extracted = notebook_source.extract(candidate.source, catalog, folder, exercise)
        except notebook_source.NotebookError as exc:
            candidate.error = str(exc)
            continue
        candidate.module, candidate.source_map = folder / exercise.file, extracted.source_map


def _choose(exercise: Exercise, candidates: list[_Candidate], intake: Intake) -> None:
    """The stated rule (module docstring): the one file graded for the exercise, or its problem."""
    readable = [(c, c.module) for c in candidates if c.module is not None]
    unreadable = [c for c in candidates if c.module is None]
    if not readable:
        intake.problems[exercise.id] = "; ".join(
            c.error if len(unreadable) == 1 else f"{c.shown}: {c.error}" for c in unreadable
        )
        return
    worked = [(c, module) for c, module in readable if not student_files.is_untouched(module, exercise)]
    pool = sorted(worked or readable, key=lambda staged: staged[0].rank)
    if worked and len({_code(module) for _, module in pool}) > 1:
        intake.problems[exercise.id] = (
            f"{len(pool)} files handed in could be {exercise.file} and their code differs: "
            f"{_listing([c.shown for c, _ in pool])}; hand in one of them"
        )
        return
    (graded, module), *same = pool
    shutil.copyfile(module, intake.folder / exercise.file)
    if graded.source_map is not None:
        intake.source_maps[exercise.id] = graded.source_map
    aside = [f"{c.shown} ({'the same code' if worked else 'the untouched stub too'})" for c, _ in same]
    aside += [f"{c.shown} (the untouched stub)" for c, module in readable if worked and (c, module) not in worked]
    aside += [f"{c.shown} (not readable: {c.error})" for c in unreadable]
    intake.choices.append(Choice(exercise.id, graded.shown, ", ".join(graded.why), tuple(aside)))


def _nothing(found: _Found, catalog: Catalog) -> SubmissionError:
    files = [e.file for e in catalog.exercises]
    expected = " or ".join(files) if len(files) <= 3 else f"{files[0]} to {files[-1]}, one per exercise"
    held = _listing(found.others) if found.others else "no file at all"
    return SubmissionError(
        f"nothing handed in is an exercise's file: found {held}; expected files named like {expected} "
        "(in any folder, zipped or not), or their notebooks"
    )


def take_in(path: Path, catalog: Catalog, workdir: Path) -> Intake:
    """The exercise files chosen from `path` (a folder, zip, notebook or .py) by the rule of the module's
    docstring, in a folder under `workdir` (which must be empty); SubmissionError when none can be graded."""
    tree = _read(path, catalog, workdir)
    found = _Found()
    _look(tree.root, tree.seen, catalog, found, base=tree.base)
    if not found.candidates:  # zips inside are opened only now: a stray backup zip makes no second copy
        for index, relative in enumerate(r for r in tree.seen if r.endswith(".zip")):
            unpacked = workdir / "zips" / str(index)
            _unzip(tree.fetch(relative), unpacked, tree.budget)
            inside = _listed(unpacked)
            zipped = _below(relative, tree.base)
            _look(unpacked, inside, catalog, found, zipped, len(_common_folder(inside)))
    if not found.candidates:
        raise _nothing(found, catalog)
    intake = Intake(workdir / "files")
    intake.folder.mkdir()
    for exercise in catalog.exercises:
        candidates = found.candidates.get(exercise.id, [])
        if candidates:
            _stage(exercise, candidates, catalog, workdir)
            _choose(exercise, candidates, intake)
    return intake
