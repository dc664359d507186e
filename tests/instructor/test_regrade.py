"""`grader regrade`, the provenance of grades and `grader override`, end to end on exercise 1 and two submissions:
one right, one that never destroys its group (it fails cleans_up only).

Graded with --no-sandbox (the sandbox is not the point) and a long --deadline: the machine is shared, and a run cut
short by load would pass for a changed verdict."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.cli import main
from grader.instructor import provenance
from grader.report.inert import markdown_text

from . import support

EX01 = "ex01_process_group"
STRICTER = (  # collectives_work also fails a rank still in its group after cleanup_ddp: only "bo" does that
    "    for rank, facts in enumerate(_joined(ctx)):\n        got_sum = ",
    "    for rank, facts in enumerate(_joined(ctx)):\n"
    '        if facts.get("initialized_after_cleanup"):\n'
    '            raise ctx.fail("stricter now: still in a group after cleanup_ddp")\n'
    "        got_sum = ",
)
GRADING = ("--no-sandbox", "--exercises", "ex01", "--world-size", "2", "--deadline", "60", "--timeout", "600")


@pytest.fixture(scope="module")
def graded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[Path], Path]:
    """(the course, the submissions, the batch they were graded into)."""
    root = tmp_path_factory.mktemp("regrade")
    course = support.course_copy(root / "course")
    subs = [
        support.solutions(root / "subs" / "ada"),
        support.with_mistake(root / "subs" / "bo", f"{EX01}.py", "no_destroy"),
    ]
    out = root / "old"
    done = support.run_grader(
        course, "grade", *map(str, subs), "--out", str(out), *GRADING, "--seed", "1234", timeout=900
    )
    assert done.returncode == 0, done.stderr
    return course, subs, out


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="") as handle:
        return list(csv.DictReader(handle))


def _scores(path: Path) -> dict[str, tuple[str, str]]:
    return {row["submission"]: (row[EX01], row["total"]) for row in _rows(path)}


def _regrade(course: Path, old: Path, new: Path, *more: str) -> str:
    done = support.run_grader(course, "regrade", str(old), "--out", str(new), "--no-sandbox", *more, timeout=900)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout


def test_provenance_is_in_batch_json_every_grade_log_line_and_results_json(
    graded: tuple[Path, list[Path], Path],
) -> None:
    course, subs, out = graded
    batch = json.loads((out / "batch.json").read_text())
    exercise = load_catalog(course).get(EX01)
    digest = provenance.exercise_hash(exercise, course / "grader" / "checks" / EX01)
    assert batch["seed"] == 1234  # as --seed gave it
    assert batch["provenance"]["exercises"] == {EX01: digest}
    assert batch["provenance"]["version"] == provenance.version() and batch["provenance"]["commit"] is None
    assert batch["options"]["paths"] == [str(p) for p in subs] and batch["submissions"] == ["ada", "bo"]
    assert (batch["options"]["sandbox"], batch["options"]["world_size"], batch["options"]["deadline"]) == (
        "none",
        2,
        60,
    )
    stamps = [json.loads(line)["provenance"] for line in (out / "grades.jsonl").read_text().splitlines()]
    assert len(stamps) == 2 and all(s == {**batch["provenance"], "seed": batch["seed"]} for s in stamps)
    results = json.loads((out / "ada" / "results.json").read_text())
    assert results["extra_data"]["provenance"] == stamps[0]
    assert digest not in results["output"] and all(digest not in t["output"] for t in results["tests"])


def test_an_unchanged_course_regrades_to_no_change_and_writes_the_gradebook_only_when_accepted(
    graded: tuple[Path, list[Path], Path], tmp_path: Path
) -> None:
    course, _, old = graded
    said = _regrade(course, old, tmp_path / "new")
    assert "0 check result(s) changed in 0 submission(s)" in said
    assert f"0 row(s) would change; rerun with --accept to write {tmp_path / 'new' / 'gradebook.csv'}" in said
    assert not (tmp_path / "new" / "gradebook.csv").exists()
    assert (tmp_path / "new" / "ada" / "results.json").is_file()
    assert _rows(tmp_path / "new" / "regrade.csv") == []
    assert "the same grader and checks as before" in (tmp_path / "new" / "regrade.md").read_text()
    new_batch = json.loads((tmp_path / "new" / "batch.json").read_text())
    assert new_batch["seed"] == json.loads((old / "batch.json").read_text())["seed"]
    said = _regrade(course, old, tmp_path / "accepted", "--accept")
    assert f"0 row(s) changed: {tmp_path / 'accepted' / 'gradebook.csv'} written" in said
    assert _scores(tmp_path / "accepted" / "gradebook.csv") == _scores(old / "gradebook.csv")


def test_a_stricter_check_changes_exactly_its_rows_and_an_override_is_kept_and_flagged(
    graded: tuple[Path, list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    course, _, graded_out = graded
    old = tmp_path / "old"
    shutil.copytree(graded_out, old)
    monkeypatch.setenv("USER", "prof")
    assert main(["override", str(old), "bo", "1", "5", "--note", "destroyed by hand"]) == 0
    stricter = support.course_copy(tmp_path / "stricter")
    checks = stricter / "grader" / "checks" / EX01 / "checks.py"
    source = checks.read_text()
    assert STRICTER[0] in source
    checks.write_text(source.replace(*STRICTER))

    said = _regrade(stricter, old, tmp_path / "new", "--accept")

    (change,) = _rows(tmp_path / "new" / "regrade.csv")
    assert (change["submission"], change["exercise"], change["check"], change["world_size"]) == (
        "bo",
        EX01,
        "collectives_work",
        "2",
    )
    assert (change["old_status"], change["new_status"], change["old_points"], change["new_points"]) == (
        "passed",
        "failed",
        "1",
        "0",
    )
    assert change["old_message"] == "" and "stricter now" in change["new_message"]
    assert "check: the grade under it changed" in change["override"]
    report = (tmp_path / "new" / "regrade.md").read_text()
    assert markdown_text(f"{EX01}: its checks changed") in report
    assert "| collectives\\_work | passed \\-\\> failed | 1 |" in report
    assert "1 check result(s) changed in 1 submission(s)" in said and "1 row(s) changed" in said
    assert "override kept, check: the grade under it changed: bo ex01_process_group graded 4 -> 3, override 5" in said
    assert _scores(tmp_path / "new" / "gradebook.csv") == {"ada": ("5", "5"), "bo": ("5", "5")}
    bo = {row["submission"]: row for row in _rows(tmp_path / "new" / "gradebook.csv")}["bo"]
    assert bo["overrides"] == f"{EX01}: 3 -> 5 (destroyed by hand)"
    assert [(o["submission"], o["who"]) for o in _rows(tmp_path / "new" / "overrides.csv")] == [("bo", "prof")]


def test_an_override_sets_the_score_and_total_keeps_the_graded_one_and_can_be_removed(
    graded: tuple[Path, list[Path], Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "out"
    shutil.copytree(graded[2], out)
    monkeypatch.setenv("USER", "prof")
    assert main(["override", str(out), "ada", "ex01", "3.5", "--note", "copied =1+1"]) == 0
    (row,) = [r for r in _rows(out / "gradebook.csv") if r["submission"] == "ada"]
    assert (row[EX01], row["total"], row["max_score"]) == ("3.5", "3.5", "5")
    assert row["overrides"] == f"{EX01}: 5 -> 3.5 (copied =1+1)"
    (recorded,) = _rows(out / "overrides.csv")
    assert (recorded["submission"], recorded["exercise"], recorded["score"], recorded["who"]) == (
        "ada",
        EX01,
        "3.5",
        "prof",
    )
    assert recorded["note"] == "copied =1+1" and recorded["when"]
    assert main(["override", str(out), "ada", "ex01", "4", "--note", "on appeal"]) == 0  # replaces the first
    assert [r["note"] for r in _rows(out / "overrides.csv")] == ["on appeal"]
    assert main(["override", str(out), "ada", "ex01", "--remove"]) == 0
    assert _scores(out / "gradebook.csv") == _scores(graded[2] / "gradebook.csv")
    assert not (out / "overrides.csv").exists()


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["nobody", "1", "1", "--note", "x"], "no submission 'nobody' in"),
        (["ada", "ex02", "1", "--note", "x"], "no graded exercise 'ex02' (or several); the exercises graded are: "),
        (["ada", "1", "6", "--note", "x"], "6 is not a score of ex01_process_group: give one from 0 to 5"),
        (["ada", "1", "-1", "--note", "x"], "-1 is not a score of ex01_process_group: give one from 0 to 5"),
        (["ada", "1", "4"], "an override needs a SCORE and a --note saying why"),
        (["ada", "1", "--remove"], "ada has no override of ex01_process_group to remove"),
    ],
)
def test_a_bad_override_is_refused_in_one_sentence_and_nothing_is_written(
    graded: tuple[Path, list[Path], Path],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    said: str,
) -> None:
    out = tmp_path / "out"
    shutil.copytree(graded[2], out)
    before = (out / "gradebook.csv").read_text()
    assert main(["override", str(out), *argv]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert (out / "gradebook.csv").read_text() == before and not (out / "overrides.csv").exists()


def test_a_score_that_is_no_number_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["override", str(tmp_path), "ada", "1", "nan", "--note", "x"])
    assert exited.value.code == 2 and "nan is not a score, such as 6 or 4.5" in capsys.readouterr().err


def _old_batch(folder: Path, **fields: object) -> Path:
    folder.mkdir()
    data = {"submissions": ["ada"], "exercises": [EX01], "shard": None, **fields}
    (folder / "batch.json").write_text(json.dumps(data))
    return folder


def test_a_batch_of_an_older_grader_without_its_seed_is_refused_in_a_sentence(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = _old_batch(tmp_path / "old")
    assert main(["regrade", str(old), "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert f"{old} was graded by an older grader that did not record its seed" in err
    assert "Traceback" not in err and not (tmp_path / "new").exists()


def test_a_regrade_into_its_own_folder_or_of_submissions_gone_is_refused(
    graded: tuple[Path, list[Path], Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    old = graded[2]
    assert main(["regrade", str(old), "--out", str(old / ".." / old.name)]) == 2
    assert "is " + str(old) + " itself" in capsys.readouterr().err
    moved = tmp_path / "moved"
    shutil.copytree(old, moved)
    batch = json.loads((moved / "batch.json").read_text())
    batch["options"]["paths"][1] = str(tmp_path / "deleted-bo")
    (moved / "batch.json").write_text(json.dumps(batch))
    assert main(["regrade", str(moved), "--out", str(tmp_path / "new")]) == 2
    err = capsys.readouterr().err
    assert f"1 submission(s) {moved} graded no longer exist: {tmp_path / 'deleted-bo'}; put them back" in err
    assert not (tmp_path / "new").exists()


@pytest.mark.parametrize("seed", ["-3", "2147483648", "1e3", "seven"])
def test_a_seed_out_of_range_is_refused_in_a_sentence(tmp_path: Path, seed: str) -> None:
    done = support.run_grader(support.REPO, "grade", str(tmp_path), "--out", str(tmp_path / "out"), "--seed", seed)
    assert done.returncode == 2 and f"{seed} is not a seed: a whole number from 0 to 2147483647" in done.stderr
    assert "Traceback" not in done.stderr and not (tmp_path / "out").exists()
