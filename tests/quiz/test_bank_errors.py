"""Every bank mistake is reported with file, question id, field and a suggested fix."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.paths import CourseNotFound
from grader.quiz import bank as bank_module
from grader.quiz.bank import BankNotFound, course_exercises, load_banks

from .support import NUMERIC, SINGLE, write_bank


def problems_for(tmp_path: Path, body: str) -> list[str]:
    write_bank(tmp_path / "bank", body)
    bank = load_banks(tmp_path / "bank")
    return [str(p) for p in bank.problems]


def test_valid_banks_have_no_problems(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", SINGLE + NUMERIC)
    bank = load_banks(tmp_path / "bank")
    assert bank.problems == []
    assert [q.id for q in bank.questions] == ["q-single", "q-numeric"]


@pytest.mark.parametrize(
    ("body", "question", "field", "message", "fix"),
    [
        (SINGLE.replace('text = "Which one?"\n', ""), "q-single", "text", "missing", 'add text = """'),
        (SINGLE.replace('answer = "B"\n', ""), "q-single", "answer", "missing or not letters", 'use answer = "B"'),
        (
            SINGLE.replace('type = "single"', 'type = "essay"'),
            "q-single",
            "type",
            "unknown type 'essay'",
            "use one of single, multiple, numeric, truefalse",
        ),
        (
            SINGLE.replace('answer = "B"', 'answer = "E"'),
            "q-single",
            "answer",
            "'E' is not among the options A, B, C",
            "use letters A..C",
        ),
        (
            NUMERIC.replace('"2 * (W - 1) / W * M"', '"2 * (N - 1) / N * M"'),
            "q-numeric",
            "answer",
            "formula uses 'N', which is not a parameter",
            "use a parameter (M, W) or define it",
        ),
        (
            NUMERIC.replace("{ rel = 0.01 }", "{ rel = -0.01 }"),
            "q-numeric",
            "tolerance",
            "negative tolerance",
            "non-negative",
        ),
        (
            NUMERIC.replace("precision = { sig = 3 }\n", ""),
            "q-numeric",
            "precision",
            "missing",
            'precision = "exact", { sig = 3 } or { decimals = 1 }',
        ),
        (
            NUMERIC.replace("precision = { sig = 3 }", "precision = { sig = 0 }"),
            "q-numeric",
            "precision",
            "sig = 0 is outside 1..12",
            "state what is asked",
        ),
        (
            NUMERIC.replace("precision = { sig = 3 }", 'precision = "3 digits"'),
            "q-numeric",
            "precision",
            "'3 digits' is not a precision",
            "state what is asked",
        ),
        (
            NUMERIC.replace("{ rel = 0.01 }", "0.01"),
            "q-numeric",
            "tolerance",
            "is not a table of abs and rel",
            "or leave it out",
        ),
        (SINGLE.replace('pool = "practice"\n', ""), "q-single", "pool", "missing", 'add pool = "practice"'),
        (
            SINGLE.replace('pool = "practice"', 'pool = "quiz"'),
            "q-single",
            "pool",
            "unknown pool 'quiz'",
            'or pool = "exam"',
        ),
        (
            NUMERIC.replace('"2 * (W - 1) / W * M"', '"__import__(W)"'),
            "q-numeric",
            "answer",
            "call of '__import__' is not allowed",
            "use numbers, parameter names",
        ),
        (
            SINGLE.replace('exercise = "general"', 'exercise = "ex99"'),
            "q-single",
            "tags.exercise",
            "unknown exercise 'ex99'",
            "use one of ex01_process_group",
        ),
        (
            SINGLE.replace('tags = { objective = "pick one", exercise = "general" }\n', ""),
            "q-single",
            "tags",
            "missing",
            "add tags = {",
        ),
        (
            NUMERIC.replace("Ring over {W} ranks", "Ring over some ranks"),
            "q-numeric",
            "text",
            "parameter 'W' never appears in the text",
            "write {W} where its value belongs",
        ),
        (
            SINGLE.replace('id = "q-single"', 'id = "q-single"\ncolour = "red"'),
            "q-single",
            "colour",
            "unknown field",
            "remove it",
        ),
        (
            SINGLE.replace('explanation = "yes"', ""),
            "q-single",
            "options[2].explanation",
            "missing",
            'add explanation = "why',
        ),
    ],
)
def test_error_names_file_question_field_and_fix(
    tmp_path: Path, body: str, question: str, field: str, message: str, fix: str
) -> None:
    problems = problems_for(tmp_path, body)
    assert len(problems) == 1, problems
    problem = problems[0]
    assert problem.startswith(str(tmp_path / "bank" / "bank.toml"))
    assert f"question {question!r}" in problem
    assert f"field {field!r}" in problem
    assert message in problem
    assert "(fix: " in problem and fix in problem


