"""`grader similarity OUT SUBMISSION...`: which submissions of a graded batch share code, exercise by exercise.

A pair of files is flagged when each shares at least `THRESHOLD` of its own code with the other. Code is
compared as copydetect (the `similarity` extra) fingerprints it: Python tokens with every name, string and
comment set aside, so renamed variables change nothing and moved functions little (only where they join); every
run of `NOISE` characters of what is left is hashed, and what two files share is the union of the k-grams they
have in common.
A file's own code is what is left once the k-grams of its exercise's stub (the release's distribution code)
are taken out, so the scaffolding every student received shares nothing.

It reads what `grader grade` graded (each submission prepared as the batch prepares it: a zip unpacked, a
notebook's exercise cells joined into a module, one file chosen per exercise) and writes pages to read:
`OUT/similarity.html`, one side-by-side page per pair shown, and a link from the class report. It reads no
grade and writes none: a flagged pair is a reason to read two submissions, never a finding. Everything a
student wrote reaches the pages through autoescaping templates (grader/instructor/templating.py).

copydetect, not compare50 (CS50's tool), because compare50 1.2.15 pins `attrs<21`, which breaks jsonschema
and so nbformat, a dependency of the course's: the two cannot share an environment. copydetect is used as a
library (`CodeFingerprint`, `compare_files`); the all-pairs screen computes its similarity for every pair at
once with numpy (copydetect's own loop takes about a millisecond a pair), and `compare_files` marks the shared
code of the pairs that get a page.
"""

from __future__ import annotations

import importlib
import io
import os
import re
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any, TypeVar

import numpy as np

from grader.catalog import Catalog, CatalogError
from grader.instructor import class_report, manifest, report_plots, submissions
from grader.instructor.gradescope import results_folder
from grader.instructor.templating import render
from grader.intake import SubmissionError
from grader.report.inert import one_line

T = TypeVar("T")
R = TypeVar("R")
FILENAME = class_report.SIMILARITY_PAGE  # OUT/similarity.html, beside the class report
FOLDER = class_report.SIMILARITY_FOLDER  # OUT/similarity/: the pair pages, and the files compared (for a later term)
PAIRS_FOLDER = "pairs"
FILES_FOLDER = "files"
INSTALL = "pip install -e '.[similarity]'"
NOISE = 25  # copydetect's noise threshold: characters of tokenized code a shared stretch needs to count
THRESHOLD = 0.7  # flagged when each file shares this much of its own code with the other
PAIRS_SHOWN = 30  # per exercise: the most similar flagged pairs get a row and a page
SHOWN_CHARACTERS = 100_000  # of one file on a pair page
SCREEN_CELLS = 1 << 22  # characters times files the screen holds at once (16 MiB of counts)
NAMES_SHOWN = 12  # members of a group named on the summary page
START_MARK, END_MARK = class_report.START_MARK, class_report.END_MARK  # where the class report has room for the link
_FUTURE = re.compile(r"^[ \t]*from[ \t]+__future__[ \t]+import[^\n]*$", re.MULTILINE)
CANNOT_SHOW = (
    "Similar is not copied. The exercises are short and their stubs name the APIs to call, so students who "
    "follow the same hints or tutorial can write alike without copying; a short exercise leaves little room "
    "to differ. Read the pages; nothing here is evidence on its own.",
    "Code restructured by hand (a loop for a comprehension, statements reordered inside a function, a "
    "helper inlined, parentheses added) lowers the score; names, strings, comments and layout are set aside, "
    "so renamed or translated variables and moved functions do not hide a copy, and a shared comment counts "
    "for nothing (it is still shown).",
    "Only what was graded is compared: each exercise's one file as `grader grade` chose it. A notebook counts "
    "by its exercise-tagged cells joined into the module; its other cells, outputs and markdown, and any "
    "other file of a submission, are not compared.",
    "Code a submission shares with the exercise's stub does not count; a file with nothing of its own beyond "
    "the stub is not compared.",
    "Code from outside the batch (the web, an AI assistant, a friend at another school) is found only where "
    "a copy of it is in the batch or in an earlier term given with --archive.",
    "It never grades: no score, gradebook or results.json is read or changed.",
)


