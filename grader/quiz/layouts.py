"""Which responses file this is, from its header: the grader's own (`student`, `version`, a column per
question id), Moodle's Responses report, or Canvas's Student Analysis report, each read as it comes.

The LMS reports hold no question ids. Their answer columns are numbered in the quiz's order, which is
the version's order when the quiz was imported from this version's file and left in that order: Moodle
names them `Response 1`, `Response 2`... (its `quiz_responses` report), Canvas writes one column
`<its question id>: <question text>` per question followed by a column headed with the points possible,
then `n correct`, `n incorrect`, `score` (Quizzes::QuizStatistics::StudentAnalysis#to_csv). An answer is
written as the text of the option chosen, not its letter: Moodle joins several with `; `, Canvas with
`,` (escaping a comma inside a text as `\\,`), and Moodle writes `-` for no answer. Neither holds a
version: one LMS quiz is one version, said with `--version`. The header names are English, as the LMS
writes them in English.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

GRADER, MOODLE, CANVAS = "grader", "Moodle responses report", "Canvas student analysis"
MOODLE_STUDENT = ("id number", "username", "email address")  # the identity fields a Moodle site may show
CANVAS_STUDENT = ("sis_id", "id")  # the SIS id where the course has one, Canvas's user id otherwise
_MOODLE_ANSWER = re.compile(r"response (\d+)")
_CANVAS_QUESTION = re.compile(r"(\d+): .*", re.S)


class LayoutError(Exception):
    """The header is none of the layouts, or lacks what its layout needs."""


@dataclass(frozen=True)
class Layout:
    name: str
    student: tuple[str, ...]  # columns naming the student, in order of preference: a row's first non-empty one
    version: str | None = None  # the column holding each row's version; None: the whole file is one version
    answers: dict[int, str] = field(default_factory=dict)  # question number -> its column (LMS reports)
    state: str | None = None  # Moodle's attempt state: only a finished attempt is graded
    points: dict[int, float] = field(default_factory=dict)  # question number -> the points the LMS quiz gives
    blank: frozenset[str] = frozenset()  # cells that mean "no answer"

    @property
    def by_text(self) -> bool:
        """Whether a choice is written as its option's text (the LMS reports) rather than its letter."""
        return bool(self.answers)

    def columns(self) -> set[str]:
        """The columns whose cells grading reads."""
        named = [*self.student, self.version, self.state, *self.answers.values()]
        return {name for name in named if name is not None}


def detect(header: list[str], student_column: str | None = None) -> Layout:
    """The layout of a header (names stripped and lower-cased); `student_column` names the student's column
    where the default one will not do."""
    wanted = student_column.strip().lower() if student_column else None
    if wanted is not None and wanted not in header:
        raise LayoutError(f"no column {student_column!r} in the header (for --student-column)")
    if "student" in header and "version" in header or not _is_lms(header):
        return Layout(GRADER, (wanted or "student",), "version" if "version" in header else None)
    if any(_MOODLE_ANSWER.fullmatch(name) for name in header):
        answers = {int(m[1]): name for name in header if (m := _MOODLE_ANSWER.fullmatch(name))}
        state = next((name for name in ("state", "status") if name in header), None)
        return Layout(
            MOODLE, _student(header, wanted, MOODLE_STUDENT, MOODLE), None, answers, state, blank=frozenset({"-"})
        )
    questions = [index for index, name in enumerate(header) if _CANVAS_QUESTION.fullmatch(name)]
    answers = {number: header[index] for number, index in enumerate(questions, 1)}
    points = {number: _points(header, index + 1) for number, index in enumerate(questions, 1)}
    known = {n: p for n, p in points.items() if p is not None}
    return Layout(CANVAS, _student(header, wanted, CANVAS_STUDENT, CANVAS), None, answers, points=known)


def _is_lms(header: list[str]) -> bool:
    moodle = any(_MOODLE_ANSWER.fullmatch(name) for name in header)
    canvas = {"n correct", "n incorrect"} <= set(header) and any(_CANVAS_QUESTION.fullmatch(n) for n in header)
    return moodle or canvas


def _student(header: list[str], wanted: str | None, candidates: tuple[str, ...], layout: str) -> tuple[str, ...]:
    if wanted is not None:
        return (wanted,)
    found = tuple(name for name in candidates if name in header)
    if not found:
        raise LayoutError(
            f"a {layout} with no column that identifies a student ({', '.join(candidates)}): "
            "name one with --student-column (names are not unique)"
        )
    return found


def _points(header: list[str], index: int) -> float | None:
    try:
        return float(header[index])
    except (IndexError, ValueError):
        return None
