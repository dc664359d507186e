"""Shared helpers for the quiz tests: the course's banks, and tiny banks written to tmp_path."""

from __future__ import annotations

import textwrap
from functools import lru_cache
from pathlib import Path

from grader.quiz.bank import Bank, Question, load_banks

COURSE_BANK = Path(__file__).resolve().parents[2] / "quizzes"


@lru_cache(maxsize=1)
def course_bank() -> Bank:
    return load_banks(COURSE_BANK)


def course_questions() -> list[Question]:
    return course_bank().questions


def write_bank(directory: Path, body: str, name: str = "bank.toml") -> Path:
    """Write a bank file (dedented) into `directory`, which is created if needed."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text(textwrap.dedent(body), encoding="utf-8")
    return path


SINGLE = '''
[[questions]]
id = "q-single"
type = "single"
text = "Which one?"
answer = "B"
tags = { objective = "pick one", exercise = "general" }
[[questions.options]]
text = "first"
explanation = "no"
[[questions.options]]
text = "second"
explanation = "yes"
[[questions.options]]
text = "third"
explanation = "no"
'''

NUMERIC = '''
[[questions]]
id = "q-numeric"
type = "numeric"
text = "Ring over {W} ranks, {M} MB?"
answer = "2 * (W - 1) / W * M"
tolerance = { rel = 0.01 }
tags = { objective = "ring volume", exercise = "ex08_ring_allreduce" }
[questions.parameters]
W = { values = [2, 4, 8] }
M = { min = 100, max = 300, step = 100 }
'''
