"""`grader quiz grade` reads Moodle's and Canvas's quiz reports as they come.

The sample exports are written from what each LMS documents and does:

- Moodle's Responses report (Quiz > Results > Responses, downloaded as CSV): the identity columns the site
  shows (Surname, First name, Email address), State, Started on, Completed, Time taken, Grade/x, then
  "Response 1", "Response 2"... per question of the quiz, in its order
  (https://rdrr.io/github/Lightbridge-AI/moodleQuiz/man/responses_ls.html, an example of the report, and
  https://docs.moodle.org/311/en/Quiz_reports; the column name is quiz_responses' string "Response {$a}",
  https://github.com/moodle/moodle/blob/main/mod/quiz/report/responses/lang/en/quiz_responses.php).
  A choice is its option's text: multichoice's summarise_response writes html_to_text of each chosen
  answer, joined by "; " (https://github.com/moodle/moodle/blob/main/question/type/multichoice/question.php);
  a student with no attempt shows "-" in every cell, Moodle 4 names the state column "Status"
  (https://github.com/moodle/moodle/blob/main/mod/quiz/report/responses/tests/behat/basic.feature).
- Canvas's Student Analysis report (Quizzes > Quiz Statistics > Student Analysis; the Quiz Reports API's
  report_type "student_analysis", https://developerdocs.instructure.com/services/canvas/file.all_resources/quiz_reports):
  name, id, sis_id, section, section_id, section_sis_id, submitted, attempt, then per question a column
  "<question id>: <question text>" and a column headed with its points possible, then n correct,
  n incorrect, score. A multiple-answers question lists the chosen answers' texts joined by "," with a comma
  inside a text written "\\," (Quizzes::QuizStatistics::StudentAnalysis#to_csv,
  https://github.com/instructure/canvas-lms/blob/master/app/models/quizzes/quiz_statistics/student_analysis.rb).

Neither report holds a version: one LMS quiz is one version, given with --version.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from grader.cli import main
from grader.quiz.responses import parse_choice_text

from .support import write_bank

BANK = """
[[questions]]
id = "backend"
type = "single"
pool = "exam"
text = "Which backend runs collectives on CPU tensors?"
answer = "A"
tags = { objective = "backend", exercise = "general" }
options = [
  { text = "`gloo`, the CPU backend", explanation = "yes" },
  { text = "`nccl`; GPUs only", explanation = "no" },
  { text = "**mpi**, always built in", explanation = "not always built" },
]

[[questions]]
id = "env"
type = "multiple"
pool = "exam"
points = 2
text = "Which does torchrun set?"
answer = ["A", "C"]
tags = { objective = "env", exercise = "ex07_torchrun" }
options = [
  { text = "RANK", explanation = "set" },
  { text = "CUDA_VISIBLE_DEVICES", explanation = "not set" },
  { text = "WORLD_SIZE, as a string", explanation = "set" },
  { text = "NCCL_DEBUG", explanation = "not set" },
]

[[questions]]
id = "zero"
type = "truefalse"
pool = "exam"
text = "Ranks are numbered from 0."
answer = true
explanation = "They are."
tags = { objective = "ranks", exercise = "ex01_process_group" }

[[questions]]
id = "volume"
type = "numeric"
pool = "exam"
unit = "MB"
precision = { sig = 3 }
text = "A {M} MB buffer, a ring of 4 ranks: how many MB does each rank send?"
answer = "1.5 * M"
tags = { objective = "ring volume", exercise = "ex08_ring_allreduce" }
[questions.parameters]
M = { values = [100] }
"""


@pytest.fixture()
def keys(tmp_path: Path) -> Path:
    write_bank(tmp_path / "bank", BANK)
    out = tmp_path / "keys"
    argv = ["quiz", "render", "--bank", str(tmp_path / "bank"), "--versions", "2", "--seed", "5", "--out", str(out)]
    assert main(argv) == 0
    return out


def sheet(keys: Path, version: int) -> list[dict]:
    """The version's questions in the order of its sheet, which is the LMS quiz's when imported from its file."""
    return sorted(json.loads((keys / f"v{version:02d}.key.json").read_text())["questions"], key=lambda q: q["number"])


def as_lms_writes(markdown: str) -> str:
    """An option's text as the LMS writes it back: HTML made text, so the Markdown marks are gone."""
    return markdown.replace("`", "").replace("**", "")


