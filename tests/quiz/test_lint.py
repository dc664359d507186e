"""`grader quiz lint` finds the cues that let a test-wise student score without knowing: keys that are
the longest (or shortest) option, right sets that are the longest options, options that point at
other options, and true/false keys that lean one way."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.lint import LengthMeasure, measure_lengths, visible_length

from .support import COURSE_BANK, course_bank, course_questions, filler, write_bank


def single(qid: str, key: str, distractors: tuple[str, ...], pool: str = "exam") -> str:
    options = "\n".join(f'[[questions.options]]\ntext = "{text}"\nexplanation = "why"' for text in (key, *distractors))
    return f'''
[[questions]]
id = "{qid}"
type = "single"
pool = "{pool}"
text = "Question {qid}?"
answer = "A"
tags = {{ objective = "x", exercise = "general" }}
{options}
'''


def multiple(qid: str, right: tuple[str, ...], wrong: tuple[str, ...]) -> str:
    options = "\n".join(f'[[questions.options]]\ntext = "{text}"\nexplanation = "why"' for text in (*right, *wrong))
    letters = ", ".join(f'"{chr(65 + i)}"' for i in range(len(right)))
    return f'''
[[questions]]
id = "{qid}"
type = "multiple"
pool = "practice"
text = "Question {qid}?"
answer = [{letters}]
tags = {{ objective = "x", exercise = "general" }}
{options}
'''


LONG_KEY = ("a key that is clearly the longest option of all", ("short one", "short two", "short three"))
SHORT_KEY = ("key", ("a longer distractor", "another longer one", "a third long one"))
MIDDLE_KEY = ("a middling key", ("tiny", "a distractor that runs on for longer", "medium sized one"))


def lint(tmp_path: Path, body: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    write_bank(tmp_path / "bank", body)
    code = main(["quiz", "lint", "--bank", str(tmp_path / "bank")])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_the_course_banks_pass_and_report_their_measures(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["quiz", "lint", "--bank", str(COURSE_BANK)]) == 0
    out = capsys.readouterr().out
    for file in course_bank().files:
        assert f"{file.name}: single choice: key longest" in out
    assert "no problems" in out


def test_keys_that_are_the_longest_option_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = "".join(single(f"q{i}", *LONG_KEY) for i in range(2)) + single("q2", *MIDDLE_KEY)
    body += single("q3", *MIDDLE_KEY, pool="practice")
    code, _, err = lint(tmp_path, body, capsys)
    assert code == 1
    assert (
        "the key is strictly the longest option in 2/4 (50%) of the single-choice questions (limit 35%): q0, q1" in err
    )


def test_keys_that_are_the_shortest_option_fail_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = "".join(single(f"q{i}", *SHORT_KEY) for i in range(2)) + single("q2", *MIDDLE_KEY, pool="practice")
    code, _, err = lint(tmp_path, body, capsys)
    assert code == 1 and "strictly the shortest option in 2/3 (67%)" in err


def unrelated(qid: str, key: int, distractors: tuple[int, ...], pool: str = "exam") -> str:
    """A question of the given option lengths whose words no other question shares."""
    options = tuple(filler(n, f"{qid}:{i}") for i, n in enumerate((key, *distractors)))
    return single(qid, options[0], options[1:], pool).replace(f"Question {qid}?", filler(40, qid))


def test_a_bank_at_the_limit_passes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = unrelated("q0", 40, (30, 32, 34)) + "".join(unrelated(f"q{i}", 30, (20, 40, 34)) for i in range(1, 3))
    body += unrelated("q3", 30, (20, 40, 34), pool="practice")
    code, out, err = lint(tmp_path, body, capsys)
    assert code == 0, err
    assert "key longest 1/4 (25%), shortest 0/4 (0%)" in out


def test_right_sets_that_are_the_longest_options_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = multiple("m0", ("the first long right option", "the second long right option"), ("no", "nope"))
    body += single("s0", *MIDDLE_KEY)
    code, _, err = lint(tmp_path, body, capsys)
    assert code == 1 and "the right options are exactly the longest ones in 1/1 (100%)" in err and "(limit 65%)" in err


def test_measure_counts_by_visible_length() -> None:
    assert visible_length("`gloo` **bold**") == len("gloo bold")
    measure = measure_lengths(course_questions(), Path("all"))
    assert isinstance(measure, LengthMeasure) and len(measure.singles) > 40
    assert len(measure.longest) / len(measure.singles) <= 0.35
    assert len(measure.shortest) / len(measure.singles) <= 0.35


@pytest.mark.parametrize(
    "text", ["All of the above", "None of these", "Both A and C", "Neither of the above", "Option B, but only on Linux"]
)
def test_options_that_point_at_other_options_fail(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str
) -> None:
    body = single("q0", "a middling key", ("tiny", text, "medium sized one")) + single(
        "q1", *MIDDLE_KEY, pool="practice"
    )
    code, _, err = lint(tmp_path, body, capsys)
    assert code == 1 and "points at other options" in err and "question 'q0': field 'options[3].text'" in err


@pytest.mark.parametrize("text", ["It answers a question", "all ranks of the group", "both ranks wait"])
def test_ordinary_wording_is_not_a_pointer(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> None:
    body = single("q0", "a middling key", ("tiny", text + " and more words", "medium sized")) + single(
        "q1", *MIDDLE_KEY, pool="practice"
    )
    code, _, err = lint(tmp_path, body, capsys)
    assert code == 0, err


def test_true_false_keys_that_lean_one_way_fail(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    statements = "".join(
        f'''
[[questions]]
id = "tf{i}"
type = "truefalse"
pool = "{"practice" if i == 0 else "exam"}"
text = "Statement {i}."
answer = {"true" if i == 0 else "false"}
explanation = "because"
tags = {{ objective = "x", exercise = "general" }}
'''
        for i in range(5)
    )
    code, _, err = lint(tmp_path, statements, capsys)
    assert code == 1 and "80% of the 5 true/false statements are false (limit 70%)" in err


def test_picking_the_longest_option_scores_no_better_than_chance() -> None:
    """The strategy the issue measured on the old banks (40 of 43 keys were the longest option),
    recomputed here from the bank files without the lint code: per bank file, the longest option is
    the key in at most 35% of single-choice questions, the k longest options are the right set in at
    most 1/k + 0.15 of multiple-choice questions, and over all banks "pick the longest" does no better
    than picking at random among four."""
    by_file: dict[str, list] = {}
    for question in course_questions():
        by_file.setdefault(question.source.name, []).append(question)
    hits = total = 0
    for name, questions in by_file.items():
        singles = [q for q in questions if q.type == "single"]
        longest = [
            q
            for q in singles
            if max(len(o.text) for o in q.options if not o.correct) < len(next(o for o in q.options if o.correct).text)
        ]
        assert len(longest) <= 0.35 * len(singles), (name, [q.id for q in longest])
        hits, total = hits + len(longest), total + len(singles)
        multiples = [q for q in questions if q.type == "multiple"]
        sets = [
            q
            for q in multiples
            if min(len(o.text) for o in q.options if o.correct) > max(len(o.text) for o in q.options if not o.correct)
        ]
        chance = sum(1 / sum(o.correct for o in q.options) for q in multiples) / len(multiples) if multiples else 1
        assert len(sets) <= (chance + 0.15) * len(multiples), (name, [q.id for q in sets])
    assert hits / total <= 0.25, f"picking the longest option scores {hits}/{total}"