class SimilarityError(Exception):
    """Bad input to `grader similarity`, or its extra missing: one sentence, exit code 2."""


def load_detector() -> ModuleType:
    """copydetect, or the one line that says how to install it."""
    try:
        return importlib.import_module("copydetect")
    except ImportError as exc:
        raise SimilarityError(f"grader similarity needs the similarity extra (copydetect): {INSTALL}") from exc


@dataclass(frozen=True)
class Entry:
    """One submission's file of one exercise, as graded."""

    who: str  # the submission's name; an archived one's, after its folder
    code: str
    archived: bool = False
    notebook: bool = False  # the exercise's tagged cells of a notebook, joined into a module


@dataclass
class Collected:
    """What the batch (and the archive) hold to compare, and what could not be compared and why."""

    entries: dict[str, list[Entry]] = field(default_factory=dict)  # exercise id -> files with code
    not_compared: list[tuple[str, str]] = field(default_factory=list)  # (who, why): a submission left out
    stored: dict[str, dict[str, str]] = field(default_factory=dict)  # results folder -> exercise file -> code


@dataclass(frozen=True)
class Pair:
    exercise: str
    a: Entry
    b: Entry
    shares: tuple[float, float]  # how much of a's own code b has, and of b's that a has

    @property
    def score(self) -> float:
        return min(self.shares)


@dataclass(frozen=True)
class Segment:
    text: str
    shared: bool


@dataclass(frozen=True)
class Shown:
    """A flagged pair that gets a page: each file cut into stretches, shared with the other or not."""

    pair: Pair
    sides: tuple[list[Segment], list[Segment]]


@dataclass
class ExerciseFindings:
    exercise: str
    title: str
    compared: int  # files of the batch compared
    archived: int  # files of earlier terms they were compared with
    without_code: int  # files of the batch with nothing of their own beyond the stub
    pairs: int  # pairs screened
    flagged: int  # pairs flagged
    groups: list[list[str]]  # submissions joined by flagged pairs, largest first
    shown: list[Shown]  # the `PAIRS_SHOWN` most similar flagged pairs, most similar first, marked


@dataclass
class Findings:
    exercises: list[ExerciseFindings]
    not_compared: list[tuple[str, str]]
    not_given: list[str]  # submissions of the batch not on the command line
    submissions: int
    archives: list[str]
    threshold: float
    seconds: float = 0.0

    @property
    def flagged(self) -> int:
        return sum(e.flagged for e in self.exercises)


