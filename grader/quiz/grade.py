"""Grade a responses file against the answer keys written by `render`.

Responses: a header with `student` and `version` columns (any case, any order, `,` or `;` between
cells) and one column per question id; other columns (a timestamp, an e-mail address) are ignored
and noted. Choice answers are the letters of that student's version ("B", "A;C", "(b)"), true/false
answers a letter or true/false, numeric answers a number (a decimal comma and the question's unit
are fine). An empty cell is no answer. Moodle's Responses report and Canvas's Student Analysis report
are read as they come, answers as option texts, with --version giving the version of their quiz
(grader/quiz/layouts.py).

Scoring, the same rule the Moodle exports encode: single choice and true/false are all or nothing;
multiple choice earns 1/k of the points per right letter (k right letters) and loses as much per
wrong letter, never below 0; a number within the key's tolerance earns all.

Nothing is dropped silently: a row that cannot be graded (no student, an unknown version, a student
on two rows) is left out and reported with its line in problems.csv, the other rows are graded, and
an answer that cannot be read scores 0 with the reason in the feedback and in problems.csv.
"""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.judge.tolerance import close_either_way
from grader.quiz.analysis import MINIMUM_STUDENTS, REPLACE, flags, item_statistics, option_counts, reliability
from grader.quiz.layouts import GRADER, Layout, LayoutError, detect
from grader.quiz.marks import Mark
from grader.quiz.responses import (
    CELL_LIMIT,
    TRUE_WORDS,
    ResponsesError,
    Row,
    parse_choice_text,
    parse_letters,
    parse_number,
    parse_version,
    read_header,
    read_table,
    shown_column,
)
from grader.report.inert import csv_cell

__all__ = ["ResponsesError", "Mark", "Grading", "Source", "grade", "mark_question", "write_reports"]
REPORT_CELL_LIMIT = 10_000  # characters of a report's cell, as in the gradebook (a spreadsheet holds 32,767)


@dataclass(frozen=True)
class Outcome:
    """What one answer earned: a fraction of the question's points, feedback, and what was picked."""

    fraction: float
    feedback: str
    picked: tuple[str, ...] = ()  # option texts chosen (choice questions)
    unreadable: str = ""  # why the answer could not be read, when it could not


@dataclass(frozen=True)
class Problem:
    """Something in the responses that a person should look at: where, for whom, what was done, why."""

    file: Path
    line: int | None
    student: str
    action: str  # "row not graded", "answer scored 0", "column ignored", "note"
    reason: str


@dataclass
class Grading:
    marks: list[Mark] = field(default_factory=list)
    problems: list[Problem] = field(default_factory=list)
    questions: list[dict[str, Any]] = field(default_factory=list)  # one key entry per question id, for the analysis

    @property
    def students(self) -> int:
        return len({(m.student, m.version) for m in self.marks})


def mark_question(entry: dict[str, Any], response: str, by_text: bool = False) -> Outcome:
    """Score one answer; the feedback says why, and what was expected when it was not right. A choice is its
    letters, or with `by_text` the text of its options (as LMS reports write it)."""
    response = response.strip()
    general = entry.get("explanation", "")
    if not response:
        return Outcome(0.0, _join("No answer.", _right_answer(entry), general))
    if entry["type"] == "numeric":
        return _mark_number(entry, response, general)
    options = {option["letter"]: option for option in entry["options"]}
    if by_text:
        texts = [(letter, option["text"]) for letter, option in options.items()]
        picked, problem = parse_choice_text(response, texts, several=entry["type"] == "multiple")
    else:
        if entry["type"] == "truefalse":
            response = TRUE_WORDS.get(response.lower(), response)
        picked, problem = parse_letters(response, "".join(options))
    if picked is None:
        return Outcome(
            0.0,
            _join(f"Could not read the answer: {problem}; scored 0.", _right_answer(entry), general),
            unreadable=problem,
        )
    unknown = [letter for letter in picked if letter not in options]
    if unknown:
        problem = f"{', '.join(unknown)} is not an option (options {min(options)}..{max(options)})"
        return Outcome(0.0, _join(f"{problem}; scored 0.", _right_answer(entry), general), unreadable=problem)
    right = set(entry["answer"])
    if entry["type"] == "multiple":
        share = (len(right & set(picked)) - len(set(picked) - right)) / len(right)
        fraction = max(0.0, share)
    else:
        fraction = 1.0 if set(picked) == right and len(picked) == 1 else 0.0
    explanations = [
        f"{letter}: {options[letter]['explanation']}" for letter in picked if options[letter].get("explanation")
    ]
    verdict = "Right." if fraction == 1 else "Partly right." if fraction > 0 else "Wrong."
    return Outcome(
        fraction,
        _join(
            verdict,
            *explanations,
            "" if fraction == 1 else _right_answer(entry),
            general if entry["type"] == "truefalse" else "",
        ),
        picked=tuple(options[letter].get("text", letter) for letter in picked),
    )


