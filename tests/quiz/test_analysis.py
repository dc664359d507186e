"""Item analysis written by `grader quiz grade`: difficulty, point-biserial discrimination, how often each
option was chosen (counted by option across versions whose letters differ), flags, the quiz's reliability
(KR-20 or Cronbach's alpha) and the exam order every report follows."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.analysis import ItemStatistics, flags, item_statistics, reliability
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


def test_reports_list_the_questions_in_exam_order(graded: Path, tmp_path: Path) -> None:
    """questions.csv, options.csv and scores.csv follow version 1's sheet (numbered as there), not the ids'
    alphabet: the instructor reads them beside the exam."""
    sheet = json.loads((tmp_path / "keys" / "v01.key.json").read_text())["questions"]
    in_exam_order = [q["id"] for q in sorted(sheet, key=lambda q: q["number"])]
    assert in_exam_order != sorted(in_exam_order), "the seed should give an order that is not the alphabet's"
    rows = list(csv.DictReader((graded / "questions.csv").open()))
    assert [r["question"] for r in rows] == in_exam_order and [r["number"] for r in rows] == ["1", "2", "3", "4"]
    options = [r["question"] for r in csv.DictReader((graded / "options.csv").open())]
    assert list(dict.fromkeys(options)) == [q for q in in_exam_order if q != "volume"]
    header = next(csv.reader((graded / "scores.csv").open()))
    assert header[5:] == in_exam_order


def test_kr20_on_right_or_wrong_questions() -> None:
    """Five students, four items of equal points in a Guttman pattern: p = .8 .6 .4 .2, sum of pq = 0.8,
    totals 4 3 2 1 0 of variance 2, so KR-20 = 4/3 * (1 - 0.8 / 2) = 0.8."""
    marks = [mark(s, q, 2.0 * (i < n), 2.0) for s, n in zip("abcde", (4, 3, 2, 1, 0)) for i, q in enumerate("wxyz")]
    found = reliability(marks)
    assert found.name == "KR-20" and found.value == pytest.approx(0.8)


def test_cronbachs_alpha_with_partial_credit() -> None:
    """A multiple-choice question's half marks make it alpha: k/(k-1) (1 - sum of item variances / variance
    of totals), computed here with statistics.pvariance."""
    table = {"a": (1, 1, 0.5), "b": (1, 0, 0.5), "c": (0, 1, 0), "d": (0, 0, 0), "e": (1, 1, 1)}
    marks = [mark(s, q, e) for s, row in table.items() for q, e in zip("xyz", row)]
    items = [statistics.pvariance([row[i] for row in table.values()]) for i in range(3)]
    total = statistics.pvariance([sum(row) for row in table.values()])
    found = reliability(marks)
    assert found.name == "Cronbach's alpha" and found.value == pytest.approx(1.5 * (1 - sum(items) / total))
    same = reliability([mark(s, q, 1) for s in "abc" for q in "xy"])
    assert same.value is None and same.why == "every student has the same total"


def test_flags_say_why_a_question_deserves_a_look() -> None:
    assert flags(ItemStatistics(0.5, -0.4), 10) == [
        "negative discrimination (-0.40): the weaker students did better on it; check the key, "
        "look for an ambiguous option"
    ]
    assert flags(ItemStatistics(0.95, 0.1), 10) == [
        "discrimination 0.10, below 0.2: it barely separates strong from weak",
        "difficulty 0.95, above 0.9: nearly everybody got it",
    ]
    assert flags(ItemStatistics(0.2, 0.5), 10) == ["difficulty 0.20, below 0.3: check the key, then the teaching"]
    assert flags(ItemStatistics(0.5, 0.5), 10) == [] and flags(ItemStatistics(0.1, -1), 2) == []


def test_summary_names_the_reliability_and_the_flagged_questions(tmp_path: Path) -> None:
    """Three students answer all four questions right, three only `fact`: p = .5 .5 .5 1, sum of pq = .75,
    totals 4 4 4 1 1 1 of variance 2.25, KR-20 = 4/3 * (1 - .75 / 2.25) = 0.89. `fact`, which everybody got,
    is flagged, and the distractors nobody picked are named."""
    graded = tmp_path / "out"
    write_bank(tmp_path / "bank", GRADING_BANK)
    keys = tmp_path / "keys"
    argv = ["quiz", "render", "--bank", str(tmp_path / "bank"), "--pool", "all", "--versions", "2"]
    assert main([*argv, "--seed", "4", "--out", str(keys)]) == 0
    lines = row("student", "version", *IDS)
    for number, strong in enumerate((True, True, True, False, False, False)):
        answers = right_answers(keys, number % 2 + 1)
        if not strong:
            answers.update(volume="1", pick="", both="")
        lines += row(f"s{number}", str(number % 2 + 1), *(answers[q] for q in IDS))
    (tmp_path / "responses.csv").write_text(lines)
    assert (
        main(
            ["quiz", "grade", "--key", str(keys), "--responses", str(tmp_path / "responses.csv")]
            + ["--out", str(graded)]
        )
        == 0
    )
    summary = (graded / "summary.md").read_text()
    assert "6 student(s) graded; 4 question(s), 4 points." in summary
    assert "Reliability (KR-20): 0.89." in summary, summary
    fact = next(r for r in csv.DictReader((graded / "questions.csv").open()) if r["question"] == "fact")
    assert f"| {fact['number']} | fact | difficulty 1.00, above 0.9: nearly everybody got it |" in summary
    assert fact["flags"] == "difficulty 1.00, above 0.9: nearly everybody got it"
    assert "- pick, option C of the bank file: none" in summary
