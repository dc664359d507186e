"""Grading responses as they come from an LMS or a spreadsheet: nothing lost, nothing guessed.

Bad rows are reported with their line and the rest is graded; duplicates are never merged; exports
with extra columns, another header case, `;` delimiters or a byte-order mark are read; answers with
a decimal comma, the question's unit or brackets are read; what cannot be read scores 0 and says why.
"""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.grade import mark_question

from .support import GRADING_BANK as BANK
from .support import IDS, key, right_answers, row, write_bank


@pytest.fixture()
def rendered(tmp_path: Path) -> Path:
    write_bank(tmp_path / "bank", BANK)
    out = tmp_path / "keys"
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
                "9",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def grade(
    rendered: Path, tmp_path: Path, content: str | bytes, capsys: pytest.CaptureFixture[str]
) -> tuple[int, dict[str, dict], list[dict], str]:
    responses = tmp_path / "responses.csv"
    if isinstance(content, bytes):
        responses.write_bytes(content)
    else:
        responses.write_text(content, encoding="utf-8")
    out = tmp_path / "grades"
    code = main(["quiz", "grade", "--key", str(rendered), "--responses", str(responses), "--out", str(out)])
    err = capsys.readouterr().err
    if code:
        return code, {}, [], err
    scores = {row["student"]: row for row in csv.DictReader((out / "scores.csv").open(encoding="utf-8"))}
    problems = list(csv.DictReader((out / "problems.csv").open(encoding="utf-8")))
    return code, scores, problems, err


