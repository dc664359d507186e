"""`grader quiz practice`: the practice questions asked in the terminal, each answer marked at once.

The point of a practice quiz is the feedback, so each answer is scored as `grader quiz grade` would
score it (`mark_question`, on the same key entry `render` writes) and the explanation follows right
away. Answers are read one line each, so a file or a pipe can answer too; the end of the input ends
the quiz with the score so far.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from grader.quiz.bank import Question
from grader.quiz.grade import mark_question
from grader.quiz.key import key_data
from grader.quiz.versions import Item, draw

TYPE_PROMPTS = {
    "single": "one letter",
    "multiple": "every right letter, e.g. A;C",
    "truefalse": "A (true) or B (false)",
    "numeric": "a number",
}


# The Markdown a bank writes (grader/quiz/markdown.py renders it for sheets), said plainly in a terminal:
# **bold** and *italic* lose their markers, `code` keeps its backticks, fenced blocks are indented.
_EMPHASIS = [re.compile(r"\*\*(.+?)\*\*"), re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")]
_CODE_SPAN = re.compile(r"(`[^`]+`)")


def plain(text: str) -> str:
    """`text` as a terminal shows it: emphasis markers dropped outside code, fences turned into an indent."""
    lines, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        if fenced:
            lines.append(f"    {line}")
            continue
        parts = _CODE_SPAN.split(line)
        for index in range(0, len(parts), 2):  # the even parts lie outside code spans
            for pattern in _EMPHASIS:
                parts[index] = pattern.sub(r"\1", parts[index])
        lines.append("".join(parts))
    return "\n".join(lines)


@dataclass(frozen=True)
class Score:
    asked: int = 0
    earned: float = 0.0


def about_exercise(question: Question, exercise: str) -> bool:
    """True when `question` is tagged with `exercise`, given as an id (ex03_train_ddp), its prefix (ex03),
    its number (3) or its name (train_ddp)."""
    tag = question.exercise
    prefix, _, name = tag.partition("_")
    if exercise.isdigit():
        return prefix == f"ex{int(exercise):02d}"
    return exercise in (tag, prefix, name) or exercise in question.topics


def new_seed() -> int:
    """A fresh draw each time by default: practice again, and the options come in another order."""
    return random.SystemRandom().randrange(2**31)


def ask_all(
    questions: Sequence[Question], seed: int, read: Callable[[str], str | None], write: Callable[[str], None]
) -> Score:
    """Ask every question of one drawn version; `read(prompt)` gives a line, or None at the end of input."""
    version = draw(questions, seed, 1, "Practice quiz", "practice")
    entries = {entry["number"]: entry for entry in key_data(version)["questions"]}
    score = Score()
    total = len(version.items)
    for item in version.items:
        write(_question_text(item, total))
        outcome = None
        while outcome is None:
            answer = read(f"your answer ({TYPE_PROMPTS.get(item.question.type, 'letters')}): ")
            if answer is None:
                write(_summary(score, stopped=True))
                return score
            outcome = mark_question(entries[item.number], answer)
            if outcome.unreadable and answer.strip():
                write(f"  could not read {answer.strip()!r}: {outcome.unreadable}; try again")
                outcome = None
        write(_feedback(entries[item.number], outcome.feedback))
        score = Score(score.asked + 1, score.earned + outcome.fraction)
    write(_summary(score, stopped=False))
    return score


def _question_text(item: Item, total: int) -> str:
    lines = [f"\n{item.number}/{total}  [{item.question.id}, {item.question.exercise}]", plain(item.text.strip())]
    lines += [f"  {choice.letter}. {plain(choice.text)}" for choice in item.choices]
    return "\n".join(lines)


def _feedback(entry: dict[str, Any], feedback: str) -> str:
    """The marking's feedback, and the question's explanation where the marking left it out."""
    general = entry.get("explanation", "").strip()
    lines = [f"  {plain(feedback)}"]
    if general and general not in feedback:
        lines.append(f"  Explanation: {plain(general)}")
    return "\n".join(lines)


def _summary(score: Score, stopped: bool) -> str:
    earned = f"{score.earned:g}"
    ending = " (input ended)" if stopped else ""
    return f"\n{earned}/{score.asked} right{ending}"
