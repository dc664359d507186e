"""The student's commands, end to end, on a private copy of the course (GRADER_COURSE)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest import REPO
from grader.cli import main

EX01 = "ex01_process_group.py"


@pytest.fixture
def course(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "course"
    for folder in ("exercises", "solutions"):
        shutil.copytree(REPO / folder, root / folder, ignore=shutil.ignore_patterns("__pycache__"))
    monkeypatch.setenv("GRADER_COURSE", str(root))
    monkeypatch.delenv("NO_COLOR", raising=False)
    return root


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_list_shows_every_exercise_not_started(course, capsys):
    code, out = run(capsys, "list", "--json")
    rows = json.loads(out)
    assert code == 0 and len(rows) >= 4
    assert {row["status"] for row in rows} == {"not started"}


def test_check_on_stubs_fails_with_not_implemented_and_plain_text(course, capsys):
    code, out = run(capsys, "check", "ex01", "--world-size", "2")
    assert code == 1
    assert "not implemented yet: setup_ddp()" in out
    assert "\033[" not in out  # piped: no colour


def test_check_picks_the_first_unfinished_exercise_and_records_progress(course, capsys):
    shutil.copyfile(course / "solutions" / EX01, course / "exercises" / EX01)
    code, out = run(capsys, "check", "--world-size", "2")
    assert code == 0 and "ex01_process_group" in out and "public checks passed" in out
    assert "all checks passed" not in out
    code, out = run(capsys, "list", "--json")
    status = {row["id"]: row["status"] for row in json.loads(out)}
    assert status["ex01_process_group"] == "passing" and status["ex02_data_sharding"] == "not started"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def setup_ddp(rank, world_size, backend=None):\n    return (\n", r"syntax error in ex01_process_group.py, line 2"),
        ("def setup_ddp(rank, world_size, backend=None):\n    pass\n", r"defines no function cleanup_ddp\(\)"),
        ("def setup_ddp(rank):\n    pass\ndef cleanup_ddp():\n    pass\n",
         r"setup_ddp in ex01_process_group.py takes \(rank\) but the grader calls it as setup_ddp\(rank, world_size, backend=None\)"),
    ],
    ids=["syntax_error", "missing_function", "wrong_signature"],
)
def test_broken_student_files_get_one_clear_message(course, capsys, source, message):
    (course / "exercises" / EX01).write_text(source)
    code, out = run(capsys, "check", "ex01", "--world-size", "2")
    assert code == 1
    assert pytest.importorskip("re").search(message, out), out
    assert "Traceback" not in out


def test_import_error_in_student_file_is_an_error_not_a_crash(course, capsys):
    source = (course / "solutions" / EX01).read_text().replace("import torch\n", "import torch\nimport no_such_module\n", 1)
    (course / "exercises" / EX01).write_text(source)
    code, out = run(capsys, "check", "ex01", "--world-size", "2", "--json", str(course / "out.json"))
    assert code == 1
    assert "importing ex01_process_group.py failed: ModuleNotFoundError" in out
    entries = json.loads((course / "out.json").read_text())
    assert {e["status"] for e in entries} == {"error"}
    assert set(entries[0]) == {"exercise", "check", "world_size", "status", "message", "seconds"}


def test_hint_prints_objectives_and_hints(course, capsys):
    code, out = run(capsys, "hint", "ex02")
    assert code == 0 and "set_epoch" in out and "hint 1:" in out
    code, out = run(capsys, "hint", "ex02", "2")
    assert code == 0 and out.startswith("hint 2:")
    code, out = run(capsys, "hint", "ex02", "99")
    assert code == 2 and "has hints 1 to" in out


def test_reset_restores_the_stub_and_keeps_a_backup(course, capsys):
    stub = (course / "exercises" / EX01).read_text()
    run(capsys, "list")  # the grader records the untouched stubs
    (course / "exercises" / EX01).write_text("# my attempt\n")
    code, out = run(capsys, "reset", "ex01")
    assert code == 0 and "saved as" in out
    assert (course / "exercises" / EX01).read_text() == stub
    backups = list((course / ".grader" / "backups").iterdir())
    assert [b.read_text() for b in backups] == ["# my attempt\n"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [(("check", "ex99"), "no exercise 'ex99'"), (("check", "--path", "/no/such/dir"), "not a directory"),
     (("hint", "nope"), "no exercise 'nope'")],
)
def test_bad_arguments_exit_2_with_a_message(course, capsys, argv, message):
    code, out = run(capsys, *argv)
    assert code == 2 and message in out


def test_missing_or_broken_course_is_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRADER_COURSE", str(tmp_path))
    code, out = run(capsys, "list")
    assert code == 2 and "holds no exercises" in out
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "catalog.toml").write_text("[[exercise]]\nid = 'x'\nnumber = \n")
    code, out = run(capsys, "list")
    assert code == 2 and "catalog.toml" in out and "Traceback" not in out
