"""Submissions as handed in: folders, zips (also hostile ones), notebooks and exercise files, and the one rule
that chooses each exercise's file (grader/intake.py) whatever the layout."""

from __future__ import annotations

import csv
import shutil
import zipfile
from pathlib import Path

import nbformat
import pytest

from grader import intake, notebook_build
from grader.catalog import load_catalog
from grader.instructor.batch import grade_batch
from grader.instructor.gradebook import Gradebook
from grader.instructor.submissions import Submission, prepare
from grader.intake import SubmissionError
from grader.plan import GradingPlan

from . import support

CATALOG = load_catalog(support.REPO)
EX01, EX02, EX03 = "ex01_process_group", "ex02_data_sharding", "ex03_train_ddp"


def _solution(folder: Path, exercise_id: str, as_name: str = "") -> Path:
    path = folder / (as_name or f"{exercise_id}.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(support.SOLUTIONS / f"{exercise_id}.py", path)
    return path


def _stub(folder: Path, exercise_id: str, as_name: str = "") -> Path:
    path = folder / (as_name or f"{exercise_id}.py")
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(support.REPO / "exercises" / f"{exercise_id}.py", path)
    return path


def _graded(submission: Submission, exercise_id: str) -> bytes:
    return (submission.folder / f"{exercise_id}.py").read_bytes()


def test_a_zip_of_a_folder_is_unpacked(tmp_path: Path) -> None:
    archive = tmp_path / "alice.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.write(support.SOLUTIONS / "ex01_process_group.py", "alice/ex01_process_group.py")
        out.writestr("__MACOSX/alice/._ex01_process_group.py", "junk")
    submission = prepare(archive, CATALOG, tmp_path / "work")
    assert submission.name == "alice"
    assert [p.name for p in submission.folder.iterdir()] == ["ex01_process_group.py"]
    assert [str(c) for c in submission.choices] == [f"{EX01}: {EX01}.py (named as in the course)"]


def test_a_zip_cannot_write_outside_its_folder(tmp_path: Path) -> None:
    archive = tmp_path / "mallory.zip"
    with zipfile.ZipFile(archive, "w") as out:
        out.writestr("../../escaped.py", "x = 1")
    with pytest.raises(SubmissionError, match="points outside the archive"):
        prepare(archive, CATALOG, tmp_path / "work")
    assert not (tmp_path / "escaped.py").exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("bob.zip", "not a readable zip archive"),
        ("bob.txt", "a submission is a folder, a .zip, an .ipynb notebook or an exercise's .py file"),
    ],
)
def test_unusable_files_are_refused(tmp_path: Path, name: str, message: str) -> None:
    (tmp_path / name).write_text("hello")
    with pytest.raises(SubmissionError, match=message):
        prepare(tmp_path / name, CATALOG, tmp_path / "work")


def test_a_missing_path_is_refused(tmp_path: Path) -> None:
    with pytest.raises(SubmissionError, match="no such file"):
        prepare(tmp_path / "ghost", CATALOG, tmp_path / "work")


def test_an_exercise_file_handed_in_alone_is_a_submission(tmp_path: Path) -> None:
    """What an LMS gives for an assignment of one file: Canvas's download name, kept as the submission's."""
    path = _solution(tmp_path, EX03, f"smithjohn_12345_67890_{EX03}.py")
    submission = prepare(path, CATALOG, tmp_path / "work")
    assert submission.name == f"smithjohn_12345_67890_{EX03}"
    assert _graded(submission, EX03) == path.read_bytes()
    assert submission.problem(CATALOG.get(EX01)) == f"file missing: nothing handed in is {EX01}.py or its notebook"