def _mark_number(entry: dict[str, Any], response: str, general: str) -> Outcome:
    given, problem = parse_number(response, entry.get("unit", ""))
    if given is None:
        return Outcome(
            0.0,
            _join(f"Could not read the answer: {problem}; scored 0.", _right_answer(entry), general),
            unreadable=problem,
        )
    value, tolerance = entry["value"], entry["tolerance"]
    ok = math.isfinite(given) and abs(given - value) <= tolerance + 1e-9 * max(abs(value), tolerance, 1e-300)
    verdict = "Right." if ok else f"Wrong: {given:g} is outside the accepted range."
    return Outcome(1.0 if ok else 0.0, _join(verdict, "" if ok else _right_answer(entry), general))


def _right_answer(entry: dict[str, Any]) -> str:
    if entry["type"] == "numeric":
        unit = f" {entry['unit']}" if entry.get("unit") else ""
        written = entry.get("written") or f"{entry['value']:.6g}"
        precision = f", {entry['precision']}" if entry.get("precision") and entry["precision"] != "exact" else ""
        margin = f", within {entry['tolerance']:.3g}" if entry["tolerance"] else ""
        return f"Expected {written}{unit}{precision}{margin}."
    return f"Expected {';'.join(entry['answer'])}."


def _join(*parts: str) -> str:
    return " ".join(part.strip() for part in parts if part and part.strip())


@dataclass(frozen=True)
class Source:
    """One responses file, and the version of all its rows where the file holds no version (an LMS quiz)."""

    path: Path
    version: int | None = None


@dataclass
class _Sheet:
    """One responses file as read: its layout, its rows, and the answer column of each question id."""

    source: Source
    layout: Layout
    rows: list[Row]
    columns: dict[str, str] = field(default_factory=dict)  # question id -> column (the grader's own layout)
    problems: list[Problem] = field(default_factory=list)


def grade(
    keys: dict[int, dict[str, Any]], sources: Path | Sequence[Source], student_column: str | None = None
) -> Grading:
    """Mark every (student, question) of the rows that can be graded; report everything else. A student
    in two rows, of one file or of two, is graded in none of them."""
    result = Grading(questions=_questions(keys))
    sheets = [_read(keys, result.questions, source, student_column) for source in _sources(sources)]
    gradable = _gradable(sheets, keys)
    for sheet in sheets:
        path, layout = sheet.source.path, sheet.layout
        for row, student, version in gradable.get(id(sheet), []):
            for entry in keys[version]["questions"]:
                column = (
                    layout.answers.get(entry["number"], "") if layout.by_text else sheet.columns.get(entry["id"], "")
                )
                response = row.cells.get(column, "").strip()
                if column in row.oversized:
                    response = f"[{row.oversized[column]:,} characters, not read]"
                    outcome = _oversized(entry, row.oversized[column])
                else:
                    response = "" if response in layout.blank else response
                    outcome = mark_question(entry, response, by_text=layout.by_text)
                if outcome.unreadable:
                    sheet.problems.append(
                        Problem(
                            path, row.line, student, "answer scored 0", f"question {entry['id']}: {outcome.unreadable}"
                        )
                    )
                result.marks.append(
                    Mark(
                        student,
                        version,
                        entry["id"],
                        entry["number"],
                        response,
                        round(outcome.fraction * entry["points"], 4),
                        entry["points"],
                        outcome.feedback,
                        outcome.picked,
                    )
                )
        result.problems += sorted(sheet.problems, key=lambda p: (p.line or 0, p.student))
    return result


def _sources(sources: Path | Sequence[Source]) -> list[Source]:
    return [Source(sources)] if isinstance(sources, Path) else list(sources)