def test_missing_id_is_reported_by_position(tmp_path: Path) -> None:
    problems = problems_for(tmp_path, SINGLE.replace('id = "q-single"\n', ""))
    assert problems == [p for p in problems if "question '#1'" in p and "field 'id'" in p]
    assert problems


def test_toml_syntax_error_names_the_line(tmp_path: Path) -> None:
    problems = problems_for(tmp_path, SINGLE.replace('text = "Which one?"', 'text = "Which one?'))
    assert len(problems) == 1
    assert "bank.toml: TOML syntax error" in problems[0] and "line 6" in problems[0]
    assert "fix: correct the TOML" in problems[0]


def test_duplicate_ids_across_files(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", SINGLE, "a.toml")
    write_bank(tmp_path / "bank", SINGLE, "b.toml")
    bank = load_banks(tmp_path / "bank")
    assert [str(p) for p in bank.problems] == [
        f"{tmp_path / 'bank' / 'b.toml'}: question 'q-single': field 'id': id also used in "
        f"{tmp_path / 'bank' / 'a.toml'} (fix: give every question a unique id across all banks)"
    ]


def test_several_problems_are_all_reported(tmp_path: Path) -> None:
    body = SINGLE.replace('answer = "B"', 'answer = "Z"').replace('exercise = "general"', 'exercise = "nope"')
    problems = problems_for(tmp_path, body)
    assert {("'answer'" in p) for p in problems} == {True, False} and len(problems) == 2


def test_missing_or_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(BankNotFound, match="does not exist"):
        load_banks(tmp_path / "absent")
    (tmp_path / "empty").mkdir()
    with pytest.raises(BankNotFound, match="no \\*.toml question bank"):
        load_banks(tmp_path / "empty")


def test_tolerance_is_optional_when_the_precision_is_stated(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", NUMERIC.replace("tolerance = { rel = 0.01 }\n", ""))
    bank = load_banks(tmp_path / "bank")
    assert bank.problems == [] and bank.questions[0].tolerance_rel == 0


def test_float_ranges_are_tidy(tmp_path: Path) -> None:
    write_bank(tmp_path / "bank", NUMERIC.replace("{ values = [2, 4, 8] }", "{ min = 0.1, max = 0.5, step = 0.1 }"))
    (question,) = load_banks(tmp_path / "bank").questions
    assert question.parameters[0].values == (0.1, 0.2, 0.3, 0.4, 0.5)
    assert question.parameters[1].values == (100, 200, 300)


def test_exercise_tags_come_from_the_course_catalog(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A course with its own exercises tags its questions with those, not with this course's ids."""
    monkeypatch.delenv("GRADER_COURSE", raising=False)
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "catalog.toml").write_text(
        'format = 1\n[[exercise]]\nid = "exA_intro"\nnumber = 1\ntitle = "t"\nfile = "exA_intro.py"\n'
        'functions = ["f()"]\nchecks = "grader.checks.exA_intro"\n[[exercise.check]]\nname = "c"\n'
        'description = "d"\n'
    )
    write_bank(
        tmp_path / "quizzes", SINGLE.replace('exercise = "general"', 'exercise = "exA_intro"') + NUMERIC
    )  # tagged ex08_ring_allreduce, an exercise of this course but not of that one
    problems = [str(p) for p in load_banks(tmp_path / "quizzes").problems]
    assert len(problems) == 1 and "unknown exercise 'ex08_ring_allreduce'" in problems[0], problems
    assert "use one of exA_intro, general" in problems[0]
    (problem,) = load_banks(tmp_path / "quizzes", exercises=["ex08_ring_allreduce"]).problems
    assert problem.question == "q-single" and problem.field == "tags.exercise"


def test_without_a_course_any_exercise_tag_is_taken(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(bank_module, "course_root", lambda start: (_ for _ in ()).throw(CourseNotFound("none")))
    assert course_exercises(tmp_path) is None
    assert problems_for(tmp_path, SINGLE.replace('exercise = "general"', 'exercise = "exZ_own"')) == []
    assert "missing exercise" in problems_for(tmp_path, SINGLE.replace('exercise = "general"', 'exercise = ""'))[0]