# Canvas's "Download Submissions" zip names each file `<sortable name>[_LATE]_<user id>_<attachment id>_<file>`:
# `get_filename` and `add_upload_submission` in lib/content_zipper.rb of Canvas
# (https://github.com/instructure/canvas-lms/blob/master/lib/content_zipper.rb; the name is the sortable name,
# lower-cased, non-word characters removed; `anon_<id>` for an anonymously graded assignment), e.g.
# `smithbob_340934_208490284_BobsWork.zip` in https://github.com/mikewesthad/canvas-unzipper's README. A file a
# student uploads under a name they already used gets `-1`, `-2`...: `Attachment.make_unique_filename` in
# app/models/attachment.rb of Canvas ("#{basename}-#{addition}#{extname}").
RENAMED = {
    f"{EX03}-1.py": "a re-upload's name",
    f"{EX03}_late.py": "a late submission's name",
    f"{EX03} (2).py": "a downloaded copy's name",
    f"smithjohn_12345_67890_{EX03}.py": "Canvas's download name",
    f"smithjohn_LATE_12345_67890_{EX03}.py": "Canvas's download name",
    f"anon_a1B2c_67890_{EX03}.py": "Canvas's download name",
    f"smithjohn_12345_67890_{EX03}-1.py": "Canvas's download name, a re-upload's name",
}


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_an_lms_s_renamed_file_is_its_exercise_s_and_the_row_says_why(tmp_path: Path, name: str) -> None:
    folder = tmp_path / "alice"
    source = _solution(folder, EX03, name)
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert _graded(submission, EX03) == source.read_bytes()
    assert [str(c) for c in submission.choices] == [f"{EX03}: {name} ({RENAMED[name]})"]


@pytest.mark.parametrize("name", [f"test_{EX03}.py", f"my_{EX03}.py", f"{EX03}_v2.py", f"{EX03}.py.bak", "ex3.py"])
def test_a_file_merely_like_an_exercise_s_is_no_candidate(tmp_path: Path, name: str) -> None:
    """A student's own test file beside the exercise makes no second copy of it."""
    folder = tmp_path / "alice"
    _solution(folder, EX03)
    (folder / name).write_text("from ex03_train_ddp import train_ddp\n")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert not submission.problems and [c.graded for c in submission.choices] == [f"{EX03}.py"]


def test_files_in_course_folders_are_found_and_tools_folders_never_entered(tmp_path: Path) -> None:
    folder = tmp_path / "alice"
    _solution(folder, EX01, "repo-main/exercises/ex01_process_group.py")
    (folder / "repo-main" / "README.md").parent.mkdir(parents=True, exist_ok=True)
    (folder / "repo-main" / "README.md").write_text("my work")
    _stub(folder, EX01, "repo-main/.grader/backups/ex01_process_group.py")  # a backup `grader reset` kept
    (folder / "repo-main" / ".venv" / "bin").mkdir(parents=True)
    (folder / "repo-main" / ".venv" / "bin" / "python").symlink_to("/usr/bin/python3")  # never entered: no refusal
    _solution(folder, EX02, "repo-main/__pycache__/ex02_data_sharding.py")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert [str(c) for c in submission.choices] == [f"{EX01}: repo-main/exercises/{EX01}.py (in a course folder)"]
    assert submission.problem(CATALOG.get(EX02)) == f"file missing: nothing handed in is {EX02}.py or its notebook"


def test_a_folder_nests_its_files_as_deep_as_a_zip_may_and_no_deeper(tmp_path: Path) -> None:
    """Each folder on the way is opened in turn: the depth is capped as a zip member's is (intake.MAX_FOLDER_DEPTH)."""
    deep = "/".join(["d"] * (intake.MAX_FOLDER_DEPTH - 1))
    _solution(tmp_path / "alice", EX01, f"{deep}/{EX01}.py")
    assert [c.exercise for c in prepare(tmp_path / "alice", CATALOG, tmp_path / "w1").choices] == [EX01]
    _solution(tmp_path / "bob", EX01, f"{deep}/d/{EX01}.py")
    with pytest.raises(SubmissionError) as refused:
        prepare(tmp_path / "bob", CATALOG, tmp_path / "w2")
    assert str(refused.value) == f"{deep}/d: its files sit in folders nested more than 63 folders deep"


def test_notebooks_in_a_folder_stand_for_their_exercise(tmp_path: Path) -> None:
    folder = tmp_path / "carol"
    folder.mkdir()
    support.notebook(folder / "ex02_data_sharding.ipynb", CATALOG)
    (folder / "ex03_train_ddp.ipynb").write_text("{")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert (submission.folder / "ex02_data_sharding.py").is_file()
    assert "not a notebook" in submission.problems["ex03_train_ddp"]
    assert [str(c) for c in submission.choices] == [f"{EX02}: {EX02}.ipynb (a notebook)"]


