"""`grader quiz practice`: each answer marked at once, numbers within the question's tolerance."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

from grader.quiz.bank import Question, load_banks
from grader.quiz.key import key_data
from grader.quiz.practice import about_exercise, ask_all, plain
from grader.quiz.versions import draw

REPO = Path(__file__).resolve().parents[2]


def _practice() -> list[Question]:
    return [q for q in load_banks(REPO / "quizzes").questions if q.pool == "practice"]


def _session(questions: list[Question], seed: int, answers: list[str]) -> tuple[str, float, int]:
    lines: Iterator[str] = iter(answers)
    written: list[str] = []
    score = ask_all(questions, seed, lambda prompt: next(lines, None), written.append)
    return "\n".join(written), score.earned, score.asked


def test_a_numeric_answer_is_right_within_the_tolerance_and_explained() -> None:
    question = next(q for q in _practice() if q.type == "numeric" and q.parametric)
    (entry,) = key_data(draw([question], 5, 1, "Practice quiz", "practice"))["questions"]
    near = entry["value"] + 0.9 * entry["tolerance"]
    out, earned, asked = _session([question], 5, [f"{near!r}"])
    assert (earned, asked) == (1.0, 1) and "Right." in out
    assert entry["explanation"] and entry["explanation"] in out
    far = entry["value"] + 10 * entry["tolerance"] + 1
    out, earned, _ = _session([question], 5, [f"{far!r}"])
    assert earned == 0 and "Wrong" in out and "Expected" in out and entry["explanation"] in out


def test_the_end_of_the_input_ends_the_quiz_with_the_score_so_far() -> None:
    questions = [q for q in _practice() if not q.parametric][:3]
    out, earned, asked = _session(questions, 0, [])
    assert (earned, asked) == (0, 0) and "0/0 right (input ended)" in out


def test_an_exercise_is_named_by_id_prefix_number_or_name() -> None:
    question = next(q for q in _practice() if q.exercise == "ex03_train_ddp")
    assert all(about_exercise(question, name) for name in ("ex03_train_ddp", "ex03", "3", "train_ddp"))
    assert not about_exercise(question, "ex01") and not about_exercise(question, "1")


def test_markdown_is_said_plainly_in_the_terminal() -> None:
    assert plain("with **ZeRO stage 3** on `N` GPUs, *Give your answer in GB*") == (
        "with ZeRO stage 3 on `N` GPUs, Give your answer in GB"
    )
    assert (
        plain("keep `a*b*c` and `**x**` as code; 2 * 3 * 4 stays")
        == "keep `a*b*c` and `**x**` as code; 2 * 3 * 4 stays"
    )
    assert plain("see:\n```python\nx = 1\n```\ndone") == "see:\n    x = 1\ndone"


def test_no_emphasis_marker_reaches_the_terminal() -> None:
    """Every practice question's text, options and explanation, as the terminal quiz writes them."""
    practice = _practice()
    written: list[str] = []

    def answer(prompt: str) -> str:  # readable for every type, so that every question is asked
        return "1" if "a number" in prompt else "A"

    assert ask_all(practice, 7, answer, written.append).asked == len(practice)
    outside_code = re.sub(r"`[^`\n]+`", "", "\n".join(written))
    assert not re.search(r"\*\*\S|\S\*\*|(?<![\w*\s])\*(?=\w)", outside_code), outside_code[:2000]