def answer(question: dict, join: str, wrong: bool = False) -> str:
    """The LMS's cell for a student who answers right (or picks a wrong option), several texts reversed."""
    if question["type"] == "numeric":
        return "150" if not wrong else "15"
    chosen = [o for o in question["options"] if o["correct"] != wrong][: 1 if wrong else None]
    return join.join(as_lms_writes(o["text"]).replace(",", "\\," if join == "," else ",") for o in reversed(chosen))


def moodle_export(path: Path, questions: list[dict], rows: list[tuple[str, str, list[str]]]) -> Path:
    """A Moodle 3.x Responses report: rows of (email, state, responses)."""
    header = ["Surname", "First name", "Email address", "State", "Started on", "Completed", "Time taken"]
    header += ["Grade/5.00", *(f"Response {n}" for n in range(1, len(questions) + 1))]
    with path.open("w", newline="", encoding="utf-8-sig") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for email, state, responses in rows:
            name = email.split("@")[0]
            finished = state == "Finished"
            times = ["4 May 2026  10:00 AM", "4 May 2026  10:20 AM", "20 mins"] if finished else ["-", "-", "-"]
            writer.writerow([name.title(), name, email, state, *times, "5.00" if finished else "-", *responses])
    return path


def canvas_export(path: Path, questions: list[dict], rows: list[tuple[str, str, str, list[str]]]) -> Path:
    """A Canvas Student Analysis report: rows of (name, Canvas id, SIS id, answers)."""
    header = ["name", "id", "sis_id", "section", "section_id", "section_sis_id", "submitted", "attempt"]
    for number, question in enumerate(questions, 1001):
        header += [f"{number}: {question['id']} question text", f"{float(question['points'])}"]
    header += ["n correct", "n incorrect", "score"]
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(header)
        for name, canvas_id, sis_id, answers in rows:
            cells = [name, canvas_id, sis_id, "Section 1", "31", "", "2026-05-04 10:20:00 UTC", "1"]
            for text in answers:
                cells += [text, "1.0"]
            writer.writerow([*cells, "3", "1", "4.0"])
    return path


def grade(keys: Path, out: Path, *argv: str) -> int:
    return main(["quiz", "grade", "--key", str(keys), *argv, "--out", str(out)])


def read(out: Path, name: str) -> list[dict[str, str]]:
    return list(csv.DictReader((out / name).open(encoding="utf-8")))


def test_a_moodle_and_a_canvas_export_are_graded_as_they_come(keys: Path, tmp_path: Path) -> None:
    """Version 1 taken in Moodle, version 2 in Canvas, graded together: the Moodle export as downloaded
    (a byte-order mark, identity columns, attempts that are not finished, "-" for no answer), the Canvas
    one with its points columns; choices are read from their texts, in any order."""
    one, two = sheet(keys, 1), sheet(keys, 2)
    moodle = moodle_export(
        tmp_path / "moodle-v1.csv",
        one,
        [
            ("ada@uni.example", "Finished", [answer(q, "; ") for q in one]),
            ("bob@uni.example", "Finished", [answer(q, "; ", wrong=True) if q["id"] == "env" else "-" for q in one]),
            ("cy@uni.example", "In progress", [answer(q, "; ") for q in one]),
            ("dee@uni.example", "-", ["-"] * len(one)),  # took the Canvas quiz: no attempt here
        ],
    )
    canvas = canvas_export(
        tmp_path / "canvas-v2.csv",
        two,
        [
            ("Dee Ray", "501", "S-DEE", [answer(q, ",") for q in two]),
            ("Eve Ho", "502", "", [answer(q, ",", wrong=q["type"] != "numeric") for q in two]),
        ],
    )
    out = tmp_path / "grades"
    argv = ["--responses", str(moodle), "--version", "1", "--responses", str(canvas), "--version", "2"]
    assert grade(keys, out, *argv) == 0
    scores = {row["student"]: row for row in read(out, "scores.csv")}
    assert sorted(scores) == ["502", "S-DEE", "ada@uni.example", "bob@uni.example"], "SIS id, else Canvas id"
    assert scores["ada@uni.example"]["percent"] == scores["S-DEE"]["percent"] == "100.0"
    assert scores["ada@uni.example"]["version"] == "1" and scores["S-DEE"]["version"] == "2"
    assert scores["bob@uni.example"]["score"] == "0" and scores["502"]["score"] == "1"  # only the number right
    feedback = read(out, "feedback.csv")
    bob = {row["question"]: row for row in feedback if row["student"] == "bob@uni.example"}
    assert bob["backend"]["response"] == "" and bob["backend"]["feedback"].startswith("No answer.")
    assert bob["env"]["feedback"].startswith("Wrong.")
    skipped = {
        (p["file"], p["student"]): p["reason"] for p in read(out, "problems.csv") if p["action"] == "row not graded"
    }
    assert skipped == {
        ("moodle-v1.csv", "cy@uni.example"): "the attempt is 'In progress', not finished",
        ("moodle-v1.csv", "dee@uni.example"): "no attempt",
    }
    notes = [p["reason"] for p in read(out, "problems.csv") if p["action"] == "note"]
    assert "read as a Moodle responses report, all of it version 1 (--version)" in notes
    assert "read as a Canvas student analysis, all of it version 2 (--version)" in notes
    assert not [p for p in read(out, "problems.csv") if p["action"] == "answer scored 0"]