def _built(path: Path, exercise_id: str, solved: bool) -> Path:
    """A notebook as `grader notebook build` writes it, solved or still the stub."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if solved:
        return support.notebook(path, CATALOG, exercise_id)
    exercise = CATALOG.get(exercise_id)
    nbformat.write(notebook_build.build_notebook(exercise, support.REPO / "exercises" / exercise.file), path)
    return path


def test_a_stub_beside_a_solved_notebook_is_set_aside_and_said(tmp_path: Path) -> None:
    folder = tmp_path / "dave"
    folder.mkdir()
    _stub(folder, "ex05_no_sync")
    _built(folder / "ex05_no_sync.ipynb", "ex05_no_sync", solved=True)
    submission = prepare(folder, CATALOG, tmp_path / "work")
    graded = (submission.folder / "ex05_no_sync.py").read_text()
    assert "no_sync()" in graded and "NotImplementedError" not in graded
    assert [str(c) for c in submission.choices] == [
        "ex05_no_sync: ex05_no_sync.ipynb (a notebook); set aside: ex05_no_sync.py (the untouched stub)"
    ]
    assert "ex05_no_sync" in submission.source_maps


def test_a_notebook_is_the_exercise_its_metadata_names_whatever_its_name(tmp_path: Path) -> None:
    folder = tmp_path / "erin"
    folder.mkdir()
    _built(folder / "ex04_launch-Copy1.ipynb", "ex04_launch", solved=True)
    _built(folder / "homework two.ipynb", EX02, solved=True)  # any name: the metadata decides
    _built(folder / f"{EX03}.ipynb", "ex06_fsdp", solved=True)  # named like ex03, but ex06's by its metadata
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert sorted(p.name for p in submission.folder.iterdir()) == [f"{EX02}.py", "ex04_launch.py", "ex06_fsdp.py"]
    assert [str(c) for c in submission.choices] == [
        f"{EX02}: homework two.ipynb (its grader metadata names {EX02})",
        "ex04_launch: ex04_launch-Copy1.ipynb (a Jupyter copy's name, a notebook)",
        f"ex06_fsdp: {EX03}.ipynb (its grader metadata names ex06_fsdp)",
    ]
    assert not submission.problems


def test_a_notebook_of_an_exercise_not_graded_here_is_no_error_of_the_others(tmp_path: Path) -> None:
    """An assignment of exercises 1 and 2: ex04's notebook handed in is simply not their file."""
    assignment = CATALOG.select(["ex01", "ex02"])
    folder = tmp_path / "frank"
    folder.mkdir()
    _solution(folder, EX01)
    _built(folder / "ex04_launch.ipynb", "ex04_launch", solved=True)
    submission = prepare(folder, assignment, tmp_path / "work")
    assert not submission.problems and [c.exercise for c in submission.choices] == [EX01]
    alone = _built(tmp_path / "ex04_launch.ipynb", "ex04_launch", solved=True)
    with pytest.raises(SubmissionError) as nothing:
        prepare(alone, assignment, tmp_path / "work2")
    assert str(nothing.value) == (
        "nothing handed in is an exercise's file: found ex04_launch.ipynb (a notebook of ex04_launch, not of an "
        "exercise graded here); expected files named like ex01_process_group.py or ex02_data_sharding.py (in any "
        "folder, zipped or not), or their notebooks"
    )


def test_two_files_with_different_work_are_the_exercise_s_problem_naming_both(tmp_path: Path) -> None:
    folder = tmp_path / "gina"
    _solution(folder, EX02)
    book = nbformat.read(_built(folder / "notebooks" / f"{EX02}.ipynb", EX02, solved=True), as_version=4)
    (cell,) = [c for c in book.cells if "exercise" in c.metadata.get("tags", [])]
    cell.source += "\n\ndef helper() -> None:\n    pass\n"  # worked on further than the .py
    nbformat.write(book, folder / "notebooks" / f"{EX02}.ipynb")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert submission.problems[EX02] == (
        f"2 files handed in could be {EX02}.py and their code differs: {EX02}.py, notebooks/{EX02}.ipynb; "
        "hand in one of them"
    )
    assert not (submission.folder / f"{EX02}.py").exists() and not submission.choices


