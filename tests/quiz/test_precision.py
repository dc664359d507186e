"""Numeric questions state the precision asked, everywhere, and keys print exact values that their
own tolerance accepts."""

from __future__ import annotations

import io
import json
import re
import zipfile
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.bank import Question
from grader.quiz.grade import mark_question
from grader.quiz.key import answer_text, key_data
from grader.quiz.precision import Precision, instruction
from grader.quiz.versions import draw

from .support import COURSE_BANK, course_questions, write_bank

NUMERIC = [q for q in course_questions() if q.type == "numeric"]
NUMBER = re.compile(r"-?\d+(?:\.\d+)?(?:e[+-]?\d+)?")


def test_every_numeric_question_states_its_precision_in_every_format(tmp_path: Path) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "quiz",
                "render",
                "--bank",
                str(COURSE_BANK),
                "--pool",
                "all",
                "--format",
                "all",
                "--tags",
                ",".join(sorted({q.exercise for q in NUMERIC})),
                "--seed",
                "4",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    key = json.loads((out / "v01.key.json").read_text())
    numeric = [q for q in key["questions"] if q["type"] == "numeric"]
    assert len(numeric) == len(NUMERIC)
    questions = {q.id: q for q in NUMERIC}
    archive = zipfile.ZipFile(io.BytesIO((out / "v01.qti.zip").read_bytes()))
    qti = "".join(archive.read(name).decode() for name in archive.namelist())
    texts = {
        "md": (out / "quiz-v01.md").read_text(),
        "html": (out / "quiz-v01.html").read_text(),
        "ipynb": json.dumps(json.loads((out / "quiz-v01.ipynb").read_text())["cells"], ensure_ascii=False),
        "gift": (out / "quiz-v01.gift.txt").read_text(),
        "moodle-xml": (out / "quiz-v01.moodle.xml").read_text(),
        "moodle-pools": (out / "quiz-pools.moodle.xml").read_text(),
        "qti": qti,
    }
    for entry in numeric:
        question = questions[entry["id"]]
        assert question.precision is not None
        sentence = instruction(question.precision, question.unit)
        assert question.precision.phrase in sentence
        for name, text in texts.items():
            assert sentence in text, (name, entry["id"], sentence)


@pytest.mark.parametrize("question", NUMERIC, ids=lambda q: q.id)
def test_keys_print_exact_values_inside_their_own_tolerance(question: Question) -> None:
    for number in range(1, 61):
        version = draw([question], seed=23, number=number)
        (item,) = version.items
        assert item.value is not None and question.precision is not None
        printed = answer_text(item)
        exact, *rest = NUMBER.findall(printed)
        assert abs(float(exact) - item.value) <= 1e-9 * max(1.0, abs(item.value)), printed
        if item.value == int(item.value) and abs(item.value) < 1e15:
            assert exact == str(int(item.value)), printed
        assert "e+" not in printed, printed
        written = question.precision.rounded(item.value)
        assert abs(float(written) - item.value) <= item.tolerance, (written, item.value, item.tolerance)
        (entry,) = key_data(version)["questions"]
        assert entry["written"] == written
        assert mark_question(entry, written).fraction == 1, (written, entry)
        assert mark_question(entry, exact).fraction == 1, (exact, entry)


def test_an_exact_key_prints_every_digit() -> None:
    (question,) = [q for q in course_questions() if q.id == "fsdp-shard-elements"]
    for number in range(1, 40):
        (item,) = draw([question], seed=1, number=number).items
        if item.value and item.value >= 1e6:
            assert answer_text(item) == f"{int(item.value)} elements (exact)"
            return
    pytest.fail("no draw above a million elements")


@pytest.mark.parametrize(
    ("precision", "value", "written", "unit"),
    [
        (Precision("sig", 3), 17155072.0, "17200000", 100000.0),
        (Precision("sig", 3), 0.00005, "0.0000500", 1e-7),
        (Precision("sig", 3), 9.996, "10.0", 0.1),
        (Precision("sig", 2), 2.5666, "2.6", 0.1),
        (Precision("decimals", 1), 3.0303, "3.0", 0.1),
        (Precision("exact"), 1250.0000000000002, "1250", 0.0),
    ],
)
def test_rounding_and_unit_of_the_last_digit(precision: Precision, value: float, written: str, unit: float) -> None:
    assert precision.rounded(value) == written
    assert precision.unit(value) == pytest.approx(unit)


def test_lint_refuses_an_exact_answer_that_is_not_whole(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = """
    [[questions]]
    id = "half"
    type = "numeric"
    pool = "exam"
    text = "Half of {W}?"
    answer = "W / 2"
    precision = "exact"
    tags = { objective = "x", exercise = "general" }
    parameters = { W = { values = [2, 3] } }
    """
    write_bank(tmp_path / "bank", body)
    assert main(["quiz", "lint", "--bank", str(tmp_path / "bank")]) == 1
    assert "an exact whole number is asked, but the answer is 1.5" in capsys.readouterr().err
