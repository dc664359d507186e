"""Grade a responses CSV against the answer keys written by `render`.

Responses: a header `student,version,<question id>,...` and one row per student. Choice answers
are the letters of that student's version ("B", "A;C"; case, spaces and "," or ";" between letters
do not matter), true/false answers a letter or true/false, numeric answers a number. An empty cell
is no answer. Scoring, the same rule the Moodle exports encode: single choice and true/false are
all or nothing; multiple choice earns 1/k of the points per right letter (k right letters) and
loses as much per wrong letter, never below 0; a number within the key's tolerance earns all.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FIXED_COLUMNS = ("student", "version")
TRUE_WORDS = {"true": "A", "t": "A", "false": "B", "f": "B"}


class ResponsesError(Exception):
    """The responses file cannot be graded as a whole (missing file, columns or versions)."""


@dataclass(frozen=True)
class Mark:
    student: str
    version: int
    question: str
    number: int
    response: str
    earned: float
    possible: float
    feedback: str


def letters(response: str) -> list[str]:
    """'a; c' -> ['A', 'C']; 'AC' -> ['A', 'C']."""
    return sorted(set(re.sub(r"[\s,;]", "", response.upper())))


def mark_question(entry: dict[str, Any], response: str) -> tuple[float, str]:
    """Points earned (fraction of the question's points) and the feedback to show the student."""
    response = response.strip()
    general = entry.get("explanation", "")
    if not response:
        return 0.0, _join("No answer.", _right_answer(entry), general)
    if entry["type"] == "numeric":
        try:
            given = float(response.replace("_", ""))
        except ValueError:
            return 0.0, _join(f"{response!r} is not a number.", _right_answer(entry), general)
        ok = math.isfinite(given) and abs(given - entry["value"]) <= entry["tolerance"] * (1 + 1e-12) + 1e-12
        verdict = "Right." if ok else f"Wrong: {given:g} is outside the tolerance."
        return (1.0 if ok else 0.0), _join(verdict, "" if ok else _right_answer(entry), general)
    if entry["type"] == "truefalse":
        response = TRUE_WORDS.get(response.lower(), response)
    picked = letters(response)
    options = {option["letter"]: option for option in entry["options"]}
    unknown = [letter for letter in picked if letter not in options]
    if unknown:
        return 0.0, _join(f"{', '.join(unknown)} is not an option.", _right_answer(entry), general)
    right = set(entry["answer"])
    if entry["type"] == "multiple":
        share = (len(right & set(picked)) - len(set(picked) - right)) / len(right)
        fraction = max(0.0, share)
    else:
        fraction = 1.0 if set(picked) == right and len(picked) == 1 else 0.0
    explanations = [f"{letter}: {options[letter]['explanation']}" for letter in picked]
    verdict = "Right." if fraction == 1 else "Partly right." if fraction > 0 else "Wrong."
    return fraction, _join(verdict, *explanations, "" if fraction == 1 else _right_answer(entry),
                           general if entry["type"] == "truefalse" else "")


def _right_answer(entry: dict[str, Any]) -> str:
    if entry["type"] == "numeric":
        unit = f" {entry['unit']}" if entry.get("unit") else ""
        return f"Expected {entry['value']:.6g}{unit} (within {entry['tolerance']:.3g})."
    return f"Expected {';'.join(entry['answer'])}."


def _join(*parts: str) -> str:
    return " ".join(part.strip() for part in parts if part and part.strip())


def read_responses(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    try:
        with path.open(newline="", encoding="utf-8-sig") as handle:
            reader = csv.DictReader(handle)
            rows = list(reader)
            header = list(reader.fieldnames or [])
    except FileNotFoundError:
        raise ResponsesError(f"responses file {path} does not exist") from None
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise ResponsesError(f"{path}: cannot read the responses CSV ({exc})") from None
    missing = [column for column in FIXED_COLUMNS if column not in header]
    if missing:
        raise ResponsesError(f"{path}: missing column(s) {', '.join(missing)}; the header must start "
                             "with student,version followed by one column per question id")
    return header, rows


def grade(keys: dict[int, dict[str, Any]], path: Path) -> list[Mark]:
    """Mark every (student, question) pair; problems with the file as a whole raise ResponsesError."""
    header, rows = read_responses(path)
    known = {q["id"] for key in keys.values() for q in key["questions"]}
    unknown = [column for column in header if column not in FIXED_COLUMNS and column not in known]
    if unknown:
        raise ResponsesError(f"{path}: column(s) {', '.join(unknown)} are not question ids of the key")
    marks: list[Mark] = []
    for line, row in enumerate(rows, start=2):
        student = (row.get("student") or "").strip()
        raw_version = (row.get("version") or "").strip().lstrip("vV")
        if not raw_version.isdigit() or int(raw_version) not in keys:
            raise ResponsesError(f"{path}, line {line} ({student or 'no student'}): version {row.get('version')!r} "
                                 f"is not in the key (versions {min(keys)}..{max(keys)})")
        version = int(raw_version)
        for entry in keys[version]["questions"]:
            response = row.get(entry["id"]) or ""
            fraction, feedback = mark_question(entry, response)
            marks.append(Mark(student, version, entry["id"], entry["number"], response.strip(),
                              round(fraction * entry["points"], 4), entry["points"], feedback))
    return marks


def write_reports(marks: list[Mark], out: Path) -> list[Path]:
    """scores.csv (a row per student), questions.csv (a row per question), feedback.csv (a row per answer)."""
    out.mkdir(parents=True, exist_ok=True)
    questions = sorted({m.question for m in marks})
    students: dict[tuple[str, int], dict[str, Mark]] = {}
    for mark in marks:
        students.setdefault((mark.student, mark.version), {})[mark.question] = mark
    scores = out / "scores.csv"
    with scores.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["student", "version", "score", "max", "percent", *questions])
        for (student, version), by_question in students.items():
            earned = sum(m.earned for m in by_question.values())
            possible = sum(m.possible for m in by_question.values())
            cells = [_number(by_question[q].earned) if q in by_question else "" for q in questions]
            writer.writerow([student, version, _number(earned), _number(possible),
                             f"{100 * earned / possible:.1f}" if possible else "0.0", *cells])
    summary = out / "questions.csv"
    with summary.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["question", "answered", "full_marks", "mean_points", "max_points", "mean_percent"])
        for question in questions:
            rows = [m for m in marks if m.question == question]
            mean = sum(m.earned for m in rows) / len(rows)
            writer.writerow([question, sum(1 for m in rows if m.response), sum(1 for m in rows if m.earned == m.possible),
                             _number(round(mean, 4)), _number(rows[0].possible), f"{100 * mean / rows[0].possible:.1f}"])
    feedback = out / "feedback.csv"
    with feedback.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(["student", "version", "number", "question", "response", "points", "max", "feedback"])
        for mark in sorted(marks, key=lambda m: (m.student, m.number)):
            writer.writerow([mark.student, mark.version, mark.number, mark.question, mark.response,
                             _number(mark.earned), _number(mark.possible), mark.feedback])
    return [scores, summary, feedback]


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