def _read(
    keys: dict[int, dict[str, Any]], questions: list[dict[str, Any]], source: Source, student_column: str | None
) -> _Sheet:
    """Read one file in its layout; a ResponsesError when it cannot be graded at all."""
    path = source.path
    known = {q["id"].lower(): q["id"] for q in questions}
    header = read_header(path)
    try:
        layout = detect(header, student_column)
    except LayoutError as exc:
        raise ResponsesError(f"{path}: {exc}") from None
    if layout.by_text:
        _check_lms(path, layout, keys, source.version)
    elif source.version is not None and layout.version is not None:
        raise ResponsesError(f"{path} has a version column and --version was given too: drop one of them")
    table = read_table(path, keep=layout.columns() | ({*known} if not layout.by_text else set()))
    missing = [name for name in layout.student if name not in table.columns]
    missing += ["version"] if layout.version is None and source.version is None else []
    if missing:
        found = _names(table.columns)
        raise ResponsesError(
            f"{path}: missing column(s) {', '.join(missing)}; the header needs student and version "
            f"columns and one column per question id, or is a Moodle or Canvas quiz export (found: "
            f"{found or 'nothing'})" + "".join(f"; {note}" for note in table.notes[:1])  # the encoding, if not UTF-8
        )
    sheet = _Sheet(source, layout, table.rows)
    sheet.problems += [Problem(path, None, "", "note", note) for note in table.notes]
    if layout.name != GRADER:
        version = f"version {source.version} (--version)"
        sheet.problems.append(Problem(path, None, "", "note", f"read as a {layout.name}, all of it {version}"))
    ignored = [name for name in table.columns if name not in layout.columns() and name not in known]
    if ignored:
        sheet.problems.append(Problem(path, 1, "", "column ignored", f"not a question of the key: {_names(ignored)}"))
    if not layout.by_text:
        sheet.columns = {known[name]: name for name in table.columns if name in known}
        absent = [qid for qid in known.values() if qid not in sheet.columns]
        if absent:
            sheet.problems.append(
                Problem(
                    path,
                    1,
                    "",
                    "note",
                    f"no column for question(s) {', '.join(absent)}: every answer to them counts as empty",
                )
            )
    sheet.problems += [Problem(path, line, "", "row not graded", reason) for line, reason in table.misaligned]
    return sheet


def _check_lms(path: Path, layout: Layout, keys: dict[int, dict[str, Any]], version: int | None) -> None:
    """An LMS report needs the version of its quiz, and as many answer columns as the version has questions;
    points that differ from the key's mean another quiz, or its questions in another order."""
    if version is None:
        raise ResponsesError(
            f"{path} is a {layout.name}, which names no version: say which version its quiz is with --version N"
        )
    if version not in keys:
        raise ResponsesError(f"--version {version} is not in the key (versions {', '.join(map(str, sorted(keys)))})")
    entries = {entry["number"]: entry for entry in keys[version]["questions"]}
    if set(layout.answers) != set(entries):
        numbers = ", ".join(map(str, sorted(layout.answers))) or "none"
        raise ResponsesError(
            f"{path}: its answer columns are those of questions {numbers}, and version {version} has "
            f"{len(entries)} questions: is it the report of this version's quiz?"
        )
    wrong = [
        n
        for n, points in sorted(layout.points.items())
        if not close_either_way(points, entries[n]["points"], rtol=1e-9, atol=0)
    ]
    if wrong:
        said = ", ".join(
            f"question {n} is worth {_number(layout.points[n])}, not {_number(entries[n]['points'])}" for n in wrong
        )
        raise ResponsesError(
            f"{path}: in the LMS quiz {said}: is the quiz version {version}, with its questions in the order of the "
            "version's file?"
        )


def _names(columns: list[str]) -> str:
    """Column names for a sentence: the first twenty, each cut, and how many more."""
    more = f" and {len(columns) - 20} more" if len(columns) > 20 else ""
    return ", ".join(map(shown_column, columns[:20])) + more


def _oversized(entry: dict[str, Any], length: int) -> Outcome:
    """A cell too long to be an answer costs that answer alone, and says so."""
    problem = f"the cell holds {length:,} characters; an answer holds at most {CELL_LIMIT:,}"
    return Outcome(0.0, _join(f"Not read: {problem}; scored 0.", _right_answer(entry)), unreadable=problem)


