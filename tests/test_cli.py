"""The student's commands, end to end, on a private copy of the course (GRADER_COURSE)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from conftest import REPO

from grader.catalog import Exercise, load_catalog
from grader.cli import build_parser, main
from grader.commands import PATH_NO_SANDBOX_WARNING, Watcher
from grader.grading import ExerciseFiles
from grader.judge.runner import ALL_CHECKS, PUBLIC_CHECKS, CheckResult
from grader.plan import GradingPlan
from grader.report.terminal import Terminal

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
    code, out = run(capsys, "check", "ex01", "--world-size", "2")
    assert code == 0 and "ex01_process_group" in out and "public checks passed" in out
    assert "all checks passed" not in out
    code, out = run(capsys, "list", "--json")
    status = {row["id"]: row["status"] for row in json.loads(out)}
    assert status["ex01_process_group"] == "passing" and status["ex02_data_sharding"] == "not started"
    code, out = run(capsys, "check", "--world-size", "2")
    assert code == 1 and "ex02_data_sharding" in out and "ex01_process_group" not in out


def test_check_with_no_argument_checks_every_changed_exercise_then_the_next_unsolved(course, capsys):
    for name in (EX01, "ex02_data_sharding.py"):
        shutil.copyfile(course / "solutions" / name, course / "exercises" / name)
    assert run(capsys, "check", "ex01", "--world-size", "2")[0] == 0
    with open(course / "exercises" / EX01, "a") as edited:
        edited.write("# tidied up\n")
    code, out = run(capsys, "list")
    assert "changed     " in out and "edited since its last check" in out, "list explains its states"
    code, out = run(capsys, "check", "--world-size", "2")
    headings = [line.split(":")[0] for line in out.splitlines() if line.startswith("ex")]
    assert headings == ["ex01_process_group", "ex02_data_sharding", "ex03_train_ddp"], out
    assert "not implemented yet: train_ddp()" in out and code == 1
    code, out = run(capsys, "list", "--json")
    status = {row["id"]: row["status"] for row in json.loads(out)}
    assert status["ex01_process_group"] == status["ex02_data_sharding"] == "passing"
    assert status["ex03_train_ddp"] == "not started"


class _Session:
    """Stands in for a grading session: records what was graded, every check passes at once."""

    def __init__(self) -> None:
        self.graded: list[str] = []

    def grade(
        self,
        files: ExerciseFiles,
        exercises: Sequence[Exercise],
        on_result: Callable[[CheckResult], None] | None = None,
    ) -> list[CheckResult]:
        results = []
        for exercise in exercises:
            self.graded.append(exercise.id)
            results.append(
                CheckResult(
                    "passed",
                    "",
                    exercise=exercise.id,
                    check="c",
                    world_size=2,
                    seconds=0.01,
                    points=1.0,
                    max_points=1.0,
                    visibility="public",
                )
            )
            if on_result is not None:
                on_result(results[-1])
        return results


def test_watch_checks_whichever_exercise_was_saved_under_a_timestamped_line(course, capsys):
    catalog = load_catalog(course)
    session = _Session()
    watcher = Watcher(catalog, session, Terminal(), catalog.exercises)  # mypy checks the fake against Grades
    assert watcher.poll() == [] and session.graded == []
    ring = course / "exercises" / "ex08_ring_allreduce.py"
    for saved_at in (time.time() + 1, time.time() + 2):  # saved twice: checked twice
        ring.write_text(ring.read_text() + "# saved\n")
        os.utime(ring, (saved_at, saved_at))
        assert [e.id for e in watcher.poll()] == ["ex08_ring_allreduce"]
    assert session.graded == ["ex08_ring_allreduce", "ex08_ring_allreduce"]
    out = capsys.readouterr().out
    assert len(re.findall(r"^──── \d\d:\d\d:\d\d ex08_ring_allreduce.py saved ─", out, re.M)) == 2, out
    assert out.count("ex08_ring_allreduce: ") == 2


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (
            "def setup_ddp(rank, world_size, backend=None):\n    return (\n",
            r"syntax error in ex01_process_group.py, line 2",
        ),
        ("def setup_ddp(rank, world_size, backend=None):\n    pass\n", r"defines no function cleanup_ddp\(\)"),
        (
            "def setup_ddp(rank):\n    pass\ndef cleanup_ddp():\n    pass\n",
            r"setup_ddp in ex01_process_group.py takes \(rank\) but the grader calls it as "
            r"setup_ddp\(rank, world_size, backend=None\)",
        ),
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
    source = (
        (course / "solutions" / EX01).read_text().replace("import torch\n", "import torch\nimport no_such_module\n", 1)
    )
    (course / "exercises" / EX01).write_text(source)
    code, out = run(capsys, "check", "ex01", "--world-size", "2", "--json", str(course / "out.json"))
    assert code == 1
    assert out.count("importing ex01_process_group.py failed: ModuleNotFoundError") == 1, "said once per exercise"
    entries = json.loads((course / "out.json").read_text())
    assert {e["status"] for e in entries} == {"error"}
    assert set(entries[0]) == {
        "exercise",
        "check",
        "world_size",
        "status",
        "message",
        "seconds",
        "cause",
        "hint",
        "hint_text",
    }


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
    [
        (("check", "ex99"), "no exercise 'ex99'"),
        (("check", "--path", "/no/such/dir"), "--path: /no/such/dir: no such file or directory"),
        (("hint", "nope"), "no exercise 'nope'"),
    ],
)
def test_bad_arguments_exit_2_with_a_message(course, capsys, argv, message):
    code, out = run(capsys, *argv)
    assert code == 2 and message in out


def test_check_path_warns_in_one_line_that_it_runs_the_code_unsandboxed(course, capsys):
    """Unlike `grader grade`, `check --path` runs what it takes in as the user: an instructor is told so."""
    code = main(["check", "--path", str(course / "exercises"), "ex01", "--world-size", "2"])
    err = capsys.readouterr().err
    assert code == 1
    assert err.splitlines().count(PATH_NO_SANDBOX_WARNING) == 1 and "\n" not in PATH_NO_SANDBOX_WARNING
    assert "without a sandbox" in PATH_NO_SANDBOX_WARNING


def test_missing_or_broken_course_is_reported(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("GRADER_COURSE", str(tmp_path))
    code, out = run(capsys, "list")
    assert code == 2 and "holds no exercises" in out
    (tmp_path / "exercises").mkdir()
    (tmp_path / "exercises" / "catalog.toml").write_text("[[exercise]]\nid = 'x'\nnumber = \n")
    code, out = run(capsys, "list")
    assert code == 2 and "catalog.toml" in out and "Traceback" not in out


def _ex03_raising(course: Path) -> None:
    solution = (course / "solutions" / "ex03_train_ddp.py").read_text()
    anchor = '    on_gpu = dist.get_backend() == "nccl"\n'
    assert anchor in solution
    raising = solution.replace(anchor, anchor + '    raise ValueError(f"bad batch size {batch_size}")\n')
    (course / "exercises" / "ex03_train_ddp.py").write_text(raising)


def test_one_exception_on_every_rank_and_check_is_said_once_in_at_most_40_lines(course, capsys):
    _ex03_raising(course)
    code, out = run(capsys, "check", "ex03", "--json", str(course / "out.json"))
    assert code == 1
    lines = out.splitlines()
    assert len(lines) <= 40, out
    assert out.count("every rank raised ValueError: bad batch size") == 1, out
    assert "ranks_stay_in_sync [W=2 and W=4]" in out  # the first check on the shared run says it
    assert out.count("(a knock-on: ranks_stay_in_sync says why)") == 1, "the checks sharing the run point at it once"
    assert 'ex03_train_ddp.py", line' in out and "grader/engine" not in out and "workers.py" not in out
    entries = json.loads((course / "out.json").read_text())
    catalog = load_catalog(course)
    expected = {(c.name, w) for c in catalog.get("ex03").checks if c.visibility == "public" for w in c.world_sizes}
    assert {(e["check"], e["world_size"]) for e in entries} == expected, "--json keeps every check's entry"
    shared = [e for e in entries if e["check"] != "waits_for_checkpoint"]  # that one reads the failed run itself
    assert all(
        "bad batch size" in e["message"] if e["check"] == "ranks_stay_in_sync" else "knock-on" in e["message"]
        for e in shared
    )


def test_verbose_shows_the_graders_frames(course, capsys):
    _ex03_raising(course)
    code, out = run(capsys, "check", "ex03", "-v", "--world-size", "2")
    assert code == 1 and "rank_runtime.py" in out and "frames of the grader" not in out


def test_a_syntax_error_is_said_once_per_exercise(course, capsys):
    (course / "exercises" / EX01).write_text("def setup_ddp(rank, world_size, backend=None):\n    return (\n")
    code, out = run(capsys, "check", "ex01")
    assert code == 1 and out.count("syntax error in ex01_process_group.py, line 2") == 1, out
    assert "every check [W=2 and W=4]" in out


def test_a_future_import_below_other_code_is_one_clear_error(course, capsys):
    solution = (course / "solutions" / EX01).read_text()
    (course / "exercises" / EX01).write_text("import os\n" + solution)
    code, out = run(capsys, "check", "ex01")
    assert code == 1 and out.count("from __future__ imports must occur at the beginning of the file") == 1, out
    assert "Traceback" not in out


def test_a_test_call_left_at_the_top_level_is_named_with_its_fix(course, capsys):
    source = (course / "solutions" / EX01).read_text() + "\nsetup_ddp(0, 1)\n"
    (course / "exercises" / EX01).write_text(source)
    line = len(source.splitlines())
    code, out = run(capsys, "check", "ex01", "--world-size", "2", "--deadline", "15")
    assert code == 1
    assert f"test call at import: ex01_process_group.py:{line} calls setup_ddp()" in out, out
    assert 'under `if __name__ == "__main__":`' in out and "cell not tagged `exercise`" in out


def test_a_harmless_test_call_still_gets_a_warning(course, capsys):
    name = "ex02_data_sharding.py"
    source = (course / "solutions" / name).read_text() + "\nmake_loader(list(range(8)), 0, 1, 2)\n"
    (course / "exercises" / name).write_text(source)
    code, out = run(capsys, "check", "ex02", "--world-size", "2")
    assert code == 0 and "public checks passed" in out
    assert "warning: test call at import: ex02_data_sharding.py:" in out and "calls make_loader()" in out


def test_check_json_to_stdout_is_only_json_and_each_failure_carries_its_hint(course, capsys):
    """`--json -` is for tools: stdout parses as JSON (the report goes to stderr), and a failing
    check's entry has the hint's number and text, as `grader hint` would print them."""
    solved = (course / "solutions" / "ex10_scaling.py").read_text()
    mistake = solved.replace("target = base_lr * batch / base_batch", "target = base_lr * (batch / base_batch) ** 0.5")
    assert mistake != solved
    (course / "exercises" / "ex10_scaling.py").write_text(mistake)
    code = main(["check", "ex10", "--json", "-"])
    captured = capsys.readouterr()
    entries = json.loads(captured.out)
    assert code == 1 and "ex10_scaling" in captured.err and "FAIL" in captured.err
    failed = next(e for e in entries if e["check"] == "lr_schedule")
    exercise = load_catalog(course).get("ex10")
    assert failed["status"] == "failed" and failed["hint"] is not None
    assert failed["hint_text"] == exercise.hints[failed["hint"] - 1].text
    assert all(e["hint"] is None and e["hint_text"] is None for e in entries if e["status"] == "passed")
    assert all(e["cause"] == "" for e in entries if e["status"] == "passed")  # a cause only where one is proven


def test_a_students_command_loads_no_instructor_code():
    """`grader check` parses and starts without the instructor's CLI, jinja2, the sandbox, the course lint or
    quiz rendering; `grader --help` still lists every command."""
    probe = (
        "import contextlib, io, sys, grader.cli\n"
        "with contextlib.suppress(SystemExit), contextlib.redirect_stdout(io.StringIO()):\n"
        "    grader.cli.main(['check', '--help'])\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] == 'jinja2' or m.startswith(\n"
        "    ('grader.instructor', 'grader.sandbox', 'grader.course_lint', 'grader.quiz'))))\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]", done.stdout
    wide = {**os.environ, "COLUMNS": "200"}
    listed = subprocess.run(
        [sys.executable, "-m", "grader", "--help"], capture_output=True, text=True, env=wide, check=True
    ).stdout
    assert re.findall(r"^    (\S+)", listed, re.M) == [
        *("list", "check", "hint", "watch", "reset", "node", "notebook", "doctor", "quiz"),
        *("grade", "gradebook", "regrade", "override", "report", "similarity", "gradescope", "slurm", "release"),
        "lint-course",
        "new-exercise",
        "export-grades",
        "feedback",
    ]


@pytest.mark.parametrize(
    ("argv", "hidden", "expected"),
    [
        (["check", "--launcher", "grader"], False, GradingPlan()),
        (
            ["check", "--solutions", "--launcher", "fork", "--world-size", "3", "--deadline", "5"],
            True,
            GradingPlan(world_sizes=(3,), deadline=5.0, hidden=True, launcher="fork"),
        ),
        (["watch", "--backend", "nccl"], False, GradingPlan(backend="nccl")),
        (
            ["grade", "s", "--out", "o", "-j", "3", "--timeout", "9", "--deadline", "4", "--launcher", "portable"],
            True,
            GradingPlan(deadline=4.0, hidden=True, launcher="portable", jobs=3, timeout=9.0),
        ),
    ],
)
def test_a_command_line_becomes_one_plan_and_the_judges_options_come_from_it(argv, hidden, expected):
    plan = GradingPlan.from_args(build_parser().parse_args(argv), hidden=hidden)
    assert plan == expected
    options = plan.grade_options()
    assert options.visibilities == (ALL_CHECKS if hidden else PUBLIC_CHECKS)
    assert (options.world_sizes, options.backend, options.deadline) == (plan.world_sizes, plan.backend, plan.deadline)
