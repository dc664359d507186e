"""Hostile inputs read on the trusted side: deeply nested or huge exercise files, undecodable bytes,
every malformed notebook shape, malformed zips. Preparing a submission either succeeds or says in a
SubmissionError what is wrong, never anything else; the static check of a prepared file returns its
problem, never raises; and whatever escapes anyway becomes that submission's row (issue 19).

Everything here runs without ranks: `prepare` and `grade_one` up to the point a submission would
borrow an engine.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import shutil
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from instructor import support

from grader import intake, notebook_source, student_files
from grader.catalog import load_catalog
from grader.instructor import batch, gradebook, gradescope, submissions
from grader.instructor.batch import grade_batch
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.submissions import Submission, prepare
from grader.intake import SubmissionError
from grader.plan import GradingPlan

CATALOG = load_catalog(support.REPO)
EX01 = "ex01_process_group"
EX01_PY = f"{EX01}.py"
SOLUTION = (support.SOLUTIONS / EX01_PY).read_text()
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

DEEP = {  # constructs the parser or the compiler refuses to nest past some depth, each in its own way
    "parentheses": lambda n: "(" * n + "1" + ")" * n,
    "negations": lambda n: "-" * n + "1",
    "negated groups": lambda n: "-(" * n + "1" + ")" * n,
    "sums": lambda n: "a" + "+a" * n,
    "attributes": lambda n: "a" + ".b" * n,
    "subscripts": lambda n: "a" + "[0]" * n,
    "nots": lambda n: "not " * n + "a",
    "lambdas": lambda n: "lambda: " * n + "1",
    "conditionals": lambda n: "a if a else " * n + "a",
    "powers": lambda n: "a" + "**a" * n,
    "calls": lambda n: "f(" * n + ")" * n,
    "strings": lambda n: "'a'" + " + 'a'" * n,
}


def _checked(path: Path) -> Submission | SubmissionError:
    """`prepare` on `path`, and the static check of every file it prepared: what the batch does on the
    trusted side before any rank runs. Anything but a Submission or a SubmissionError fails the test."""
    with tempfile.TemporaryDirectory() as workdir:
        try:
            submission = prepare(path, CATALOG, Path(workdir) / "work")
        except SubmissionError as exc:
            assert str(exc) and len(str(exc)) < 2000, "a refusal is one clear sentence"
            return exc
        for file in submission.folder.iterdir():  # what a sandbox's workspace gets: regular files, no link
            assert file.is_file() and not file.is_symlink()
            (exercise,) = [e for e in CATALOG.exercises if e.file == file.name]
            problem = student_files.problems(file, exercise)
            assert problem is None or len(problem) < 2000
            submission.problems.setdefault(exercise.id, problem or "")
        return submission


def _folder(root: Path, files: dict[str, bytes]) -> Path:
    folder = root / "student"
    folder.mkdir()
    for name, data in files.items():
        (folder / name).write_bytes(data)
    return folder


# --- exercise files -------------------------------------------------------------------------------


@pytest.mark.parametrize("depth", [1_000, 5_000, 50_000])  # 50,000 of any: under the 1 MiB cap
@pytest.mark.parametrize("construct", sorted(DEEP))
def test_a_deeply_nested_exercise_file_is_its_own_problem(tmp_path: Path, construct: str, depth: int) -> None:
    source = f"{SOLUTION}\nx = {DEEP[construct](depth)}\n"
    exercise = CATALOG.get(EX01)
    path = tmp_path / EX01_PY
    path.write_text(source)
    assert student_files.is_untouched(path, exercise) is False
    problem = student_files.problems(path, exercise)
    assert problem is not None and ("too deeply nested to parse" in problem or "too many nested" in problem), problem
    submission = _checked(_folder(tmp_path, {EX01_PY: source.encode()}))
    assert isinstance(submission, Submission) and submission.problems[EX01] == problem


def test_a_deeply_nested_stub_beside_a_notebook_is_no_crash(tmp_path: Path) -> None:
    """Choosing between two files parses both, to tell a stub and to compare their code: the crash of issue 19
    was there (`is_untouched`). The file that cannot be parsed holds work, and differs: both are named."""
    folder = _folder(tmp_path, {EX01_PY: f"{SOLUTION}\nx = {'-' * 100_000}1\n".encode()})
    support.notebook(folder / f"{EX01}.ipynb", CATALOG, EX01)
    submission = _checked(folder)
    assert isinstance(submission, Submission)
    assert submission.problems[EX01].startswith(f"2 files handed in could be {EX01_PY} and their code differs: ")
    assert submission.problems[EX01].endswith(f"{EX01_PY}, {EX01}.ipynb; hand in one of them")


def test_an_exercise_file_over_the_cap_is_not_parsed(tmp_path: Path) -> None:
    source = SOLUTION + "\n" + "#" * (student_files.MAX_SOURCE_BYTES + 1) + "\n"
    submission = _checked(_folder(tmp_path, {EX01_PY: source.encode()}))
    assert isinstance(submission, Submission)
    assert submission.problems[EX01] == f"{EX01_PY} is 1.0 MiB; an exercise file is at most 1 MiB"


HOSTILE_SOURCE = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=100).map(lambda t: t.encode("latin-1", "replace")),
    st.sampled_from([b"\x00" * 10, "caf\u00e9 = 1\n".encode("latin-1"), b"\xff\xfe\x00x", b"x = '\xed\xa0\x80'"]),
    st.builds(
        lambda construct, depth: f"x = {DEEP[construct](depth)}\n".encode(),
        st.sampled_from(sorted(DEEP)),
        st.integers(min_value=100, max_value=50_000),
    ),
)


@FUZZ
@given(
    prefix=st.sampled_from([b"", b"\xef\xbb\xbf", b"# -*- coding: latin-1 -*-\n", SOLUTION.encode()]),
    junk=HOSTILE_SOURCE,
    beside_a_notebook=st.booleans(),
)
def test_any_exercise_file_is_graded_or_its_problem_said(prefix: bytes, junk: bytes, beside_a_notebook: bool) -> None:
    """Binary junk, bad encodings (latin-1, a BOM before junk, NUL bytes, UTF-8 surrogates), nesting."""
    with tempfile.TemporaryDirectory() as root:
        folder = _folder(Path(root), {EX01_PY: prefix + junk})
        if beside_a_notebook:  # two candidates: the choice between them parses both
            support.notebook(folder / f"{EX01}.ipynb", CATALOG, EX01)
        assert isinstance(_checked(folder), Submission)


# --- notebooks ------------------------------------------------------------------------------------


def _solved_notebook() -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as root:
        return json.loads(support.notebook(Path(root) / "n.ipynb", CATALOG, EX01).read_text())


SOLVED = _solved_notebook()


def _with(change: Callable[[dict[str, Any]], None]) -> bytes:
    notebook = copy.deepcopy(SOLVED)
    change(notebook)
    return json.dumps(notebook).encode()


def _exercise_cell(notebook: dict[str, Any]) -> dict[str, Any]:
    return next(c for c in notebook["cells"] if notebook_source.TAG in c.get("metadata", {}).get("tags", []))


NOTEBOOKS: dict[str, tuple[bytes, str | None]] = {  # the notebook's bytes -> what its refusal says (None: graded)
    "not JSON": (b"{ not json", "is not a notebook"),
    "empty": (b"", "is not a notebook"),
    "JSON array": (b"[1, 2]", "is not a valid notebook"),
    "JSON string": (b'"notebook"', "is not a valid notebook"),
    "empty object": (b"{}", "is not a valid notebook"),
    "deep array": (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    "deep in metadata": (
        _with(lambda n: n["metadata"].update(x=json.loads("[" * 500 + "]" * 500))),
        "nested too deeply",
    ),
    "cells not a list": (_with(lambda n: n.update(cells={"a": 1})), "is not a valid notebook"),
    "cells a number": (_with(lambda n: n.update(cells=7)), "is not a valid notebook"),
    "a cell a number": (_with(lambda n: n["cells"].append(3)), "is not a valid notebook"),
    "a cell without a type": (_with(lambda n: n["cells"].append({"source": "", "metadata": {}})), "is not a cell"),
    "cell source a number": (_with(lambda n: _exercise_cell(n).update(source=42)), "source is not text"),
    "cell source a list of numbers": (
        _with(lambda n: _exercise_cell(n).update(source=[1, 2])),
        "is not a valid notebook",
    ),
    "cell without source": (_with(lambda n: _exercise_cell(n).pop("source")), "source is not text"),
    "missing metadata": (_with(lambda n: n.pop("metadata")), "is not a valid notebook"),
    "metadata a list": (_with(lambda n: n.update(metadata=[])), "is not a valid notebook"),
    "metadata.grader a string": (_with(lambda n: n["metadata"].update(grader="ex01")), "'grader' entry"),
    "cell metadata.grader a list": (
        _with(lambda n: _exercise_cell(n)["metadata"].update(grader=[1])),
        "metadata is not a JSON object",
    ),
    "tags a string": (_with(lambda n: _exercise_cell(n)["metadata"].update(tags="exercise")), "tags are not"),
    "tags of numbers": (_with(lambda n: _exercise_cell(n)["metadata"].update(tags=[1])), "tags are not"),
    "nbformat 99": (_with(lambda n: n.update(nbformat=99)), "is not a valid notebook"),
    "nbformat a list": (_with(lambda n: n.update(nbformat=[4])), "is not a valid notebook"),
    "nbformat 3, broken": (
        b'{"nbformat": 3, "nbformat_minor": 0, "metadata": {}, "worksheets": 5}',
        "is not a valid notebook",
    ),
    "nbformat 3": (
        json.dumps(
            {
                "nbformat": 3,
                "nbformat_minor": 0,
                "metadata": {},
                "worksheets": [
                    {
                        "cells": [
                            {
                                "cell_type": "code",
                                "language": "python",
                                "input": SOLUTION,
                                "outputs": [],
                                "metadata": {"tags": [notebook_source.TAG]},
                            }
                        ]
                    }
                ],
            }
        ).encode(),
        None,
    ),
    "a lone surrogate in a cell": (
        _with(lambda n: _exercise_cell(n).update(source=SOLUTION + "\nx = '\ud800'\n")),
        None,
    ),
    "over the cap": (b'{"cells": [], "x": "' + b"a" * notebook_source.MAX_NOTEBOOK_BYTES + b'"}', "over 16 MiB"),
}


@pytest.mark.parametrize("shape", sorted(NOTEBOOKS))
def test_every_malformed_notebook_shape_is_refused_in_a_sentence(tmp_path: Path, shape: str) -> None:
    """Handed in alone or in a folder, a notebook named like an exercise is that exercise's file: one that
    cannot be read is that exercise's problem, in a sentence; under another name, the submission's."""
    data, said = NOTEBOOKS[shape]
    alone = tmp_path / f"{EX01}.ipynb"
    alone.write_bytes(data)
    result = _checked(alone)
    in_folder = _checked(_folder(tmp_path, {f"{EX01}.ipynb": data}))
    (tmp_path / "homework.ipynb").write_bytes(data)
    renamed = _checked(tmp_path / "homework.ipynb")
    assert isinstance(result, Submission) and isinstance(in_folder, Submission), (result, in_folder)
    if said is None:
        assert not result.problems[EX01], result.problems
        assert not in_folder.problems[EX01]
    else:
        assert said in result.problems[EX01] and said in in_folder.problems[EX01], result.problems
        assert isinstance(renamed, SubmissionError) and said in str(renamed), renamed


JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def mutated_notebooks(draw: st.DrawFn) -> bytes:
    """The solved notebook with one part, at any depth, replaced by any JSON value or removed."""
    notebook = copy.deepcopy(SOLVED)
    parent: Any = notebook
    key: Any = draw(st.sampled_from(sorted(parent)))
    while isinstance(parent[key], (dict, list)) and parent[key] and draw(st.booleans()):
        parent = parent[key]
        key = draw(st.sampled_from(sorted(parent) if isinstance(parent, dict) else range(len(parent))))
    if isinstance(parent, dict) and draw(st.booleans()):
        del parent[key]
    else:
        parent[key] = draw(JSON)
    return json.dumps(notebook).encode()


@FUZZ
@given(data=st.one_of(mutated_notebooks(), JSON.map(lambda v: json.dumps(v).encode()), st.binary(max_size=200)))
def test_any_notebook_is_graded_or_refused(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as root:
        alone = Path(root) / f"{EX01}.ipynb"
        alone.write_bytes(data)
        _checked(alone)
        assert isinstance(_checked(_folder(Path(root), {f"{EX01}.ipynb": data, "other.ipynb": data})), Submission)


# --- zips -----------------------------------------------------------------------------------------


def _zip(path: Path, members: dict[str | zipfile.ZipInfo, bytes]) -> Path:
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return path


def _patched(path: Path, old: bytes, new: bytes) -> Path:
    """The archive with `old` replaced by `new` (as long) in every header: what zipfile cannot write."""
    data = path.read_bytes()
    assert len(old) == len(new) and old in data
    path.write_bytes(data.replace(old, new))
    return path


def _encrypted(path: Path) -> Path:
    """A one-member archive whose member says it is encrypted (the flag bit in both its headers)."""
    data = bytearray(_zip(path, {EX01_PY: SOLUTION.encode()}).read_bytes())
    for signature, offset in ((b"PK\x03\x04", 6), (b"PK\x01\x02", 8)):
        at = data.index(signature) + offset
        data[at] |= 0x1
    path.write_bytes(bytes(data))
    return path


def _written(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _truncated(path: Path) -> Path:
    return _written(path, _zip(path, {EX01_PY: SOLUTION.encode()}).read_bytes()[:-30])


def _typed(name: str, kind: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name)
    info.external_attr = (kind | 0o777) << 16
    return info


ZIPS: dict[str, tuple[Callable[[Path], Path], str]] = {  # how to build it -> what its refusal says
    "truncated": (_truncated, "not a readable zip archive"),
    "not a zip": (lambda p: _written(p, b"PK\x03\x04 but not really"), "not a readable zip archive"),
    "encrypted": (_encrypted, "is encrypted"),
    "too many members": (
        lambda p: _zip(p, {f"f{i}.txt": b"" for i in range(intake.MAX_MEMBERS + 1)}),
        f"a submission holds at most {intake.MAX_MEMBERS}",
    ),
    "a bomb": (lambda p: _zip(p, {EX01_PY: b"\0" * (intake.MAX_UNPACKED_BYTES + 1)}), "unpacks to more than"),
    "a member climbing out": (lambda p: _zip(p, {f"../../{EX01_PY}": b"x = 1"}), "points outside the archive"),
    "an absolute member": (lambda p: _zip(p, {f"/tmp/{EX01_PY}": b"x = 1"}), "is an absolute path"),
    "a NUL in a name": (lambda p: _patched(_zip(p, {EX01_PY + "X": SOLUTION.encode()}), b".pyX", b".py\0"), "NUL byte"),
    "a symlink member": (
        lambda p: _zip(p, {_typed(EX01_PY, 0o120000): b"/etc/passwd"}),
        "is a symbolic link: submissions hold regular files only",
    ),
    "a FIFO member": (lambda p: _zip(p, {_typed(EX01_PY, 0o010000): b""}), "is a named pipe"),
    "a file where a folder is": (lambda p: _zip(p, {"a": b"x", "a/" + EX01_PY: b"x"}), "cannot be unpacked"),
}


@pytest.mark.parametrize("kind", sorted(ZIPS))
def test_a_malformed_zip_is_refused_in_a_sentence(tmp_path: Path, kind: str) -> None:
    build, said = ZIPS[kind]
    refused = _checked(build(tmp_path / "mallory.zip"))
    assert isinstance(refused, SubmissionError) and said in str(refused), refused


def test_a_zip_nests_its_folder_as_deep_as_allowed_and_no_deeper(tmp_path: Path) -> None:
    """Unpacking makes each folder (pathlib makes them recursively): 1,200 deep would overflow it."""
    allowed = "d/" * (intake.MAX_FOLDER_DEPTH - 1) + EX01_PY
    submission = _checked(_zip(tmp_path / "deep.zip", {allowed: SOLUTION.encode()}))
    assert isinstance(submission, Submission) and submission.problems == {EX01: ""}
    refused = _checked(_zip(tmp_path / "deeper.zip", {"d/" * 1_200 + EX01_PY: SOLUTION.encode()}))
    assert isinstance(refused, SubmissionError)
    assert f"sits in folders nested more than {intake.MAX_FOLDER_DEPTH} folders deep" in str(refused)


@FUZZ
@example(cut=0, flips=[(30 + len(f"s/{EX01_PY}"), 0xFF)])  # the first byte of deflated data: zlib.error
@given(
    cut=st.integers(min_value=0), flips=st.lists(st.tuples(st.integers(min_value=0), st.integers(1, 255)), max_size=6)
)
def test_a_damaged_zip_is_unpacked_or_refused(cut: int, flips: list[tuple[int, int]]) -> None:
    with tempfile.TemporaryDirectory() as root:
        archive = _zip(Path(root) / "damaged.zip", {f"s/{EX01_PY}": SOLUTION.encode(), "s/notes.ipynb": b"{}"})
        data = bytearray(archive.read_bytes())
        for at, bits in flips:
            data[at % len(data)] ^= bits
        archive.write_bytes(bytes(data[: len(data) - cut % len(data)]))
        _checked(archive)


# --- the guard: whatever escapes is that submission's row -----------------------------------------


class _NoEngines:
    """A pool for submissions that never get as far as an engine."""

    def borrow(self) -> None:
        raise AssertionError("a submission that could not be prepared borrowed an engine")


PLAN = GradingPlan(jobs=1, hidden=True)


def _row(path: Path, pool: Any = None) -> SubmissionGrade:
    grade = batch.grade_one(pool or _NoEngines(), batch._Batch(CATALOG, PLAN, None, None, None), path)  # type: ignore[arg-type]
    with tempfile.TemporaryDirectory() as out:  # the row is written as `grader grade` writes it
        json.dumps(gradescope.results_json(CATALOG, grade))
        with gradebook.Gradebook(Path(out) / "gradebook.csv", CATALOG) as book:
            book.on_result(grade)
    return grade


def _all_not_run(grade: SubmissionGrade, message: str) -> None:
    assert grade.score == 0 and len(grade.results) == len(batch._not_graded(CATALOG, PLAN, ""))
    assert all(r.status == "error" and r.message.startswith(message) for r in grade.results)


@settings(FUZZ, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(
    error=st.sampled_from(
        [RecursionError, MemoryError, ValueError, OSError, KeyError, RuntimeError, KeyboardInterrupt, SystemExit]
    ),
    where=st.sampled_from([(submissions, "prepare"), (notebook_source, "read"), (student_files, "is_untouched")]),
    text=st.one_of(st.text(max_size=50), st.just("first line\nsecond line"), st.just("x" * 5000)),
)
def test_anything_raised_while_preparing_becomes_the_row(
    monkeypatch: pytest.MonkeyPatch, error: type[BaseException], where: tuple[object, str], text: str
) -> None:
    """Any Exception, MemoryError and RecursionError included; stopping the grader still stops it."""

    def fail(*_: object) -> None:
        raise error(text)

    with tempfile.TemporaryDirectory() as root, monkeypatch.context() as patch:
        patch.setattr(*where, fail)
        folder = _folder(Path(root), {EX01_PY: SOLUTION.encode()})
        support.notebook(folder / f"{EX01}.ipynb", CATALOG, EX01)  # two files: both are read and parsed
        if not issubclass(error, Exception):
            with pytest.raises(error):
                _row(folder)
            return
        grade = _row(folder)
    said = f"internal grader error: the submission could not be prepared: {error.__name__}"
    assert grade.problem.startswith(said) and "\n" not in grade.problem and len(grade.problem) < 500, grade.problem
    _all_not_run(grade, said)


def test_a_refused_submission_is_its_row_in_its_own_words(tmp_path: Path) -> None:
    (tmp_path / "bob.ipynb").write_bytes(b"[" * 100_000 + b"]" * 100_000)
    grade = _row(tmp_path / "bob.ipynb")
    assert grade.problem.startswith("nothing handed in is an exercise's file: found bob.ipynb (not readable: ")
    assert (
        "bob.ipynb is nested too deeply to read: a notebook's JSON nests a few levels, at most "
        f"{notebook_source.MAX_NOTEBOOK_DEPTH}"
    ) in grade.problem
    _all_not_run(grade, grade.problem)


class _BrokenLease:
    engine = None

    def place(self, files: Path) -> Path:
        raise RecursionError("maximum recursion depth exceeded")


class _Pool:
    def __init__(self) -> None:
        self.returned = 0

    def borrow(self) -> _BrokenLease:
        return _BrokenLease()

    def give_back(self, lease: object, results: object) -> None:
        self.returned += 1


def test_anything_raised_while_grading_becomes_the_row_and_the_engine_goes_back(tmp_path: Path) -> None:
    shutil.copytree(support.SOLUTIONS, tmp_path / "carol")
    pool = _Pool()
    grade = _row(tmp_path / "carol", pool)
    said = "internal grader error: the submission could not be graded: RecursionError: maximum recursion depth"
    assert grade.problem.startswith(said) and pool.returned == 1
    _all_not_run(grade, said)


def test_a_batch_goes_on_past_whatever_prepare_raises(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Real engines, honest submissions before and after: each failure costs its own row only."""
    raised = {
        "b_recursion": RecursionError("maximum recursion depth exceeded"),
        "c_memory": MemoryError(),
        "d_other": LookupError("nothing of the kind"),
    }
    names = ["a_first", *raised, "e_last"]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / EX01_PY).write_text(SOLUTION)
    prepared = submissions.prepare

    def prepare(path: Path, catalog: Any, workdir: Path) -> Submission:
        if path.name in raised:
            raise raised[path.name]
        return prepared(path, catalog, workdir)

    monkeypatch.setattr(submissions, "prepare", prepare)
    ex01 = dataclasses.replace(CATALOG, exercises=(CATALOG.get(EX01),))
    grades = grade_batch(
        ex01,
        [tmp_path / name for name in names],
        GradingPlan(jobs=2, world_sizes=(2,), deadline=20, hidden=True),
    )
    assert [g.name for g in grades] == names
    for grade in grades:
        if grade.name in raised:
            said = f"internal grader error: the submission could not be prepared: {type(raised[grade.name]).__name__}"
            assert grade.problem.startswith(said) and grade.score == 0, grade.problem
            assert grade.results and all(r.message.startswith(said) for r in grade.results)
        else:
            assert grade.score == grade.max_score > 0 and not grade.problem, grade.problem


def test_nbformat_reads_the_notebooks_the_grader_builds() -> None:
    """The shape check refuses nothing `grader notebook build` writes (with the exercise solved)."""
    assert notebook_source._shape_problem(nbformat.reads(json.dumps(SOLVED), as_version=4)) is None


def test_a_zip_member_s_name_never_starts_a_line_of_its_own(tmp_path: Path) -> None:
    """Names are shown on one line, control characters escaped, wherever the grader says them."""
    archive = _zip(tmp_path / "mallory.zip", {"notes\ngrader: full marks\x1b[2J.txt": b"x"})
    refused = _checked(archive)
    assert isinstance(refused, SubmissionError)
    assert "found notes\\ngrader: full marks\\x1b[2J.txt;" in str(refused) and "\n" not in str(refused)
