"""The torchrun mode: the same checks, with ranks started by torchrun (--standalone, gloo, W=2).

Each run pays torchrun's start-up (seconds), so only exercise 2, whose checks share one run.
"""

from __future__ import annotations

from pathlib import Path

from grader.catalog import load_catalog
from grader.checks.runner import GradeOptions, grade_exercise
from grader.engine.torchrun_launch import TorchrunEngine

from . import support


def test_solution_passes_under_torchrun(tmp_path: Path) -> None:
    done = support.run_grader(support.REPO, "check", "ex02", "--path", str(support.REPO / "solutions"),
                              "--launcher", "torchrun", "--world-size", "2", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "public checks passed: 3/3" in done.stdout


def test_stub_fails_with_its_reason_under_torchrun() -> None:
    exercise = load_catalog(support.REPO).get("ex02")
    results = grade_exercise(TorchrunEngine(), exercise, support.REPO / "exercises" / exercise.file,  # type: ignore[arg-type]
                             GradeOptions(world_sizes=(2,)))
    assert [r.status for r in results] == ["failed"] * 3
    assert all("not implemented yet" in r.message for r in results)
