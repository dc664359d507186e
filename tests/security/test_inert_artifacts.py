"""What a submission controls (output, exception messages, file and submission names) reaches results.json,
the gradebooks, the class report, the grade log, the job scripts and terminals as text only: no raw control
character but newline and tab, no formula in a spreadsheet cell, no tag or handler in the page, no command
run by a script, no path outside the results folder, and sizes capped."""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import os
import re
import subprocess
import unicodedata
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from instructor import support
from instructor.results_schema import validate_results

from grader.catalog import load_catalog
from grader.cli import main as grader_main
from grader.instructor import gradebook, gradescope, overrides, regrade
from grader.instructor.class_report import write_report
from grader.instructor.display import BatchProgress
from grader.instructor.grade_log import TEXT_LIMIT, GradeLog, read_grades
from grader.instructor.manifest import Manifest
from grader.instructor.submission_grade import SubmissionGrade
from grader.instructor.tamper_scan import ReviewMark
from grader.judge.runner import CheckResult
from grader.report.inert import NAME_LIMIT, csv_cell, file_name, one_line, printable
from grader.report.terminal import Terminal

CATALOG = load_catalog(support.REPO)
CHEAP = dataclasses.replace(CATALOG, exercises=CATALOG.exercises[:2])
CLEAR = "\x1b[2J\x1b[H"  # clears the screen
OSC52 = "\x1b]52;c;cm0gLXJmIH4K\x07"  # writes the clipboard
OSC8 = "\x1b]8;;http://evil.example\x1b\\click\x1b]8;;\x1b\\"  # a hyperlink
CONTROLS = [CLEAR, OSC52, OSC8, "\x00", "\x07", "\r", "\b", "\x7f", "\x9b2J", "\u202e", "\u2028", "\udcff"]
FORMULAS = ['=HYPERLINK("http://x")', "+cmd|' /C calc'!A0", "@SUM(1)", "-2+3", "\t=1"]
MARKUP = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>']
SHELL = ["$(touch${IFS}pwned)", "`touch${IFS}pwned`", "; touch pwned #"]
HOSTILE = "".join(CONTROLS + FORMULAS + MARKUP + SHELL) + "\nsecond line"
_BIDI = {"LRE", "RLE", "LRO", "RLO", "PDF", "LRI", "RLI", "FSI", "PDI", "ALM"}


def raw_controls(text: str) -> list[str]:
    """The characters of `text` a terminal or a renderer would act on (newline and tab aside)."""
    return [
        c
        for c in text
        if c not in "\n\t"
        and (unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp") or unicodedata.bidirectional(c) in _BIDI)
    ]


def strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(k) + strings(v)]
    if isinstance(value, list):
        return [s for v in value for s in strings(v)]
    return []


def hostile_grade(name: str = "=evil" + HOSTILE, flood: int = 0) -> SubmissionGrade:
    """Every check of exercises 1 and 2 failed with a hostile message (and `flood` control characters)."""
    results = []
    for exercise in CHEAP.exercises:
        for spec in exercise.checks:
            for w in spec.world_sizes:
                message = f"rank 0 raised RuntimeError: {chr(27) * flood}{HOSTILE}"
                results.append(
                    CheckResult(
                        "failed",
                        message,
                        exercise=exercise.id,
                        check=spec.name,
                        world_size=w,
                        seconds=0.1,
                        points=0.0,
                        max_points=spec.points / len(spec.world_sizes),
                        visibility=spec.visibility,
                        details=f"--- output of rank 0 ---\n{HOSTILE}",
                        notes=[HOSTILE],
                    )
                )
    review = (ReviewMark("=" + HOSTILE + ".ipynb", 3, "-rebinds " + HOSTILE),)  # a notebook's name is the student's
    files = [f"ex01_process_group: -{HOSTILE}/ex01_process_group.py (in a course folder)"]  # the student's folder name
    return SubmissionGrade(name, results, 1.0, "+problem " + HOSTILE, ["@note " + HOSTILE], review, files)


# --- the remedies --------------------------------------------------------------------------------------


@pytest.mark.parametrize("control", CONTROLS)
def test_printable_shows_each_control_as_its_escape_and_keeps_newlines_and_tabs(control: str) -> None:
    shown = printable(f"a{control}b\n\tc")
    assert not raw_controls(shown) and shown.endswith("b\n\tc") and "\\" in shown
    assert printable(shown) == shown