def test_copies_with_the_same_code_count_once(tmp_path: Path) -> None:
    """A notebook built from the file (its docstring moved to a markdown cell) and a copy in another folder."""
    folder = tmp_path / "hana"
    _solution(folder, EX02, f"exercises/{EX02}.py")
    _solution(folder, EX02, f"old/{EX02}-1.py")
    _built(folder / "notebooks" / f"{EX02}.ipynb", EX02, solved=True)
    _stub(folder, EX01, f"exercises/{EX01}.py")
    _stub(folder, EX01, f"{EX01}.py")
    submission = prepare(folder, CATALOG, tmp_path / "work")
    assert not submission.problems
    assert [str(c) for c in submission.choices] == [
        f"{EX01}: {EX01}.py (named as in the course); set aside: exercises/{EX01}.py (the untouched stub too)",
        f"{EX02}: exercises/{EX02}.py (in a course folder); set aside: old/{EX02}-1.py (the same code), "
        f"notebooks/{EX02}.ipynb (the same code)",
    ]


def test_a_zip_inside_is_opened_only_when_nothing_outside_it_is_an_exercise_s(tmp_path: Path) -> None:
    folder = tmp_path / "ivan"
    _solution(folder, EX01, "src/ex01_process_group.py")
    shutil.make_archive(str(folder / "backup"), "zip", folder / "src")  # a stale backup: never a second copy
    submission = prepare(folder, CATALOG, tmp_path / "w1")
    assert [str(c) for c in submission.choices] == [f"{EX01}: src/{EX01}.py (in a course folder)"]
    shutil.rmtree(folder / "src")
    submission = prepare(folder, CATALOG, tmp_path / "w2")
    assert [str(c) for c in submission.choices] == [f"{EX01}: backup.zip: {EX01}.py (in backup.zip)"]


def test_nothing_to_grade_says_what_was_found_and_what_was_expected(tmp_path: Path) -> None:
    folder = tmp_path / "jo"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "solution.py").write_text("x = 1\n")
    (folder / "essay.txt").write_text("my answers")
    _built(folder / "notes.ipynb", EX01, solved=True)
    nbformat.write(nbformat.v4.new_notebook(), folder / "scratch.ipynb")
    with pytest.raises(SubmissionError) as nothing:
        prepare(folder, CATALOG.select(["ex03"]), tmp_path / "work")
    assert str(nothing.value) == (
        "nothing handed in is an exercise's file: found essay.txt, notes.ipynb (a notebook of ex01_process_group, "
        "not of an exercise graded here), scratch.ipynb (a notebook without the grader's metadata, named like no "
        "exercise), src/solution.py; expected files named like ex03_train_ddp.py (in any folder, zipped or not), "
        "or their notebooks"
    )


def test_the_choice_reaches_the_gradebooks_files_column(tmp_path: Path) -> None:
    folder = tmp_path / "gina"
    folder.mkdir()
    _stub(folder, EX02)
    _built(folder / "ex02_data_sharding-Copy1.ipynb", EX02, solved=True)
    options = GradingPlan(jobs=1, world_sizes=(2,), deadline=20)
    (grade,) = grade_batch(CATALOG, [folder], options, sandbox=None)  # which file is graded: no sandbox involved
    assert grade.exercise_score(EX02) == sum(c.points for c in CATALOG.get("ex02").checks if c.visibility == "public")
    book = Gradebook(tmp_path / "gradebook.csv", CATALOG)
    book.on_result(grade)
    book.close()
    (row,) = list(csv.DictReader((tmp_path / "gradebook.csv").open()))
    assert row["files"] == (
        f"{EX02}: {EX02}-Copy1.ipynb (a Jupyter copy's name, a notebook); set aside: {EX02}.py (the untouched stub)"
    )
    assert row["problem"] == "" and not grade.problem, "a choice of file is no error of the submission"
