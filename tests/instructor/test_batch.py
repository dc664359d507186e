"""`grader grade` on a batch holding every kind of submission, graded with hidden checks.

Graded with --no-sandbox: what is tested here is how each kind of submission is read, graded and
reported, the same with or without a sandbox, and it must pass on a machine without bubblewrap.
The sandboxed batch, honest submissions beside attacks, is tests/security/test_hostile_batch.py."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from grader.catalog import load_catalog

from . import support
from .results_schema import validate_results


@pytest.fixture(scope="module")
def batch(hidden_course: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    folder = tmp_path_factory.mktemp("submissions")
    catalog = load_catalog(hidden_course)
    support.solutions(folder / "correct")
    support.stubs(folder / "stubs")
    support.with_mistake(folder / "loss_summed", "ex03_train_ddp.py", "loss_summed")
    support.with_mistake(folder / "no_set_epoch", "ex02_data_sharding.py", "forgot_set_epoch")
    support.hanging(folder / "hangs")
    support.syntax_error(folder / "syntax")
    support.notebook(folder / "notebook.ipynb", catalog)
    (folder / "broken.ipynb").write_text("{ not json")
    partial = folder / "partial"
    partial.mkdir()
    shutil.copyfile(support.SOLUTIONS / "ex01_process_group.py", partial / "ex01_process_group.py")
    marked = folder / "marked"  # the same file, with a forgery's primitive it never calls
    marked.mkdir()
    source = (support.SOLUTIONS / "ex01_process_group.py").read_text()
    (marked / "ex01_process_group.py").write_text(source + "\nimport gc\n\n_referrers = gc.get_referrers\n")
    zipped = support.solutions(folder / "zipped_src")
    shutil.make_archive(str(folder / "zipped"), "zip", zipped.parent, zipped.name)  # a zip of a folder
    shutil.rmtree(zipped)
    out = folder / "out"
    # --deadline 10: the machine is shared with other tests
    done = support.run_grader(
        hidden_course,
        "grade",
        *sorted(str(p) for p in folder.iterdir()),
        "--out",
        str(out),
        "-j",
        "2",
        "--world-size",
        "2",
        "--deadline",
        "10",
        "--timeout",
        "120",
        "--no-sandbox",
    )
    assert done.returncode == 0, done.stderr
    return out, done.stdout


def _results(out: Path, name: str) -> dict[str, Any]:
    data = json.loads((out / name / "results.json").read_text())
    validate_results(data)
    return data


def _tests(data: dict[str, Any], failed: bool = False) -> dict[str, dict[str, Any]]:
    return {t["name"]: t for t in data["tests"] if not failed or t["status"] == "failed"}


def test_gradebook_has_a_row_per_submission(batch: tuple[Path, str]) -> None:
    out, stdout = batch
    rows = {row["submission"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    assert sorted(rows) == [
        "broken",
        "correct",
        "hangs",
        "loss_summed",
        "marked",
        "no_set_epoch",
        "notebook",
        "partial",
        "stubs",
        "syntax",
        "zipped",
    ]
    full = float(rows["correct"]["max_score"])
    for name in ("correct", "zipped"):
        assert float(rows[name]["total"]) == full, _tests(_results(out, name), failed=True)
    assert float(rows["stubs"]["total"]) == 0 == float(rows["broken"]["total"])
    assert float(rows["syntax"]["ex03_train_ddp"]) == 0 < float(rows["syntax"]["ex02_data_sharding"])
    assert float(rows["hangs"]["ex02_data_sharding"]) == 0 < float(rows["hangs"]["ex03_train_ddp"])
    assert float(rows["partial"]["total"]) == float(rows["partial"]["ex01_process_group"]) > 0
    assert float(rows["notebook"]["total"]) == float(rows["notebook"]["ex02_data_sharding"]) > 0
    assert "not a notebook" in rows["broken"]["problem"]
    for name in ("loss_summed", "no_set_epoch"):
        assert 0 < float(rows[name]["total"]) < full
    assert "graded 11 submission(s)" in stdout and "[11/11]" in stdout


def test_named_mistakes_and_breakage_are_explained(batch: tuple[Path, str]) -> None:
    out, _ = batch
    summed = _tests(_results(out, "loss_summed"), failed=True)
    assert list(summed) == ["ex03_train_ddp: matches_large_batch"]
    assert "sum" in summed["ex03_train_ddp: matches_large_batch"]["output"].lower()
    epoch = _tests(_results(out, "no_set_epoch"), failed=True)
    assert list(epoch) == ["ex02_data_sharding: reshuffles_each_epoch"]
    assert "set_epoch" in epoch["ex02_data_sharding: reshuffles_each_epoch"]["output"]
    hangs = _tests(_results(out, "hangs"), failed=True)
    assert hangs and all(name.startswith("ex02") and "deadline" in t["output"] for name, t in hangs.items()), hangs
    syntax = _tests(_results(out, "syntax"), failed=True)
    assert syntax and all(name.startswith("ex03") and "syntax error" in t["output"] for name, t in syntax.items()), (
        syntax
    )
    partial = _tests(_results(out, "partial"), failed=True)
    assert partial and all("file missing" in t["output"] for t in partial.values())
    assert not any(name.startswith("ex01") for name in partial)
    stubs = _results(out, "stubs")
    assert all("not implemented yet" in t["output"] for t in stubs["tests"])


def test_hidden_checks_are_graded_but_not_shown(batch: tuple[Path, str]) -> None:
    out, _ = batch
    correct = _results(out, "correct")
    hidden = [t for t in correct["tests"] if t["visibility"] == "hidden"]
    assert [t["name"] for t in hidden] == [
        f"ex02_data_sharding: {support.HIDDEN_CHECK}",
        "ex10_scaling: holds_off_grid",
    ]
    assert all(t["status"] == "passed" and t["score"] == 1 for t in hidden)
    assert support.HIDDEN_CHECK not in correct["output"] and "holds_off_grid" not in correct["output"]
    assert "visible checks passed" in correct["output"]


def test_the_batch_leaves_a_manifest_a_grade_log_and_a_class_report(batch: tuple[Path, str]) -> None:
    out, _ = batch
    manifest = json.loads((out / "batch.json").read_text())
    assert len(manifest["submissions"]) == 11 and manifest["shard"] is None
    assert len((out / "grades.jsonl").read_text().splitlines()) == 11
    report = (out / "report.html").read_text()
    assert 'id="histogram"' in report
    diagnoses = report[report.index('id="diagnoses"') : report.index('id="troubles"')]
    assert "loss summed" in diagnoses and "loss_summed" in diagnoses and "set_epoch" in diagnoses
    troubles = report[report.index('id="troubles"') : report.index('id="times"')]
    for name in ("hangs", "broken", "syntax"):
        assert f"<td>{name}</td>" in troubles, name
    assert "timed out" in troubles and "correct" not in troubles


def test_a_marked_submission_keeps_its_score_and_only_instructors_see_the_marks(batch: tuple[Path, str]) -> None:
    out, stdout = batch
    rows = {row["submission"]: row for row in csv.DictReader((out / "gradebook.csv").open())}
    line = len((support.SOLUTIONS / "ex01_process_group.py").read_text().splitlines()) + 4
    said = f"ex01_process_group.py:{line}: uses gc.get_referrers"
    assert rows["marked"]["total"] == rows["partial"]["total"] and float(rows["marked"]["total"]) > 0
    assert rows["marked"]["review"].startswith(said) and not rows["marked"]["problem"]
    assert all(not row["review"] for name, row in rows.items() if name != "marked")
    marked, partial = _results(out, "marked"), _results(out, "partial")
    assert marked["score"] == partial["score"] and marked["extra_data"]["review"][0]["line"] == line
    shown = [[data["output"], [t for t in data["tests"] if t["visibility"] != "hidden"]] for data in (marked, partial)]
    assert shown[0] == shown[1]  # what Gradescope shows a student: nothing of the marks
    report = (out / "report.html").read_text()
    assert "<td>marked</td>" in report[report.index('id="reviews"') :]
    assert "1 submission(s) marked for review by the tamper scan" in stdout and ": marked" in stdout