def test_bad_rows_are_reported_and_the_rest_is_graded(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = right_answers(rendered, 2)
    answers = [good[q] for q in IDS]
    content = (
        row("student", "version", *IDS)
        + row("ada", "2", *answers)
        + row("bob", "4", *answers)
        + row("cy", "", *answers)
        + row("dan", "2.0", *answers)
        + row("", "2", *answers)
        + row("eve", "two", *answers)
    )
    code, scores, problems, err = grade(rendered, tmp_path, content, capsys)
    assert code == 0
    assert sorted(scores) == ["ada", "dan"]  # "2.0" is how a spreadsheet writes version 2
    assert scores["ada"]["percent"] == scores["dan"]["percent"] == "100.0"
    skipped = {(p["line"], p["student"]): p["reason"] for p in problems if p["action"] == "row not graded"}
    assert skipped == {
        ("3", "bob"): "version 4 is not in the key (versions 1, 2, 3)",
        ("4", "cy"): "no version",
        ("6", ""): "no student name or id",
        ("7", "eve"): "version 'two' is not a version number",
    }
    assert all(p["file"] == "responses.csv" for p in problems)
    assert "4 row(s) not graded" in err and "problems.csv" in err


def test_a_student_on_two_rows_is_reported_never_merged(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good, wrong = right_answers(rendered, 1), {"volume": "1", "pick": "A", "both": "B", "fact": "false"}
    content = (
        row("student", "version", *IDS)
        + row("ada", "1", *(good[q] for q in IDS))
        + row("bob", "1", *(good[q] for q in IDS))
        + row("ada", "1", *(wrong[q] for q in IDS))
    )
    code, scores, problems, _ = grade(rendered, tmp_path, content, capsys)
    assert code == 0 and sorted(scores) == ["bob"]
    duplicates = [p for p in problems if "on 2 rows" in p["reason"]]
    assert [(p["line"], p["student"]) for p in duplicates] == [("2", "ada"), ("4", "ada")]
    assert all("lines 2, 4" in p["reason"] and "none of them is graded" in p["reason"] for p in duplicates)


def test_an_lms_export_is_read_as_it_comes(rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A BOM, `;` between cells, a capitalized header in another order, columns of its own."""
    good = right_answers(rendered, 3)
    header = row("Timestamp", "Email address", "Version", "STUDENT", "Pick", "Both", "Volume", "Fact", delimiter=";")
    line = row(
        "2026-05-04 10:00",
        "ada@example.org",
        "v3",
        "ada",
        good["pick"],
        good["both"].replace(";", ", "),
        good["volume"].replace(".", ","),
        "TRUE",
        delimiter=";",
    )
    code, scores, problems, _ = grade(rendered, tmp_path, ("\ufeff" + header + line).encode("utf-8"), capsys)
    assert code == 0 and scores["ada"]["percent"] == "100.0", scores
    (ignored,) = [p for p in problems if p["action"] == "column ignored"]
    assert ignored["line"] == "1" and "timestamp, email address" in ignored["reason"]


def test_a_legacy_encoding_is_read_with_a_note(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = right_answers(rendered, 1)
    content = (row("student", "version", *IDS) + row("José", "1", *(good[q] for q in IDS))).encode("cp1252")
    code, scores, problems, _ = grade(rendered, tmp_path, content, capsys)
    assert code == 0 and scores["José"]["percent"] == "100.0"
    assert any("not UTF-8" in p["reason"] for p in problems if p["action"] == "note")


def test_an_unquoted_delimiter_in_a_cell_is_a_reported_row(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = right_answers(rendered, 1)
    content = (
        row("student", "version", "both", "pick")
        + row("ada", "1", "A,C", good["pick"])
        + row("bob", "1", '"A,C"', good["pick"])
    )
    code, scores, problems, _ = grade(rendered, tmp_path, content, capsys)
    assert sorted(scores) == ["bob"]
    (problem,) = [p for p in problems if p["action"] == "row not graded"]
    assert problem["line"] == "2" and "must be quoted" in problem["reason"]


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("{exact} MB", True),
        ("{exact}MB", True),
        ("{comma}", True),
        ("{comma} mb", True),
        ("{exact} GB", False),
    ],
)
def test_numbers_with_the_unit_or_a_decimal_comma_are_read(rendered: Path, answer: str, right: bool) -> None:
    entry = key(rendered, 1)["volume"]
    exact = entry["written"]
    text = answer.format(exact=exact, comma=exact.replace(".", ","))
    outcome = mark_question(entry, text)
    assert outcome.fraction == (1 if right else 0), (text, outcome)
    if not right:
        assert outcome.unreadable and "is not a number in MB" in outcome.feedback


def test_112_mb_and_4_comma_0() -> None:
    assert mark_question({"type": "numeric", "value": 112.0, "tolerance": 1.0, "unit": "MB"}, "112 MB").fraction == 1
    assert mark_question({"type": "numeric", "value": 4.0, "tolerance": 0.01, "unit": ""}, "4,0").fraction == 1


@pytest.mark.parametrize("text", ["(B)", "B.", "b)", "[B]", "Option B", " b "])
def test_bracketed_letters_are_read(text: str) -> None:
    entry = {
        "type": "single",
        "answer": ["B"],
        "explanation": "",
        "options": [
            {"letter": letter, "text": letter, "correct": letter == "B", "explanation": ""} for letter in "ABC"
        ],
    }
    assert mark_question(entry, text).fraction == 1


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("8_6", "'8_6' is not a number"),
        ("1,250", "is ambiguous (1.250 or 1250)"),
        ("eighty-six", "is not a number"),
        ("inf", "is not a number"),
    ],
)
def test_unreadable_numbers_score_zero_with_the_reason(text: str, reason: str) -> None:
    entry = {"type": "numeric", "value": 86.0, "tolerance": 1.0, "unit": "", "explanation": ""}
    outcome = mark_question(entry, text)
    assert outcome.fraction == 0 and reason in outcome.unreadable and reason in outcome.feedback
    assert outcome.feedback.startswith("Could not read the answer")


def test_unreadable_answers_are_listed_in_the_problems(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = right_answers(rendered, 1)
    content = row("student", "version", *IDS) + row("ada", "1", "8_6", "Q", good["both"], "maybe")
    code, scores, problems, err = grade(rendered, tmp_path, content, capsys)
    assert code == 0 and "3 answer(s) unreadable" in err
    reasons = sorted(p["reason"] for p in problems if p["action"] == "answer scored 0")
    assert reasons == [
        "question fact: 'maybe' is not a choice of letters",
        "question pick: Q is not an option (options A..C)",
        "question volume: '8_6' is not a number",
    ]
    feedback = {r["question"]: r["feedback"] for r in csv.DictReader((tmp_path / "grades" / "feedback.csv").open())}
    assert "'8_6' is not a number" in feedback["volume"]


def test_render_refuses_a_used_folder_unless_forced(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bank(tmp_path / "bank", BANK)
    out = tmp_path / "out"
    render = ["quiz", "render", "--bank", str(tmp_path / "bank"), "--pool", "all", "--out", str(out)]
    assert main([*render, "--versions", "5", "--seed", "1"]) == 0
    (out / "notes.txt").write_text("mine")
    capsys.readouterr()
    assert main([*render, "--versions", "2", "--seed", "2"]) == 1
    assert "is not empty" in capsys.readouterr().err and (out / "v05.key.json").exists()
    assert main([*render, "--versions", "2", "--seed", "2", "--force"]) == 0
    assert sorted(p.name for p in out.glob("*.key.json")) == ["v01.key.json", "v02.key.json"]
    assert (out / "notes.txt").read_text() == "mine", "--force removes render outputs only"
    assert all(json.loads(p.read_text())["seed"] == 2 for p in out.glob("*.key.json"))


def test_grade_refuses_keys_of_different_renders(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bank(tmp_path / "bank", BANK)
    for seed, versions in ((1, 2), (2, 3)):
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
                    str(versions),
                    "--seed",
                    str(seed),
                    "--out",
                    str(tmp_path / f"seed{seed}"),
                ]
            )
            == 0
        )
    shutil.copy(tmp_path / "seed2" / "v03.key.json", tmp_path / "seed1" / "v03.key.json")
    (tmp_path / "r.csv").write_text("student,version\nada,1\n")
    capsys.readouterr()
    assert (
        main(
            [
                "quiz",
                "grade",
                "--key",
                str(tmp_path / "seed1"),
                "--responses",
                str(tmp_path / "r.csv"),
                "--out",
                str(tmp_path / "g"),
            ]
        )
        == 1
    )
    err = capsys.readouterr().err
    assert (
        "come from different renders" in err
        and "seed 1 for version(s) 1, 2" in err
        and "seed 2 for version(s) 3" in err
    )
