"""The sandbox's parts: what the rank view holds, how each mode refuses, what the limits do."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import REPO
from instructor import support

from grader.catalog import load_catalog
from grader.engine import Engine, Job
from grader.judge.diagnose import failure_verdict
from grader.sandbox import SandboxError, open_sandbox, rank_view, unprivileged
from grader.sandbox.limits import Limits

PACKAGE = REPO / "grader"


@pytest.fixture(scope="module")
def view(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = rank_view.materialize(PACKAGE, tmp_path_factory.mktemp("view"))
    yield folder
    rank_view.remove(folder)


def test_the_view_holds_the_rank_side_and_nothing_of_the_judge(view):
    files = {str(p.relative_to(view)) for p in view.rglob("*.py")}
    catalog = load_catalog(REPO)
    for exercise in catalog.exercises:
        assert exercise.workers_module.replace(".", "/") + ".py" in files
    assert "grader/engine/rank_runtime.py" in files and "grader/engine/zygote.py" in files
    for name in ("checks.py", "hidden.py", "answers.py"):
        assert not [f for f in files if f.endswith("/" + name)], name
    for judge in ("grader/judge/api.py", "grader/judge/runner.py", "grader/judge/diagnose.py", "grader/cli.py"):
        assert judge not in files
    assert not [f for f in files if f.startswith(("grader/instructor/", "grader/quiz/", "grader/sandbox/"))]


def test_every_exercises_workers_load_from_the_view_alone(view):
    modules = [e.workers_module for e in load_catalog(REPO).exercises]
    code = "import importlib, sys\nfor m in sys.argv[1:]: importlib.import_module(m)\nimport grader.engine.zygote"
    done = subprocess.run(
        [sys.executable, "-s", "-P", "-c", code, *modules],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(view), "PATH": os.environ["PATH"]},
        cwd=view,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_view_is_read_only(view):
    target = view / "grader" / "engine" / "rank_runtime.py"
    assert not os.access(target, os.W_OK) or os.geteuid() == 0  # root may write anything; the mount is read-only
    assert oct(target.stat().st_mode & 0o777) == "0o444"


def test_an_unknown_mode_is_refused(tmp_path):
    with pytest.raises(SandboxError, match="unknown sandbox"):
        open_sandbox("chroot", REPO, tmp_path)


def test_the_user_fallback_refuses_with_its_reason_where_it_cannot_run(tmp_path):
    problem = unprivileged.unavailable(REPO, tmp_path)
    if problem is None:
        pytest.skip("the unprivileged-user sandbox can run here")
    with pytest.raises(SandboxError, match="cannot sandbox as an unprivileged user"):
        open_sandbox("user", REPO, tmp_path)


def test_the_user_fallback_tells_open_folders_from_closed_ones(tmp_path):
    assert not unprivileged.closed_to_others(Path("/usr/lib"))
    assert unprivileged.open_to_others(Path("/usr/bin"))
    course = tmp_path / "course"
    course.mkdir()
    course.chmod(0o750)
    assert unprivileged.closed_to_others(course / "solutions")


@pytest.fixture(scope="module")
def hidden_course_cli(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support.course_copy(tmp_path_factory.mktemp("course"))


def test_no_sandbox_says_loudly_what_it_gives_up(hidden_course_cli, tmp_path):
    submission = tmp_path / "empty"
    submission.mkdir()
    done = support.run_grader(
        hidden_course_cli, "grade", str(submission), "--out", str(tmp_path / "out"), "--no-sandbox", "--world-size", "2"
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING: grading without a sandbox" in done.stderr and "solutions" in done.stderr


def test_a_sandbox_that_cannot_run_is_one_line_and_exit_2(hidden_course_cli, tmp_path):
    if unprivileged.unavailable(hidden_course_cli, tmp_path / "out") is None:
        pytest.skip("the unprivileged-user sandbox can run here")
    done = support.run_grader(
        hidden_course_cli, "grade", str(tmp_path), "--out", str(tmp_path / "out"), "--sandbox", "user"
    )
    assert done.returncode == 2
    assert done.stderr.startswith("grader: cannot sandbox as an unprivileged user:") and done.stderr.count("\n") == 1


def test_memory_beyond_the_limit_ends_the_run_in_seconds(bwrap_available, tmp_path):
    sandbox = open_sandbox("bubblewrap", REPO, tmp_path, Limits(memory_bytes=768 << 20))
    assert sandbox is not None
    workspace = Path(tempfile.mkdtemp(dir=tmp_path))
    student = workspace / "ex01_process_group.py"
    student.write_text(
        "def setup_ddp(rank, world_size, backend=None):\n    hog = bytearray(2 << 30)\ndef cleanup_ddp():\n    pass\n"
    )
    try:
        with Engine(confinement=sandbox.confine(workspace)) as engine:
            started = time.monotonic()
            result = engine.run(
                Job(
                    "grader.checks.ex01_process_group.workers:join_and_leave",
                    1,
                    {"summands": [1], "broadcast": [1]},
                    student_file=student,
                    deadline=30,
                )
            )
            assert time.monotonic() - started < 15
            rank = result.ranks[0]
            assert (rank.status == -9 and result.memory_exceeded) or "MemoryError" in str(rank.error), rank
            if result.memory_exceeded:
                verdict = failure_verdict(result, student)
                assert verdict is not None
                assert "memory limit of the sandbox" in verdict.message, verdict
    finally:
        sandbox.close()
