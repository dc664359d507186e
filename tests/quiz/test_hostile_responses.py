"""Hostile LMS exports for `grader quiz grade`: one row never refuses the class, nothing ends in a traceback,
the file is streamed under a stated cap, and no cell the reports write is a spreadsheet formula."""

from __future__ import annotations

import codecs
import csv
import tracemalloc
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from grader.quiz import responses
from grader.quiz.grade import ResponsesError, grade, write_reports
from grader.quiz.key import load_keys
from grader.report.inert import FORMULA_STARTS

from .support import IDS, right_answers, row
from .test_responses import grade as grade_command
from .test_responses import rendered

__all__ = ["rendered"]  # the fixture, imported for these tests


def _content(rendered: Path, *rows: list[str]) -> str:
    good = right_answers(rendered, 1)
    lines = [row("student", "version", *IDS), row("ada", "1", *(good[q] for q in IDS))]
    return "".join(lines) + "".join(row(*cells) for cells in rows)


def test_an_oversized_cell_costs_its_own_answer_only(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = right_answers(rendered, 1)
    huge = "A" * 300_000  # over csv's default field limit, which refused the whole class
    content = _content(rendered, ["bob", "1", good["volume"], huge, good["both"], good["fact"]])
    code, scores, problems, err = grade_command(rendered, tmp_path, content, capsys)
    assert code == 0, err
    assert scores["ada"]["percent"] == "100.0"
    assert scores["bob"]["pick"] == "0" and scores["bob"]["volume"] == scores["ada"]["volume"] != "0"
    (problem,) = [p for p in problems if p["student"] == "bob"]
    assert problem["line"] == "3" and "question pick: the cell holds 300,000 characters" in problem["reason"]


def test_a_line_too_long_for_the_reader_costs_its_row_and_memory_stays_bounded(
    rendered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses, "LINE_LIMIT", 1 << 20)
    good = right_answers(rendered, 1)
    path = tmp_path / "responses.csv"
    path.write_text(
        _content(rendered, ["bob", "1", "B" * (24 << 20), "", "", ""], ["cy", "1", *(good[q] for q in IDS)])
    )
    tracemalloc.start()
    try:
        result = grade(load_keys(rendered), path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20, f"{peak / 2**20:.0f} MiB to grade a 24 MiB file"
    assert {m.student for m in result.marks} == {"ada", "cy"}
    (skipped,) = [p for p in result.problems if p.action == "row not graded"]
    assert skipped.line == 3 and "over 1,048,576 characters" in skipped.reason


def test_rows_past_the_cap_are_reported_not_read(
    rendered: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(responses, "MAX_ROWS", 3)
    good = right_answers(rendered, 1)
    path = tmp_path / "responses.csv"
    path.write_text(_content(rendered, *([f"s{i}", "1", *(good[q] for q in IDS)] for i in range(5))))
    result = grade(load_keys(rendered), path)
    assert {m.student for m in result.marks} == {"ada", "s0", "s1"}
    (capped,) = [p for p in result.problems if p.action == "row not graded"]
    assert capped.line == 5 and "at most 3 rows" in capped.reason


@pytest.mark.parametrize(
    ("data", "said"),
    [
        (b'""\n', "line 1: the header's cells are all blank"),
        (b'"",""\nada,1\n', "line 1: the header's cells are all blank"),
        (b"\n\n", "is empty"),
        (codecs.BOM_UTF16_LE + "student,version\nada,1\n".encode("utf-16-le") + b"\x00", "line 3: bytes that are not"),
        (b"\xff\xfe\x00\xd8s\x00", "line 1: bytes that are not UTF-16"),
        ("student,version,pick\nada,1,B\n".encode("utf-16-be"), "no byte-order mark but is UTF-16"),
        (codecs.BOM_UTF32_LE + "student,version,pick\nada,1,B\n".encode("utf-32-le"), ""),
        (b"student,version,pick\nada,1,B\ncaf\xe9,1,B\n", "line 3 is the first that is not"),
        (b"student,,version,pick\nada,,1,B\n", "column 2 has no name"),
        (b"student,version,note,note,pick\nada,1,x,y,B\n", ""),
        (b"student,version,pick,pick\nada,1,B,B\n", "line 1: column(s) pick appear more than once"),
        (b"student,version,pick\nada,1,B\n\x00,\x00\n", ""),
    ],
)
def test_an_encoding_bom_or_header_problem_is_one_sentence_naming_where(
    rendered: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], data: bytes, said: str
) -> None:
    code, _, problems, err = grade_command(rendered, tmp_path, data, capsys)
    written = err if code else " ".join(p["reason"] for p in problems)
    assert said in written, (code, err, problems)
    assert err.count("\n") <= 1 and "Traceback" not in err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    st.lists(
        st.sampled_from(
            [b"student,version,pick\n", b"ada,1,B\n", b'"', b"\x00", b"\xff\xfe", b"\xef\xbb\xbf", b"\xe9", b";", b"\r"]
        )
        | st.binary(max_size=20),
        max_size=12,
    )
)
def test_any_responses_file_is_graded_or_refused_in_a_sentence(
    rendered: Path, tmp_path: Path, parts: list[bytes]
) -> None:
    path = tmp_path / "generated.csv"
    path.write_bytes(b"".join(parts))
    try:
        grade(load_keys(rendered), path)
    except ResponsesError as exc:
        assert "\n" not in str(exc)


def test_no_report_cell_is_a_formula(rendered: Path, tmp_path: Path) -> None:
    hostile = ['=HYPERLINK("http://x")', "+1+1", "-2+3", "@SUM(A1)", "\t=1", "\r=1"]
    good = right_answers(rendered, 1)
    rows = [[cell, "1", cell, cell, good["both"], cell] for cell in hostile]
    path = tmp_path / "responses.csv"
    path.write_text(_content(rendered, *rows) + row(*hostile[:2], "x", "y"), newline="")
    out = tmp_path / "grades"
    written = write_reports(grade(load_keys(rendered), path), out)
    for report in (path for path in written if path.suffix == ".csv"):
        with report.open(encoding="utf-8", newline="") as handle:
            cells = [cell for line in csv.reader(handle) for cell in line]
        assert not [cell for cell in cells if cell.startswith(FORMULA_STARTS)], report.name
    summary = (out / "summary.md").read_text(encoding="utf-8")  # the bank's words and numbers, no student's
    assert not [cell for cell in hostile if cell.strip() in summary]
