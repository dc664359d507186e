"""Practice and exam pools: every question states its pool, lint keeps them apart, render draws from
one of them, and `--format all` writes the Canvas packages and the Moodle variant pools too."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.bank import POOLS

from .support import COURSE_BANK, SINGLE, course_questions, write_bank


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["quiz", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_every_course_question_has_a_pool_and_both_pools_are_used() -> None:
    pools = {q.pool for q in course_questions()}
    assert pools == set(POOLS)
    practice = [q for q in course_questions() if q.pool == "practice"]
    exam = [q for q in course_questions() if q.pool == "exam"]
    assert len(exam) >= 40, "a 40-question exam needs at least 40 exam questions"
    assert len(practice) >= 20
    assert not {q.text for q in practice} & {q.text for q in exam}


@pytest.mark.parametrize("pool", POOLS)
def test_render_draws_from_the_pool_asked_for(tmp_path: Path, capsys: pytest.CaptureFixture[str], pool: str) -> None:
    code, out, _ = run(
        capsys,
        "render",
        "--bank",
        str(COURSE_BANK),
        "--pool",
        pool,
        "--versions",
        "2",
        "--seed",
        "3",
        "--out",
        str(tmp_path / "out"),
    )
    assert code == 0 and f"from the {pool} pool" in out
    expected = {q.id for q in course_questions() if q.pool == pool}
    for number in (1, 2):
        key = json.loads((tmp_path / "out" / f"v0{number}.key.json").read_text())
        assert key["pool"] == pool and {q["id"] for q in key["questions"]} == expected


def test_render_defaults_to_the_exam_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "render", "--bank", str(COURSE_BANK), "--out", str(tmp_path / "out"))
    key = json.loads((tmp_path / "out" / "v01.key.json").read_text())
    assert code == 0 and {q["id"] for q in key["questions"]} == {q.id for q in course_questions() if q.pool == "exam"}


def test_list_filters_by_pool(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--bank", str(COURSE_BANK), "--pool", "practice", "--json")
    rows = json.loads(out)
    assert code == 0 and rows and {r["pool"] for r in rows} == {"practice"}


def test_lint_fails_on_an_empty_pool(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bank(tmp_path / "bank", SINGLE)
    code, _, err = run(capsys, "lint", "--bank", str(tmp_path / "bank"))
    assert code == 1 and "the exam pool is empty" in err and "the practice pool is empty" not in err


def test_lint_fails_on_a_text_in_both_pools(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    twin = SINGLE.replace('id = "q-single"', 'id = "q-twin"').replace('pool = "practice"', 'pool = "exam"')
    twin = twin.replace('text = "Which one?"', 'text = "  which   ONE?"')
    write_bank(tmp_path / "bank", SINGLE + twin)
    code, _, err = run(capsys, "lint", "--bank", str(tmp_path / "bank"))
    assert code == 1 and "question 'q-twin': field 'text': the same text is practice question 'q-single'" in err


def test_format_all_writes_the_qti_packages_and_the_variant_pools(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(
        capsys,
        "render",
        "--bank",
        str(COURSE_BANK),
        "--format",
        "all",
        "--versions",
        "2",
        "--count",
        "6",
        "--seed",
        "1",
        "--out",
        str(tmp_path / "out"),
    )
    names = sorted(p.name for p in (tmp_path / "out").iterdir())
    assert code == 0 and "qti" in out and "moodle-pools" in out
    assert {"v01.qti.zip", "v02.qti.zip", "quiz-pools.moodle.xml"} <= set(names)
    assert len(names) == 2 * 8 + 1