def test_escapes_read_as_python_writes_them_and_one_line_escapes_newlines_and_tabs_too() -> None:
    assert printable("\x1b[31m\r\x00 x\r\n") == "\\x1b[31m\\r\\x00 x\n"
    assert one_line("a\nb\tc\x1b") == "a\\nb\\tc\\x1b"


def test_long_text_is_cut_to_the_limit_with_a_note() -> None:
    shown = printable("\x1b" * 10_000, 1000)
    assert len(shown) <= 1000 and not raw_controls(shown)
    assert shown.endswith(f"[... {40_000 - shown.index(chr(10))} characters cut]")
    assert printable("short", 1000) == "short"


@pytest.mark.parametrize("formula", FORMULAS + ["\r=1"])
def test_a_cell_that_would_be_a_formula_gets_a_leading_quote(formula: str) -> None:
    cell = csv_cell(formula)
    assert cell.startswith("'") or not cell.startswith(("=", "+", "-", "@", "\t", "\r"))
    assert not raw_controls(cell) and csv_cell(cell) == cell
    assert csv_cell("ada lovelace") == "ada lovelace" and csv_cell("12.5") == "12.5"


@pytest.mark.parametrize(
    "name",
    [
        "..",
        ".",
        "...",
        "../../etc/passwd",
        ".hidden",
        "-rf",
        "a/b",
        "a\\b",
        "a\x00b",
        "a\nb",
        CLEAR,
        "$(touch pwned)",
        "x" * 300,
        " lead",
        "trail.",
        "",
        HOSTILE,
    ],
)
def test_a_name_becomes_one_plain_path_component(name: str, tmp_path: Path) -> None:
    made = file_name(name)
    assert made not in (".", "..") and "/" not in made and "\\" not in made and not raw_controls(made)
    assert not made.startswith((".", "-", " ")) and len(made) <= NAME_LIMIT
    folder = tmp_path / made
    folder.mkdir()
    assert folder.resolve().parent == tmp_path.resolve()
    assert file_name(name + "!") != made  # two names never share a folder


def test_a_plain_name_is_kept_as_it_is() -> None:
    for name in ("student00", "ada lovelace", "élève_2", "hw1 (late)"):
        assert file_name(name) == name


# --- the sinks ---------------------------------------------------------------------------------------------