def test_a_report_without_its_version_or_of_another_quiz_is_refused(
    keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = sheet(keys, 1)
    moodle = moodle_export(tmp_path / "m.csv", one, [("ada@uni.example", "Finished", [answer(q, "; ") for q in one])])
    assert grade(keys, tmp_path / "g", "--responses", str(moodle)) == 1
    assert "is a Moodle responses report, which names no version: say which version its quiz is with --version N" in (
        capsys.readouterr().err
    )
    short = moodle_export(tmp_path / "short.csv", one[:3], [("ada@uni.example", "Finished", ["x"] * 3)])
    assert grade(keys, tmp_path / "g", "--responses", str(short), "--version", "1") == 1
    assert "answer columns are those of questions 1, 2, 3, and version 1 has 4 questions" in capsys.readouterr().err
    shuffled = [one[1], one[0], *one[2:]]  # the quiz's questions in another order: the points say so
    canvas = canvas_export(tmp_path / "c.csv", shuffled, [("Ada", "1", "A1", [answer(q, ",") for q in shuffled])])
    assert grade(keys, tmp_path / "g", "--responses", str(canvas), "--version", "1") == 1
    err = capsys.readouterr().err
    assert "in the LMS quiz question" in err and "is the quiz version 1, with its questions in the order" in err
    assert grade(keys, tmp_path / "g", "--responses", str(moodle), "--responses", str(canvas), "--version", "1") == 1
    assert "1 --version for 2 --responses: give one per file, in the same order" in capsys.readouterr().err


def test_a_student_in_two_reports_is_graded_in_neither(keys: Path, tmp_path: Path) -> None:
    one, two = sheet(keys, 1), sheet(keys, 2)
    first = moodle_export(tmp_path / "a.csv", one, [("ada@uni.example", "Finished", [answer(q, "; ") for q in one])])
    second = moodle_export(tmp_path / "b.csv", two, [("ada@uni.example", "Finished", [answer(q, "; ") for q in two])])
    out = tmp_path / "g"
    assert (
        grade(keys, out, "--responses", str(first), "--version", "1", "--responses", str(second), "--version", "2") == 0
    )
    assert read(out, "scores.csv") == []
    reasons = [p["reason"] for p in read(out, "problems.csv") if p["action"] == "row not graded"]
    assert (
        reasons
        == [
            "student 'ada@uni.example' is on 2 rows (a.csv line 2, b.csv line 2); none of them is graded: "
            "keep the row that counts and grade again"
        ]
        * 2
    )


def test_another_student_column_can_be_named(keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    one = sheet(keys, 1)
    export = moodle_export(tmp_path / "m.csv", one, [("ada@uni.example", "Finished", [answer(q, "; ") for q in one])])
    out = tmp_path / "g"
    assert grade(keys, out, "--responses", str(export), "--version", "1", "--student-column", "First name") == 0
    assert [row["student"] for row in read(out, "scores.csv")] == ["ada"]
    assert grade(keys, out, "--responses", str(export), "--version", "1", "--student-column", "login") == 1
    assert "no column 'login' in the header (for --student-column)" in capsys.readouterr().err


OPTIONS = [("A", "`gloo`, the CPU backend"), ("B", "`nccl`; GPUs only"), ("C", "WORLD_SIZE, as a string")]


@pytest.mark.parametrize(
    ("text", "several", "letters"),
    [
        ("gloo, the CPU backend", False, ["A"]),
        ("GLOO, THE CPU BACKEND", False, ["A"]),  # Moodle's html_to_text writes bold in capitals
        ("nccl; GPUs only", False, ["B"]),
        ("WORLD_SIZE\\, as a string,gloo\\, the CPU backend", True, ["A", "C"]),  # Canvas, in its order
        ("gloo, the CPU backend; WORLD_SIZE, as a string", True, ["A", "C"]),  # Moodle
    ],
)
def test_an_option_is_read_from_its_text(text: str, several: bool, letters: list[str]) -> None:
    assert parse_choice_text(text, OPTIONS, several) == (letters, "")


def test_what_is_not_an_option_is_said_never_guessed() -> None:
    assert parse_choice_text("mpi", OPTIONS, False) == (None, "'mpi' is not the text of an option of this question")
    assert parse_choice_text("gloo, the CPU backend; nccl; GPUs only", OPTIONS, False)[0] is None  # two for one
    alike = [("A", "x > y"), ("B", "x < y")]
    assert parse_choice_text("x > y", alike, False) == (
        None,
        "options A and B read alike without their punctuation; grade this answer by hand",
    )
    ambiguous = [("A", "ab"), ("B", "c"), ("C", "a"), ("D", "bc")]
    assert parse_choice_text("abc", ambiguous, True) == (None, "'abc' reads as more than one choice (A;B or C;D)")


def test_moodle_4_status_and_the_first_id_a_row_fills(keys: Path, tmp_path: Path) -> None:
    """Moodle 4 names the state column Status; a student is named by ID number, else Username, else Email
    address, whichever the row fills first."""
    one = sheet(keys, 1)
    path = tmp_path / "moodle4.csv"
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.writer(handle)
        writer.writerow(
            ["Last name", "First name", "ID number", "Email address", "Status", "Grade/5.00"]
            + [f"Response {n}" for n in range(1, len(one) + 1)]
        )
        writer.writerow(
            ["Lovelace", "Ada", "A001", "ada@uni.example", "Finished", "5.00", *(answer(q, "; ") for q in one)]
        )
        writer.writerow(["Bolt", "Bo", "", "bo@uni.example", "Finished", "5.00", *(answer(q, "; ") for q in one)])
        writer.writerow(["Xu", "Cy", "A003", "cy@uni.example", "Never submitted", "-", *["-"] * len(one)])
    out = tmp_path / "g"
    assert grade(keys, out, "--responses", str(path), "--version", "1") == 0
    assert [(row["student"], row["percent"]) for row in read(out, "scores.csv")] == [
        ("A001", "100.0"),
        ("bo@uni.example", "100.0"),
    ]
    (skipped,) = [p for p in read(out, "problems.csv") if p["action"] == "row not graded"]
    assert (skipped["student"], skipped["reason"]) == ("A003", "the attempt is 'Never submitted', not finished")


def test_the_grader_csv_takes_its_version_from_the_column_or_the_flag(
    keys: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    letters = {q["id"]: ";".join(q["answer"]) if "answer" in q else q["written"] for q in sheet(keys, 2)}
    ids = list(letters)
    without = tmp_path / "no-version.csv"
    without.write_text(",".join(["student", *ids]) + "\n" + ",".join(["ada", *letters.values()]) + "\n")
    out = tmp_path / "g"
    assert grade(keys, out, "--responses", str(without), "--version", "2") == 0
    assert [(row["student"], row["version"], row["percent"]) for row in read(out, "scores.csv")] == [
        ("ada", "2", "100.0")
    ]
    both = tmp_path / "with-version.csv"
    both.write_text(",".join(["student", "version", *ids]) + "\n" + ",".join(["ada", "2", *letters.values()]) + "\n")
    assert grade(keys, out, "--responses", str(both), "--version", "2") == 1
    assert "has a version column and --version was given too: drop one of them" in capsys.readouterr().err


def test_a_row_without_an_attempt_is_no_second_row(keys: Path, tmp_path: Path) -> None:
    """Downloaded with "enrolled users who have, or do not have, an attempt", version 2's report lists ada, who
    took version 1, with "-" everywhere: that row is reported, and ada is graded from version 1's."""
    one, two = sheet(keys, 1), sheet(keys, 2)
    first = moodle_export(tmp_path / "a.csv", one, [("ada@uni.example", "Finished", [answer(q, "; ") for q in one])])
    second = moodle_export(tmp_path / "b.csv", two, [("ada@uni.example", "-", ["-"] * len(two))])
    out = tmp_path / "g"
    assert (
        grade(keys, out, "--responses", str(first), "--version", "1", "--responses", str(second), "--version", "2") == 0
    )
    assert [(row["student"], row["version"], row["percent"]) for row in read(out, "scores.csv")] == [
        ("ada@uni.example", "1", "100.0")
    ]
    skipped = [(p["file"], p["reason"]) for p in read(out, "problems.csv") if p["action"] == "row not graded"]
    assert skipped == [("b.csv", "no attempt")]
