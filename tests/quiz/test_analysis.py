"""Item analysis written by `grader quiz grade`: difficulty, point-biserial discrimination, and how
often each option was chosen, counted by option across versions whose letters differ."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.analysis import item_statistics
from grader.quiz.marks import Mark

from .support import GRADING_BANK, IDS, right_answers, row, write_bank


def mark(student: str, question: str, earned: float, possible: float = 1.0) -> Mark:
    return Mark(student, 1, question, 1, "x", earned, possible, "")


def test_difficulty_and_discrimination_match_their_definitions() -> None:
    scores = {"s1": (1, 1, 2), "s2": (1, 0, 2), "s3": (0, 1, 0), "s4": (0, 0, 1), "s5": (1, 1, 1)}
    marks = [
        mark(s, q, earned, possible)
        for s, values in scores.items()
        for q, earned, possible in zip("abc", values, (1, 1, 2))
    ]
    stats = item_statistics(marks)
    for index, question in enumerate("abc"):
        possible = (1, 1, 2)[index]
        item = [values[index] / possible for values in scores.values()]
        rest = [sum(values) - values[index] for values in scores.values()]
        assert stats[question].difficulty == pytest.approx(statistics.fmean(item))
        assert stats[question].discrimination == pytest.approx(statistics.correlation(item, rest))


def test_no_discrimination_without_spread() -> None:
    marks = [mark(s, "a", 1) for s in "xyz"] + [mark(s, "b", e) for s, e in zip("xyz", (1, 0, 1))]
    stats = item_statistics(marks)
    assert stats["a"].difficulty == 1 and stats["a"].discrimination is None


@pytest.fixture()
def graded(tmp_path: Path) -> Path:
    """Six students on three versions: the strong ones answer everything right, the weak ones pick
    the same wrong option of `pick` (whatever its letter in their version) and answer `fact` right."""
    write_bank(tmp_path / "bank", GRADING_BANK)
    keys = tmp_path / "keys"
    assert (
        main(
            [
                "quiz",
                "render",
                "--bank",
                str(tmp_path / "bank"),
                "--pool",
                "all",
                "--versions",
                "3",
                "--seed",
                "4",
                "--out",
                str(keys),
            ]
        )
        == 0
    )
    lines = row("student", "version", *IDS)
    for number, (student, strong) in enumerate(
        (("s1", True), ("s2", True), ("s3", True), ("w1", False), ("w2", False), ("w3", False))
    ):
        version = number % 3 + 1
        answers = right_answers(keys, version)
        if not strong:
            key = {q["id"]: q for q in json.loads((keys / f"v{version:02d}.key.json").read_text())["questions"]}
            nccl = next(o["letter"] for o in key["pick"]["options"] if o["text"] == "nccl")
            answers.update(volume="1", pick=nccl, both="")
        lines += row(student, str(version), *(answers[q] for q in IDS))
    (tmp_path / "responses.csv").write_text(lines)
    out = tmp_path / "grades"
    assert (
        main(["quiz", "grade", "--key", str(keys), "--responses", str(tmp_path / "responses.csv"), "--out", str(out)])
        == 0
    )
    return out


def test_questions_csv_has_difficulty_and_discrimination(graded: Path) -> None:
    rows = {r["question"]: r for r in csv.DictReader((graded / "questions.csv").open())}
    assert rows["pick"]["difficulty"] == "0.50" and float(rows["pick"]["discrimination"]) > 0.9
    assert rows["fact"]["difficulty"] == "1.00" and rows["fact"]["discrimination"] == ""
    assert rows["both"]["students"] == "6" and rows["both"]["answered"] == "3"


def test_options_csv_counts_each_option_across_versions(graded: Path) -> None:
    rows = [r for r in csv.DictReader((graded / "options.csv").open()) if r["question"] == "pick"]
    by_text = {r["text"]: r for r in rows}
    assert [r["option"] for r in rows] == ["A", "B", "C"], "options listed in the bank's order"
    assert by_text["nccl"]["chosen"] == "3" and by_text["nccl"]["correct"] == "no"
    assert by_text["gloo"]["chosen"] == "3" and by_text["gloo"]["correct"] == "yes"
    assert by_text["none"]["chosen"] == "0" and by_text["none"]["share"] == "0.00"
    assert by_text["none"]["advice"] == "replace this distractor", "a distractor nobody picked does no work"
    assert by_text["nccl"]["advice"] == by_text["gloo"]["advice"] == "", "picked, or the key"
    assert by_text["nccl"]["share"] == "0.50"
    assert not [r for r in csv.DictReader((graded / "options.csv").open()) if r["question"] == "volume"]