def test_results_json_holds_only_text_and_is_capped(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    gradescope.write(path, CHEAP, hostile_grade(flood=20_000))
    text = path.read_text()
    data = json.loads(text)
    validate_results(data)
    assert not [s for s in strings(data) if raw_controls(s)]
    assert data["output_format"] == data["test_output_format"] == "text"
    assert all(len(t["output"]) <= gradescope.TEST_OUTPUT_LIMIT for t in data["tests"])
    assert "\\x1b\\x1b" in data["tests"][0]["output"] and "characters cut]" in data["tests"][0]["output"]
    assert "\\x1b[2J" in data["output"] and data["output"].startswith("+problem")
    assert len(text) < 3 * gradescope.OUTPUT_LIMIT


def test_the_visible_outputs_together_are_capped() -> None:
    flooded = hostile_grade(flood=20_000)
    many = dataclasses.replace(flooded, results=flooded.results * 10)
    catalog = dataclasses.replace(
        CHEAP, exercises=tuple(dataclasses.replace(e, checks=e.checks * 10) for e in CHEAP.exercises)
    )
    tests = gradescope.results_json(catalog, many)["tests"]
    visible = [t for t in tests if t["visibility"] == "visible"]
    assert len(visible) > gradescope.OUTPUT_LIMIT // gradescope.TEST_OUTPUT_LIMIT
    assert (
        sum(len(t["output"]) for t in visible) <= gradescope.OUTPUT_LIMIT + len(visible) * gradescope.TEST_OUTPUT_FLOOR
    )


def _cells(path: Path) -> list[str]:
    with open(path, newline="") as handle:
        return [cell for row in csv.reader(handle) for cell in row]


def _assert_inert_cells(cells: list[str]) -> None:
    for cell in cells:
        assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")), cell
        assert not raw_controls(cell), cell


def test_gradebook_cells_are_never_formulas(tmp_path: Path) -> None:
    names = ['=HYPERLINK("http://x")', "+cmd|' /C calc'!A0", "@SUM(1)", "-2+3", "\tx", CLEAR + "ada"]
    with gradebook.Gradebook(tmp_path / "gradebook.csv", CHEAP) as book:
        for name in names:
            book.on_result(hostile_grade(name))
        _assert_inert_cells(_cells(tmp_path / "gradebook.csv"))  # the rows appended while the batch runs
    cells = _cells(tmp_path / "gradebook.csv")
    _assert_inert_cells(cells)
    assert '\'=HYPERLINK("http://x")' in cells and "\\x1b[2J\\x1b[Hada" in cells


def test_a_merged_gradebook_is_disarmed_and_finds_every_hostile_name(tmp_path: Path) -> None:
    names = ("=evil", "+cmd|' /C calc'!A0", CLEAR + "bo")
    one, two = tmp_path / "shard-1", tmp_path / "shard-2"
    with gradebook.Gradebook(one / "gradebook.csv", CHEAP) as book:
        book.on_result(hostile_grade(names[0]))
        book.on_result(hostile_grade(names[1]))
    two.mkdir()
    with open(two / "gradebook.csv", "w", newline="") as handle:  # written by hand, or by an older grader
        writer = csv.writer(handle)
        writer.writerow(
            [
                "submission",
                "ex01_process_group",
                "ex02_data_sharding",
                "total",
                "max_score",
                "seconds",
                "files",
                "problem",
                "review",
            ]
        )
        writer.writerow([names[2], "0", "0", "0", "10", "1.0", "@ex01.py", "=1+1", "+f.py:1: x"])
    for folder in (one, two):
        Manifest(names, ("ex01_process_group", "ex02_data_sharding")).write(folder / "batch.json")
    result = gradebook.merge([one, two], tmp_path / "merged.csv")
    assert result.rows == 3 and result.missing == []
    _assert_inert_cells(_cells(tmp_path / "merged.csv"))


class _Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def test_the_class_report_shows_student_text_and_runs_none_of_it(tmp_path: Path) -> None:
    grades = [
        hostile_grade('"><img src=x onerror=alert(1)>' + CLEAR, flood=10_000),
        hostile_grade("<script>alert(1)</script>"),
    ]
    page = write_report(tmp_path / "report.html", CHEAP, grades, "Class report", plots=False).read_text()
    parser = _Tags()
    parser.feed(page)
    assert {tag for tag, _ in parser.tags} & {"script", "img", "iframe", "a"} == set()
    assert not [(tag, name) for tag, attrs in parser.tags for name, _ in attrs if name.startswith("on")]
    assert not raw_controls(page)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "\\x1b[2J" in page
    assert len(page) < 200_000  # 10,000 ESCs per message, cut


def test_the_grade_log_holds_text_only(tmp_path: Path) -> None:
    path = tmp_path / "grades.jsonl"
    with GradeLog(path) as log:
        log.on_result(hostile_grade(flood=50_000))
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert not [s for s in strings(records) if raw_controls(s)]
    assert max(len(s) for s in strings(records)) <= TEXT_LIMIT
    (grade,) = read_grades(path)
    assert grade.name.startswith("=evil\\x1b[2J") and not raw_controls(grade.results[0].message)


def _passed(grade: SubmissionGrade) -> SubmissionGrade:
    passed = [dataclasses.replace(r, status="passed", message="", points=r.max_points) for r in grade.results]
    return dataclasses.replace(grade, results=passed)


def test_regrade_reports_and_overrides_hold_inert_text_only(tmp_path: Path) -> None:
    name = "=evil" + HOSTILE
    new = hostile_grade(name)
    note = "+" + HOSTILE
    kept = overrides.Override(csv_cell(name, overrides.CELL_LIMIT), "ex01_process_group", 1.0, note, "now", "-me")
    diff = regrade.compare([_passed(new)], [new], {kept.key: kept}, ["ex01_process_group: its checks changed"])
    assert diff.changes and diff.flagged
    regrade.write(tmp_path, diff, tmp_path / ("old" + CLEAR))
    _assert_inert_cells(_cells(tmp_path / regrade.CSV))
    overrides.write_overrides(tmp_path / overrides.FILENAME, [kept])
    _assert_inert_cells(_cells(tmp_path / overrides.FILENAME))
    assert list(overrides.read_overrides(tmp_path / overrides.FILENAME)) == [kept.key]  # the hostile name found again
    with gradebook.Gradebook(tmp_path / gradebook.FILENAME, CHEAP, overridden={kept.key: kept}) as book:
        book.on_result(new)
    (row,) = csv.DictReader(open(tmp_path / gradebook.FILENAME, newline=""))
    assert row["ex01_process_group"] == "1" and row["overrides"].startswith("ex01_process_group: 0 -> 1 (+")
    _assert_inert_cells(_cells(tmp_path / gradebook.FILENAME))
    page = (tmp_path / regrade.MARKDOWN).read_text()
    assert not raw_controls(page)
    assert "\\<script\\>" in page and "\\x1b\\[2J" in page
    pipes: list[int] = []
    for line in page.splitlines():  # no markup: no tag, entity, link, code or emphasis of the text's
        assert not re.search(r"(?<!\\)[<\[`&*_]", line), line
        if line.startswith("|"):  # a table row: as many cells as its table's header, whatever a name holds
            pipes.append(len(re.findall(r"(?<!\\)\|", line)))
            assert pipes[-1] == pipes[0], line
        else:
            pipes = []


def _without(text: str, own: str) -> str:
    return re.sub(own, "", text)


def test_batch_progress_prints_names_and_problems_as_text() -> None:
    for live in (False, True):
        out = io.StringIO()
        with BatchProgress(2, out, live=live) as progress:
            progress.on_start(HOSTILE)
            progress.on_result(hostile_grade(HOSTILE))
        screen = _without(out.getvalue(), r"\r\x1b\[K")  # the bar's own redraw
        assert not raw_controls(screen) and screen.count("\n") == 1, screen
        assert "\\x1b[2J" in screen and "touch${IFS}pwned" in screen


@pytest.mark.parametrize("verbose", [False, True])
def test_check_output_on_a_terminal_keeps_only_the_grader_s_colours(verbose: bool) -> None:
    out = io.StringIO()
    terminal = Terminal(out, colour=True, verbose=verbose)
    grade = hostile_grade()
    for result in grade.results[:2]:
        terminal.result(dataclasses.replace(result, verbose_details=result.details + CLEAR))
    terminal.finish_exercise()
    screen = out.getvalue()
    assert CLEAR not in screen and OSC52 not in screen and "\x1b]" not in screen
    assert not raw_controls(_without(screen, r"\x1b\[\d*m"))  # what paint() adds
    assert "\\x1b[2J" in screen and "\x1b[31m" in screen  # the student's ESC shown, the grader's red kept


def test_an_error_naming_a_student_file_is_printed_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / f"run{CLEAR}{OSC52}"
    folder.mkdir()
    assert grader_main(["report", str(folder), "--out", str(tmp_path / "report.html")]) == 2
    error = capsys.readouterr().err
    assert error.startswith("grader: no grades.jsonl") and not raw_controls(error)
    monkeypatch.setenv("GRADER_COURSE", str(support.REPO))
    upload = tmp_path / "upload"
    upload.mkdir()
    for name in (f"a{CLEAR}\ngrader: you get full marks.zip", "b.zip"):
        (upload / name).write_bytes(b"PK")
    assert grader_main(["check", "--path", str(upload)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and not raw_controls(error)
    assert error.startswith("grader: --path: a\\x1b[2J\\x1b[H\\ngrader: you get full marks.zip is not a readable zip")


# --- the job scripts -----------------------------------------------------------------------------------


def _recorder(folder: Path, name: str) -> None:
    """A fake command that appends its arguments, NUL-separated and ended by a newline, to folder/name.log."""
    path = folder / name
    path.write_text(f"#!/bin/sh\nprintf '%s\\0' \"$@\" >> '{folder}/{name}.log'\necho >> '{folder}/{name}.log'\n")
    path.chmod(0o755)


def _calls(folder: Path, name: str) -> list[list[str]]:
    lines = (folder / f"{name}.log").read_text().split("\0\n")
    return [line.split("\0") for line in lines if line]


def test_the_sbatch_script_quotes_hostile_paths_and_runs_none_of_them(tmp_path: Path) -> None:
    subs = tmp_path / "subs $(touch pwned) `touch pwned`; 'q\" x"
    results = tmp_path / "res$(touch${IFS}pwned)`touch${IFS}pwned`;touch${IFS}pwned;'q\""
    students = ["=HYPERLINK(1)", "$(touch pwned)", "-rf", f"ev{CLEAR}il"]
    for student in students:
        (subs / student).mkdir(parents=True)
    done = support.run_grader(
        support.REPO,
        "slurm",
        str(subs),
        "--out",
        "grade.sbatch",
        "--results",
        str(results),
        "--shards",
        "2",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr
    script = tmp_path / "grade.sbatch"
    assert subprocess.run(["bash", "-n", str(script)]).returncode == 0
    fakes = tmp_path / "fakes"
    fakes.mkdir()
    for command in ("sbatch", "srun", "grader"):
        _recorder(fakes, command)
    env = {**os.environ, "SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_JOB_ID": "7"}
    env["PATH"] = f"{fakes}:{env['PATH']}"
    ran = subprocess.run(["bash", str(script)], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert ran.returncode == 0, ran.stderr
    (srun,) = _calls(fakes, "srun")
    assert srun[:2] == ["grader", "grade"] and sorted(srun[2:6]) == sorted(str(subs / s) for s in students)
    assert srun[srun.index("--out") + 1] == f"{results}/shard-1"
    (sbatch,) = _calls(fakes, "sbatch")
    wrap = next(arg.removeprefix("--wrap=") for arg in sbatch if arg.startswith("--wrap="))
    merged = subprocess.run(["/bin/bash", "-c", wrap], cwd=tmp_path, env={**env, "PATH": str(fakes)}, timeout=60)
    assert merged.returncode == 0
    assert _calls(fakes, "grader") == [
        ["gradebook", "merge", f"{results}/shard-*", "--out", f"{results}/gradebook.csv"]
    ]
    assert not list(tmp_path.rglob("pwned*"))


def test_a_path_with_a_line_break_is_refused_by_the_script_template(tmp_path: Path) -> None:
    subs = tmp_path / "subs\nrm -rf ~"
    (subs / "ada").mkdir(parents=True)
    done = support.run_grader(support.REPO, "slurm", str(subs), "--out", "grade.sbatch", cwd=tmp_path)
    assert done.returncode == 2 and "cannot be written safely" in done.stderr and not raw_controls(done.stderr)
    assert not (tmp_path / "grade.sbatch").exists()


def test_run_autograder_grades_a_hostile_upload_name_as_text(bwrap_available: None, tmp_path: Path) -> None:
    """run_autograder grades in the sandbox, as on Gradescope: skipped where bubblewrap cannot run (not under CI)."""
    from instructor.test_gradescope_bundle import build, fake_root, run_autograder

    root = fake_root(build(tmp_path / "out", "--exercises", "ex01"), tmp_path / "autograder")
    name = f"hw{CLEAR}{OSC52}$(touch${{IFS}}pwned)`touch${{IFS}}pwned`\n=cmd|' -C calc'!A0.zip"
    (root / "submission" / name).write_bytes(b"PK\x03\x04 not a zip")
    data, done = run_autograder(root)
    assert data["score"] == 0 and "not a readable zip archive" in data["tests"][0]["output"]
    assert not [s for s in strings(data) if raw_controls(s)]
    assert not raw_controls(done.stdout) and "\\x1b[2J" in done.stdout
    assert not list(tmp_path.rglob("pwned*"))


# --- one real grading ------------------------------------------------------------------------------------

FLOOD = "".join(chr(c) for c in range(32) if chr(c) not in "\n\t") * 400  # 12,000 control characters


def test_a_real_grading_of_a_hostile_submission_writes_only_inert_files(tmp_path: Path) -> None:
    folder = support.stubs(tmp_path / f"subs/st{CLEAR}ud=ent")
    (folder / "ex01_process_group.py").write_text(f"""
import sys


def setup_ddp(rank, world_size, backend=None):
    sys.stdout.write({FLOOD!r})
    sys.stdout.flush()
    raise RuntimeError({(CLEAR + OSC52 + "=cmd|' /C calc'!A0 <script>alert(1)</script>" + FLOOD)!r})


def cleanup_ddp():
    pass
""")
    out = tmp_path / "out"
    done = support.run_grader(
        support.REPO,
        "grade",
        str(folder),
        "--out",
        str(out),
        "--no-sandbox",
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "--timeout",
        "120",
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    assert not raw_controls(done.stdout) and not raw_controls(done.stderr)
    (results,) = out.glob("*/results.json")
    assert results.parent.name == file_name(folder.name) != folder.name
    data = json.loads(results.read_text())
    assert "\\x1b[2J" in data["tests"][0]["output"] and "=cmd" in data["tests"][0]["output"]
    assert not [s for s in strings(data) if raw_controls(s)]
    assert all(len(t["output"]) <= gradescope.TEST_OUTPUT_LIMIT for t in data["tests"])
    log = [json.loads(line) for line in (out / "grades.jsonl").read_text().splitlines()]
    assert "\\x1b" in log[0]["results"][0]["details"] and not [s for s in strings(log) if raw_controls(s)]
    _assert_inert_cells(_cells(out / "gradebook.csv"))
    page = (out / "report.html").read_text()
    assert not raw_controls(page) and "<script>alert" not in page
