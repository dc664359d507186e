"""Grading a responses CSV: scores, per-question summary and feedback from the explanations."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.grade import mark_question

from .support import NUMERIC, SINGLE, write_bank

MULTIPLE = """
[[questions]]
id = "q-multi"
type = "multiple"
pool = "exam"
text = "Which are even?"
answer = ["A", "C"]
points = 2
tags = { objective = "parity", exercise = "general" }
options = [
  { text = "two", explanation = "2 is even" },
  { text = "three", explanation = "3 is odd" },
  { text = "four", explanation = "4 is even" },
  { text = "five", explanation = "5 is odd" },
]

[[questions]]
id = "q-tf"
type = "truefalse"
pool = "exam"
text = "Ranks start at 0."
answer = true
explanation = "They do."
tags = { objective = "ranks", exercise = "ex01_process_group" }
"""


def single(right: str = "B") -> dict:
    options = [
        {"letter": letter, "text": letter, "correct": letter == right, "explanation": f"why {letter}"}
        for letter in "ABC"
    ]
    return {"type": "single", "answer": [right], "options": options, "explanation": ""}


def test_single_choice_all_or_nothing() -> None:
    assert mark_question(single(), "b").fraction == 1
    outcome = mark_question(single(), "A")
    fraction, feedback = outcome.fraction, outcome.feedback
    assert fraction == 0 and "why A" in feedback and "Expected B" in feedback
    assert mark_question(single(), "A;B").fraction == 0
    assert mark_question(single(), "").feedback.startswith("No answer.")
    assert "Z is not an option" in mark_question(single(), "Z").feedback


def test_multiple_choice_partial_credit_and_penalty() -> None:
    entry = {
        "type": "multiple",
        "answer": ["A", "C"],
        "explanation": "",
        "options": [{"letter": x, "correct": x in "AC", "explanation": x} for x in "ABCD"],
    }
    assert mark_question(entry, "A;C").fraction == 1
    assert mark_question(entry, "c, a").fraction == 1
    assert mark_question(entry, "A").fraction == 0.5
    assert mark_question(entry, "A;B").fraction == 0
    assert mark_question(entry, "B;D").fraction == 0  # never below zero
    assert mark_question(entry, "ABC").fraction == 0.5


def test_numeric_within_tolerance() -> None:
    entry = {"type": "numeric", "value": 175.0, "tolerance": 1.75, "unit": "MB", "explanation": "2(W-1)/W M"}
    assert mark_question(entry, "175").fraction == 1
    assert mark_question(entry, "176.75").fraction == 1
    assert mark_question(entry, "173.2").fraction == 0
    outcome = mark_question(entry, "twelve")
    assert outcome.fraction == 0 and "not a number" in outcome.feedback and "Expected 175 MB" in outcome.feedback
    assert mark_question(entry, "nan").fraction == 0


@pytest.fixture()
def rendered(tmp_path: Path) -> Path:
    write_bank(tmp_path / "bank", SINGLE + NUMERIC + MULTIPLE)
    out = tmp_path / "out"
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
                "2",
                "--seed",
                "3",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    return out


def answers_from_key(key: dict, wrong: bool = False) -> dict[str, str]:
    row = {}
    for q in key["questions"]:
        if q["type"] == "numeric":
            row[q["id"]] = str(q["value"] * (2 if wrong else 1))
        else:
            letters = [o["letter"] for o in q["options"] if o["correct"] != wrong]
            row[q["id"]] = ";".join(letters[:1] if wrong else letters)
    return row


def test_grade_command_writes_scores_questions_and_feedback(rendered: Path, tmp_path: Path) -> None:
    keys = {n: json.loads((rendered / f"v0{n}.key.json").read_text()) for n in (1, 2)}
    responses = tmp_path / "responses.csv"
    ids = [q["id"] for q in keys[1]["questions"]]
    with responses.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, ["student", "version", *ids])
        writer.writeheader()
        writer.writerow({"student": "ada", "version": "1", **answers_from_key(keys[1])})
        writer.writerow({"student": "bob", "version": "v2", **answers_from_key(keys[2], wrong=True)})
        writer.writerow({"student": "cy", "version": "2"})
    out = tmp_path / "grades"
    assert main(["quiz", "grade", "--key", str(rendered), "--responses", str(responses), "--out", str(out)]) == 0
    scores = {row["student"]: row for row in csv.DictReader((out / "scores.csv").open())}
    assert scores["ada"]["score"] == scores["ada"]["max"] == "5"
    assert scores["ada"]["percent"] == "100.0"
    assert scores["bob"]["score"] == "0" and scores["cy"]["score"] == "0"
    assert scores["ada"]["q-multi"] == "2"
    summary = {row["question"]: row for row in csv.DictReader((out / "questions.csv").open())}
    assert summary["q-single"]["full_marks"] == "1" and summary["q-single"]["answered"] == "2"
    feedback = list(csv.DictReader((out / "feedback.csv").open()))
    assert len(feedback) == 3 * 4
    bob_tf = next(r for r in feedback if r["student"] == "bob" and r["question"] == "q-tf")
    assert bob_tf["feedback"].startswith("Wrong.") and "They do." in bob_tf["feedback"]
    ada_single = next(r for r in feedback if r["student"] == "ada" and r["question"] == "q-single")
    assert ada_single["feedback"] == "Right. " + ada_single["response"] + ": yes"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("name,version\nada,1\n", "missing column(s) student"),
        ("", "is empty"),
        ("student,version,student\nada,1,ada\n", "column(s) student appear more than once"),
    ],
)
def test_bad_responses_get_a_clear_message(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str, message: str
) -> None:
    responses = tmp_path / "responses.csv"
    responses.write_text(content)
    code = main(["quiz", "grade", "--key", str(rendered), "--responses", str(responses), "--out", str(tmp_path / "g")])
    assert code == 1
    assert message in capsys.readouterr().err


def test_missing_key_and_missing_responses(tmp_path: Path, rendered: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["quiz", "grade", "--key", str(tmp_path / "nokey"), "--responses", "x.csv", "--out", str(tmp_path)]) == 1
    )
    assert "answer key" in capsys.readouterr().err
    assert (
        main(
            [
                "quiz",
                "grade",
                "--key",
                str(rendered / "v01.key.json"),
                "--responses",
                str(tmp_path / "none.csv"),
                "--out",
                str(tmp_path / "g"),
            ]
        )
        == 1
    )
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "fake.key.json").write_text("{}")
    assert (
        main(
            ["quiz", "grade", "--key", str(tmp_path / "fake.key.json"), "--responses", "x.csv", "--out", str(tmp_path)]
        )
        == 1
    )
    assert "not a quiz answer key" in capsys.readouterr().err