def _questions(keys: dict[int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One entry per question id, in exam order: the order (and the number) of the lowest version's sheet,
    which every version holds the same questions as; a question only later versions hold comes after."""
    found: dict[str, dict[str, Any]] = {}
    for version in sorted(keys):
        for entry in sorted(keys[version]["questions"], key=lambda e: e["number"]):
            found.setdefault(entry["id"], {**entry, "sheet": version})
    return list(found.values())


def _gradable(sheets: list[_Sheet], keys: dict[int, dict[str, Any]]) -> dict[int, list[tuple[Row, str, int]]]:
    """The rows to grade with their student and version, by sheet; the others become problems of their sheet.
    A student on several rows is never merged or picked from: all those rows wait for a person to say which
    one counts."""
    found = [
        (sheet, row, _student(sheet.layout, row), _state(sheet.layout, row)) for sheet in sheets for row in sheet.rows
    ]
    by_student: dict[str, list[tuple[_Sheet, Row]]] = defaultdict(list)
    for sheet, row, student, state in found:
        if state.strip("-"):  # a Moodle row without an attempt (a student who took another version) is no twin
            by_student[student.casefold()].append((sheet, row))
    gradable: dict[int, list[tuple[Row, str, int]]] = defaultdict(list)
    for sheet, row, student, state in found:
        layout = sheet.layout
        raw_version = row.cells.get(layout.version, "").strip() if layout.version else str(sheet.source.version)
        version = parse_version(raw_version)
        twins = by_student[student.casefold()]
        too_long = [column for column in (*layout.student, layout.version) if column in row.oversized]
        if too_long:
            column = too_long[0]
            reason = f"the {column} cell holds {row.oversized[column]:,} characters; at most {CELL_LIMIT:,}"
        elif not student:
            reason = "no student name or id"
        elif state.lower() != "finished":
            reason = f"the attempt is {state!r}, not finished" if state.strip("-") else "no attempt"
        elif len(twins) > 1:
            reason = (
                f"student {student!r} is on {len(twins)} rows ({_places(twins, sheet)}); none of them is graded: "
                "keep the row that counts and grade again"
            )
        elif version is None:
            reason = f"version {raw_version!r} is not a version number" if raw_version else "no version"
        elif version not in keys:
            reason = f"version {version} is not in the key (versions {', '.join(map(str, sorted(keys)))})"
        else:
            gradable[id(sheet)].append((row, student, version))
            continue
        sheet.problems.append(Problem(sheet.source.path, row.line, student, "row not graded", reason))
    return gradable


def _state(layout: Layout, row: Row) -> str:
    """The attempt's state where the layout has one (Moodle writes "-" where there is no attempt)."""
    return row.cells.get(layout.state, "").strip() if layout.state else "finished"


def _student(layout: Layout, row: Row) -> str:
    """The first of the layout's student columns that the row fills."""
    return next((cell for name in layout.student if (cell := row.cells.get(name, "").strip())), "")


def _places(rows: list[tuple[_Sheet, Row]], here: _Sheet) -> str:
    """Where a student's rows are: "lines 2, 4" in one file, with the file's name where there are several."""
    if all(sheet is here for sheet, _ in rows):
        return "lines " + ", ".join(str(row.line) for _, row in rows)
    return ", ".join(f"{sheet.source.path.name} line {row.line}" for sheet, row in rows)


def _cell(value: Any) -> Any:
    """Text as the gradebook writes it (a student's `=HYPERLINK(...)` shows, never computes); numbers as they are."""
    return csv_cell(value, REPORT_CELL_LIMIT) if isinstance(value, str) else value


def _write_csv(path: Path, header: list[str], rows: Iterable[list[Any]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle, lineterminator="\n")
        writer.writerow(list(map(_cell, header)))
        writer.writerows(list(map(_cell, row)) for row in rows)
    return path


def write_reports(result: Grading, out: Path) -> list[Path]:
    """scores.csv (a row per student), questions.csv (a row per question, with item analysis and flags),
    options.csv (how often each option was chosen), feedback.csv (a row per answer), problems.csv (what
    was not graded, and why) and summary.md (reliability, flagged questions); questions in exam order."""
    out.mkdir(parents=True, exist_ok=True)
    marks = result.marks
    questions = [q["id"] for q in result.questions]
    students: dict[tuple[str, int], dict[str, Mark]] = {}
    for mark in marks:
        students.setdefault((mark.student, mark.version), {})[mark.question] = mark
    score_rows = []
    for (student, version), by_question in students.items():
        earned = sum(m.earned for m in by_question.values())
        possible = sum(m.possible for m in by_question.values())
        score_rows.append(
            [
                student,
                version,
                _number(earned),
                _number(possible),
                f"{100 * earned / possible:.1f}" if possible else "0.0",
                *(_number(by_question[q].earned) if q in by_question else "" for q in questions),
            ]
        )
    statistics = item_statistics(marks)
    question_rows = []
    for entry in result.questions:
        rows = [m for m in marks if m.question == entry["id"]]
        stats = statistics.get(entry["id"])
        mean = sum(m.earned for m in rows) / len(rows) if rows else 0.0
        question_rows.append(
            [
                entry["number"],
                entry["id"],
                entry["type"],
                len(rows),
                sum(1 for m in rows if m.response),
                sum(1 for m in rows if m.earned == m.possible),
                _number(round(mean, 4)),
                _number(entry["points"]),
                f"{100 * mean / entry['points']:.1f}" if rows else "",
                f"{stats.difficulty:.2f}" if stats else "",
                f"{stats.discrimination:.2f}" if stats and stats.discrimination is not None else "",
                "; ".join(flags(stats, len(rows))),
            ]
        )
    feedback_rows = [
        [m.student, m.version, m.number, m.question, m.response, _number(m.earned), _number(m.possible), m.feedback]
        for m in sorted(marks, key=lambda m: (m.student, m.number))
    ]
    problem_rows = [[p.file.name, p.line or "", p.student, p.action, p.reason] for p in result.problems]
    return [
        _write_csv(out / "scores.csv", ["student", "version", "score", "max", "percent", *questions], score_rows),
        _write_csv(
            out / "questions.csv",
            [
                "number",
                "question",
                "type",
                "students",
                "answered",
                "full_marks",
                "mean_points",
                "max_points",
                "mean_percent",
                "difficulty",
                "discrimination",
                "flags",
            ],
            question_rows,
        ),
        _write_csv(
            out / "options.csv",
            ["question", "option", "text", "correct", "chosen", "share", "advice"],
            option_counts(result.questions, marks),
        ),
        _write_csv(
            out / "feedback.csv",
            ["student", "version", "number", "question", "response", "points", "max", "feedback"],
            feedback_rows,
        ),
        _write_csv(out / "problems.csv", ["file", "line", "student", "action", "reason"], problem_rows),
        _write_summary(out / "summary.md", result, [sum(m.earned for m in row.values()) for row in students.values()]),
    ]


def _write_summary(path: Path, result: Grading, totals: list[float]) -> Path:
    """summary.md: the class's totals, the reliability of the quiz, and the questions and distractors that
    deserve a look before the grades go out, in exam order (the numbers of the lowest version's sheet)."""
    points = sum(entry["points"] for entry in result.questions)
    lines = ["# Item analysis", ""]
    lines.append(f"{len(totals)} student(s) graded; {len(result.questions)} question(s), {_number(points)} points.")
    if totals:
        mean = sum(totals) / len(totals)
        deviation = math.sqrt(sum((t - mean) ** 2 for t in totals) / len(totals))
        share = f" ({100 * mean / points:.1f}%)" if points else ""
        lines.append(f"Mean total {mean:.2f} of {_number(points)}{share}, standard deviation {deviation:.2f}.")
    found = reliability(result.marks)
    if found.value is None:
        lines.append(f"Reliability ({found.name}): not computed, {found.why}.")
    else:
        lines.append(
            f"Reliability ({found.name}): {found.value:.2f}. For a class test 0.7 or more is the usual aim; "
            "below it a student's total owes much to which questions were asked."
        )
    statistics = item_statistics(result.marks)
    flagged = [(entry, flags(statistics.get(entry["id"]), len(totals))) for entry in result.questions]
    lines += ["", "## Flagged questions", ""]
    if len(totals) < MINIMUM_STUDENTS:
        lines.append(f"None: flags need {MINIMUM_STUDENTS} students or more.")
    elif not any(why for _, why in flagged):
        lines.append("None.")
    else:
        sheet = min(entry["sheet"] for entry in result.questions)
        lines += [f"Numbered as on the sheet of version {sheet}.", "", "| # | question | why |", "|---|---|---|"]
        lines += [f"| {e['number']} | {e['id']} | {'; '.join(why)} |" for e, why in flagged if why]
    unpicked = [row for row in option_counts(result.questions, result.marks) if row[-1] == REPLACE]
    lines += ["", "## Distractors nobody picked", ""]
    lines += [f"- {r[0]}, option {r[1]} of the bank file: {_markdown_cell(r[2])}" for r in unpicked] or ["None."]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def _markdown_cell(text: str) -> str:
    """Bank text on one line of a Markdown table."""
    return " ".join(text.split()).replace("|", "\\|")


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else f"{value:g}"
