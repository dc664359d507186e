"""`grader quiz ...` end to end through grader.cli.main: output, exit codes, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from grader.cli import main

from .support import COURSE_BANK, SINGLE, course_questions, write_bank


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(["quiz", *argv])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_list_json_has_id_type_and_tags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--bank", str(COURSE_BANK), "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) == len(course_questions())
    assert {"id", "type", "exercise", "topics", "objective"} <= set(rows[0])


def test_list_filters_by_tags(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--bank", str(COURSE_BANK), "--tags", "ex05_no_sync,amdahl")
    lines = out.strip().splitlines()
    assert code == 0 and lines[-1].endswith("question(s)")
    assert all("ex05_no_sync" in line or "amdahl" in line for line in lines[:-1])


def test_lint_course_banks_clean(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "lint", "--bank", str(COURSE_BANK))
    assert code == 0 and "no problems" in out and err == ""


def test_lint_reports_errors_and_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bank(tmp_path / "bank", SINGLE.replace('answer = "B"', 'answer = "D"'))
    write_bank(tmp_path / "bank", "[[questions]\n", "broken.toml")
    code, _, err = run(capsys, "lint", "--bank", str(tmp_path / "bank"))
    assert code == 1
    assert "bank.toml: question 'q-single': field 'answer': 'D' is not among the options" in err
    assert "broken.toml: TOML syntax error" in err
    assert "Traceback" not in err


def test_lint_catches_formula_undefined_for_some_draws(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    body = """
    [[questions]]
    id = "div"
    type = "numeric"
    pool = "exam"
    text = "{W}"
    answer = "1 / (W - 2)"
    precision = { sig = 3 }
    tags = { objective = "x", exercise = "general" }
    parameters = { W = { values = [2, 4] } }
    """
    write_bank(tmp_path / "bank", body)
    code, _, err = run(capsys, "lint", "--bank", str(tmp_path / "bank"))
    assert code == 1 and "question 'div': field 'answer': division by zero" in err


@pytest.mark.parametrize("command", ["list", "lint"])
def test_missing_bank_directory_is_a_clear_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    code, _, err = run(capsys, command, "--bank", str(tmp_path / "nowhere"))
    assert code == 1 and err.startswith("grader quiz: error: bank directory") and "Traceback" not in err


def test_default_bank_outside_a_course(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GRADER_COURSE", str(tmp_path))
    code, _, err = run(capsys, "list")
    assert code == 1 and "GRADER_COURSE" in err


def test_render_refuses_broken_banks(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    write_bank(tmp_path / "bank", SINGLE.replace('type = "single"', 'type = "poll"'))
    code, _, err = run(capsys, "render", "--bank", str(tmp_path / "bank"), "--out", str(tmp_path / "out"))
    assert code == 1 and "unknown type 'poll'" in err and not (tmp_path / "out").exists()


def test_render_formats_and_keys(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    code, stdout, _ = run(
        capsys,
        "render",
        "--bank",
        str(COURSE_BANK),
        "--format",
        "md",
        "--format",
        "ipynb",
        "--versions",
        "3",
        "--seed",
        "8",
        "--count",
        "12",
        "--tags",
        "",
        "--out",
        str(out),
    )
    assert code == 0 and "3 version(s) of 12 question(s)" in stdout
    expected = [
        f"{stem}{n}.{ext}"
        for n in (1, 2, 3)
        for stem, ext in (("quiz-v0", "md"), ("quiz-v0", "ipynb"), ("v0", "key.json"), ("v0", "key.md"))
    ]
    assert sorted(p.name for p in out.iterdir()) == sorted(expected)
    notebook = nbformat.read(out / "quiz-v02.ipynb", as_version=4)
    nbformat.validate(notebook)
    assert len(notebook.cells) == 2 + 2 * 12
    key = json.loads((out / "v02.key.json").read_text())
    assert key["version"] == 2 and key["seed"] == 8 and len(key["questions"]) == 12
    sheet = (out / "quiz-v02.md").read_text()
    assert all(q["id"] not in sheet for q in key["questions"])  # the sheet gives nothing away
    assert "(right)" in (out / "v02.key.md").read_text()


def test_render_by_tag_with_no_match(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run(capsys, "render", "--bank", str(COURSE_BANK), "--tags", "no-such-tag", "--out", str(tmp_path))
    assert code == 1 and "no question in the exam pool matches --tags no-such-tag" in err


def test_bad_arguments_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as raised:
        main(["quiz", "render", "--versions", "0", "--out", "x"])
    assert raised.value.code == 2
    assert "not a positive integer" in capsys.readouterr().err