class _Pool:
    """`map` over worker processes, or in this one for `jobs` 1."""

    def __init__(self, jobs: int) -> None:
        self._executor = ProcessPoolExecutor(jobs) if jobs > 1 else None

    def map(self, function: Callable[[T], R], items: Sequence[T]) -> list[R]:
        if self._executor is None:
            return [function(item) for item in items]
        return list(self._executor.map(function, items, chunksize=max(1, len(items) // 64)))

    def __enter__(self) -> _Pool:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._executor is not None:
            self._executor.shutdown(cancel_futures=True)


def cpus() -> int:
    """The processors this process may run on (a cluster job's share, not the machine's)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


# --- reading what was graded -------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Read:
    """One submission's exercise files as the batch prepares them, or why it cannot be opened."""

    files: dict[str, str]  # exercise file -> code
    notebooks: frozenset[str]  # the exercises it handed in as notebooks
    problem: str = ""


def _read(path: Path, catalog: Catalog) -> _Read:
    """Prepared as `grader grade` prepares it (a zip unpacked, a notebook's cells joined, one file chosen per
    exercise); a submission that cannot be opened, or that fails the grader's own reading, is said why."""
    with tempfile.TemporaryDirectory(prefix="grader-similarity-", ignore_cleanup_errors=True) as workdir:
        try:
            submission = submissions.prepare(path, catalog, Path(workdir))
            files = {
                e.file: (submission.folder / e.file).read_bytes().decode("utf-8", errors="replace")
                for e in catalog.exercises
                if e.id not in submission.problems and (submission.folder / e.file).is_file()
            }
        except SubmissionError as exc:
            return _Read({}, frozenset(), str(exc))
        except Exception as exc:  # a RecursionError, a MemoryError...: this submission's, said, and the rest go on
            return _Read({}, frozenset(), f"it could not be read: {type(exc).__name__}: {one_line(str(exc), 300)}")
        return _Read(files, frozenset(submission.source_maps))


def _archive(folder: Path) -> list[tuple[str, Path]]:
    """(who, path) of each submission an earlier term's folder holds: a `grader grade` results folder where
    `grader similarity` stored what it compared, or a folder of submissions as `grader grade` takes them."""
    if not folder.is_dir():
        raise SimilarityError(f"--archive {folder}: not a folder")
    label = one_line(str(folder), 200)
    if (folder / manifest.FILENAME).is_file():
        files = folder / FOLDER / FILES_FOLDER
        if not files.is_dir():
            raise SimilarityError(
                f"--archive {folder} is a `grader grade` results folder without the code it graded (results "
                f"folders keep none until `grader similarity` has run on them): run `grader similarity {folder} "
                "SUBMISSION...` once, or give the folder of that term's submissions"
            )
        return [(f"{label}/{p.name}", p) for p in sorted(files.iterdir()) if p.is_dir()]
    paths = [p for p in sorted(folder.iterdir()) if submissions.leftover(p) is None]
    return [(f"{label}/{submissions.name_of(p)}", p) for p in paths]


def collect(catalog: Catalog, paths: Sequence[Path], archived: Sequence[tuple[str, Path]], pool: _Pool) -> Collected:
    """The batch's files (to store as well) and the archive's (who, path) files, by exercise."""
    collected = Collected()
    every = [(submissions.name_of(p), p, False) for p in paths] + [(who, p, True) for who, p in archived]
    for (who, _, archived_), read in zip(every, pool.map(partial(_read, catalog=catalog), [p for _, p, _ in every])):
        if read.problem:
            collected.not_compared.append((who, read.problem))
        if not archived_:
            collected.stored[results_folder(who)] = read.files
        for exercise in catalog.exercises:
            if exercise.file in read.files:
                entry = Entry(who, read.files[exercise.file], archived_, exercise.id in read.notebooks)
                collected.entries.setdefault(exercise.id, []).append(entry)
    return collected


# --- comparing ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Print:
    """A file's fingerprint as arrays: each k-gram position of its own code, and that k-gram's hash."""

    fingerprint: Any  # copydetect.CodeFingerprint (untyped)
    positions: np.ndarray
    hashes: np.ndarray
    length: int  # characters of tokenized code
    coverage: float  # characters of it its own k-grams cover: copydetect's denominator


def _blank_future(code: str) -> str:
    """`from __future__` lines as spaces: a directive everyone writes alike, which the grader moves to the top of
    a notebook's module; blanks keep every other character where the page shows it."""
    return _FUTURE.sub(lambda line: " " * len(line[0]), code)


def stub_kgrams(detector: ModuleType, catalog: Catalog, exercise_id: str) -> np.ndarray:
    """Every k-gram of the exercise's stub as the release ships it: the distribution code, which counts for nothing."""
    stub = _blank_future(catalog.stub_path(catalog.get(exercise_id)).read_text(encoding="utf-8"))
    stub_print = detector.CodeFingerprint("x.py", NOISE, 1, language="python", fp=io.StringIO(stub))
    return np.unique(np.array(list(stub_print.hashes), dtype=np.int64))


def fingerprint(detector: ModuleType, code: str, boilerplate: np.ndarray) -> _Print:
    text = io.StringIO(_blank_future(code))
    fingerprint = detector.CodeFingerprint("x.py", NOISE, 1, boilerplate, language="python", fp=text)
    at = [(p, h) for h, spots in fingerprint.hash_idx.items() for p in spots]
    at.sort()
    positions = np.array([p for p, _ in at], dtype=np.int64)
    hashes = np.array([h for _, h in at], dtype=np.int64)
    return _Print(fingerprint, positions, hashes, len(fingerprint.filtered_code), float(fingerprint.token_coverage))


def shares(prints: Sequence[_Print], compare: np.ndarray) -> np.ndarray:
    """S[a, b]: the share of a's own code (its token coverage) that b has too, for every pair `compare[a, b]`
    asks for: copydetect's `compare_files` similarity (the union of the shared k-grams over a's coverage),
    computed for all of them at once. A k-gram no other file has is left out before anything is compared."""
    count = len(prints)
    result = np.zeros((count, count), dtype=np.float64)
    if count < 2:
        return result
    unique, inverse = np.unique(np.concatenate([p.hashes for p in prints]), return_inverse=True)
    ids = np.split(inverse, np.cumsum([len(p.hashes) for p in prints])[:-1])
    files_with = np.zeros(len(unique), dtype=np.int64)
    for own in ids:
        files_with[np.unique(own)] += 1
    column = np.full(len(unique), -1, dtype=np.int64)
    common = files_with >= 2
    column[common] = np.arange(int(common.sum()))
    holds = np.zeros((count, int(common.sum())), dtype=bool)
    for index, own in enumerate(ids):
        columns = column[own]
        holds[index, columns[columns >= 0]] = True
    for a, (found, columns) in enumerate(zip(prints, (column[own] for own in ids))):
        kept = columns >= 0
        if not kept.any() or found.coverage <= 0:
            continue
        positions, columns = found.positions[kept], columns[kept]
        block = max(1, SCREEN_CELLS // found.length)  # rows at a time: a 1 MiB file must not take gigabytes
        for first in range(0, count, block):
            rows = first + np.flatnonzero(
                compare[a, first : first + block] & holds[first : first + block, columns].any(1)
            )
            if rows.size == 0:
                continue
            starts = np.zeros((rows.size, found.length), dtype=np.int32)
            starts[:, positions] = holds[np.ix_(rows, columns)]
            started = np.cumsum(starts, axis=1)  # shared k-grams starting at or before each character, per row
            before = np.zeros_like(started)
            before[:, NOISE:] = started[:, :-NOISE]
            covered = (started - before) > 0  # a character is shared when a shared k-gram started within NOISE of it
            result[a, rows] = covered.sum(axis=1) / found.coverage
    return result


def _groups(pairs: Sequence[Pair]) -> list[list[str]]:
    """Submissions joined by flagged pairs (connected components), largest first."""
    parent: dict[str, str] = {}

    def root(name: str) -> str:
        while parent.setdefault(name, name) != name:
            parent[name] = parent[parent[name]]
            name = parent[name]
        return name

    for pair in pairs:
        parent[root(pair.a.who)] = root(pair.b.who)
    members: dict[str, list[str]] = {}
    for name in parent:
        members.setdefault(root(name), []).append(name)
    return sorted((sorted(m) for m in members.values()), key=lambda m: (-len(m), m))


def _exercise(work: tuple[str, list[Entry]], catalog: Catalog, threshold: float) -> ExerciseFindings:
    """One exercise's files compared, all in one process (a k-gram's hash is the process's own)."""
    exercise_id, entries = work
    detector = load_detector()
    exercise = catalog.get(exercise_id)
    boilerplate = stub_kgrams(detector, catalog, exercise_id)
    prints = [fingerprint(detector, e.code, boilerplate) for e in entries]
    own = [p.coverage >= NOISE for p in prints]  # anything of its own beyond the stub: one k-gram at least
    kept = [i for i, has in enumerate(own) if has]
    batch = np.array([not entries[i].archived for i in kept], dtype=bool)
    compare = batch[:, None] | batch[None, :]  # the batch with itself and with the archive, never archive pairs
    np.fill_diagonal(compare, False)
    matrix = shares([prints[i] for i in kept], compare)
    flagged = []
    for x, y in zip(*np.nonzero(np.triu(compare) & (np.minimum(matrix, matrix.T) >= threshold))):
        a, b = (y, x) if entries[kept[x]].archived else (x, y)  # the batch's submission first
        pair = Pair(exercise.id, entries[kept[a]], entries[kept[b]], (float(matrix[a, b]), float(matrix[b, a])))
        flagged.append((pair, prints[kept[a]], prints[kept[b]]))
    flagged.sort(key=lambda f: (-f[0].score, f[0].a.who, f[0].b.who))
    shown = []
    for pair, one, other in flagged[:PAIRS_SHOWN]:
        _, _, (slices_a, slices_b) = detector.compare_files(one.fingerprint, other.fingerprint)
        shown.append(Shown(pair, (_segments(pair.a.code, slices_a), _segments(pair.b.code, slices_b))))
    in_batch = [e for e in entries if not e.archived]
    return ExerciseFindings(
        exercise.id,
        exercise.title,
        compared=len(in_batch),
        archived=len(entries) - len(in_batch),
        without_code=sum(not has for e, has in zip(entries, own) if not e.archived),
        pairs=int(np.triu(compare).sum()),
        flagged=len(flagged),
        groups=_groups([f[0] for f in flagged]),
        shown=shown,
    )


# --- pages -------------------------------------------------------------------------------------------------


def _segments(code: str, slices: np.ndarray) -> list[Segment]:
    """`code` cut into stretches, shared or not, from copydetect's slices (starts and ends in the code)."""
    code = code[:SHOWN_CHARACTERS]
    segments, at = [], 0
    for start, end in sorted(zip(slices[0].tolist(), slices[1].tolist())) if slices.size else []:
        start, end = max(int(start), at), min(int(end), len(code))
        if start >= end:
            continue
        if start > at:
            segments.append(Segment(code[at:start], False))
        segments.append(Segment(code[start:end], True))
        at = end
    if at < len(code):
        segments.append(Segment(code[at:], False))
    return segments


def _page_values() -> dict[str, Any]:
    return {
        "colors": {"histogram": report_plots.HISTOGRAM_COLOR, "rate": report_plots.RATE_COLOR},
        "cannot_show": CANNOT_SHOW,
        "written": time.strftime("%Y-%m-%d %H:%M"),
        "noise": NOISE,
    }


def page_name(exercise: str, index: int) -> str:
    """A pair page's file under OUT/similarity/pairs/: numbered, never named after a student."""
    return f"{exercise}-{index:03d}.html"


def write_pages(out: Path, findings: Findings, version: str) -> Path:
    """OUT/similarity.html and each shown pair's page; pages of an earlier run are replaced."""
    folder = out / FOLDER / PAIRS_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    page = _page_values() | {"threshold": findings.threshold, "version": version}
    rows: dict[str, list[tuple[Pair, str]]] = {}  # exercise id -> its shown pairs and their pages
    for exercise in findings.exercises:
        for index, shown in enumerate(exercise.shown, 1):
            name = page_name(exercise.exercise, index)
            pair = shown.pair
            sides = [(pair.a, pair.shares[0], shown.sides[0]), (pair.b, pair.shares[1], shown.sides[1])]
            lengths = [len(pair.a.code), len(pair.b.code)]
            html = render(
                "similarity_pair.html.j2", pair=pair, sides=sides, cut=SHOWN_CHARACTERS, lengths=lengths, **page
            )
            (folder / name).write_text(html, encoding="utf-8")
            rows.setdefault(exercise.exercise, []).append((pair, f"{FOLDER}/{PAIRS_FOLDER}/{name}"))
    summary = out / FILENAME
    summary.write_text(
        render("similarity.html.j2", f=findings, rows=rows, names_shown=NAMES_SHOWN, **page), encoding="utf-8"
    )
    return summary


def store(out: Path, collected: Collected) -> None:
    """Each compared file under OUT/similarity/files/<results folder>/: results folders keep no code, and a
    later term gives this folder as `--archive`."""
    folder = out / FOLDER / FILES_FOLDER
    shutil.rmtree(folder, ignore_errors=True)
    for name, files in collected.stored.items():
        (folder / name).mkdir(parents=True, exist_ok=True)
        for file, code in files.items():
            (folder / name / file).write_text(code, encoding="utf-8")


def link_report(out: Path, findings: Findings) -> str:
    """Put the link into OUT/report.html where its template left room (again after a new run); what happened,
    in words."""
    report = out / class_report.FILENAME
    if not report.is_file():
        return f"no {class_report.FILENAME} in {out} to link from"
    html = report.read_text(encoding="utf-8")
    if START_MARK not in html:
        return f"{report} has no room for the link (written by an older grader): `grader report` writes it anew"
    section = render("similarity_section.html.j2", f=findings, href=FILENAME).strip()
    report.write_text(
        class_report.LINKED.sub(lambda _: f"{START_MARK}{section}{END_MARK}", html, count=1), encoding="utf-8"
    )
    return f"linked from {report}"


# --- the command -------------------------------------------------------------------------------------------


def _batch(out: Path) -> manifest.Manifest:
    if not (out / manifest.FILENAME).is_file():
        raise SimilarityError(f"{out} is not a `grader grade --out` folder: it has no {manifest.FILENAME}")
    try:
        return manifest.read_manifest(out / manifest.FILENAME)
    except manifest.ManifestError as exc:
        raise SimilarityError(str(exc)) from exc


def _of_the_batch(batch: manifest.Manifest, paths: Sequence[Path]) -> None:
    """Every path given is a submission the batch graded (by its name, or by the results folder it was given)."""
    names = set(batch.submissions) | {results_folder(n) for n in batch.submissions}
    for path in paths:
        if submissions.name_of(path) not in names:
            raise SimilarityError(
                f"{one_line(str(path), 300)} is not a submission of this batch ({manifest.FILENAME} does not name "
                "it): give the submissions it graded"
            )


def _not_given(batch: manifest.Manifest, paths: Sequence[Path]) -> list[str]:
    given = {submissions.name_of(p) for p in paths}
    return [n for n in batch.graded if n not in given and results_folder(n) not in given]


def run(
    out: Path,
    paths: Sequence[Path],
    archives: Sequence[Path],
    catalog: Catalog,
    threshold: float = THRESHOLD,
    jobs: int = 1,
) -> Findings:
    """Compare the batch's submissions (and the archive's) in `jobs` processes, store what was compared, write
    the pages."""
    started = time.monotonic()
    batch = _batch(out)
    _of_the_batch(batch, paths)
    if any(a.resolve() == out.resolve() for a in archives):
        raise SimilarityError(f"--archive {out} is the batch itself: an archive holds earlier terms")
    archived = [entry for folder in archives for entry in _archive(folder)]
    try:
        catalog = catalog.select(batch.exercises)
    except CatalogError as exc:
        raise SimilarityError(f"{out / manifest.FILENAME} names an exercise this course lacks: {exc}") from exc
    detector = load_detector()
    with _Pool(jobs) as pool:
        collected = collect(catalog, paths, archived, pool)  # all read before anything under OUT is replaced
        work = [(e.id, collected.entries.get(e.id, [])) for e in catalog.exercises]
        per_exercise = pool.map(partial(_exercise, catalog=catalog, threshold=threshold), work)
    findings = Findings(
        per_exercise,
        collected.not_compared,
        _not_given(batch, paths),
        len(paths),
        [one_line(str(a), 200) for a in archives],
        threshold,
    )
    store(out, collected)
    findings.seconds = time.monotonic() - started
    write_pages(out, findings, f"copydetect {detector.__version__}")
    return findings
