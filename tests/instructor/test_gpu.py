"""NCCL on GPU nodes: one GPU per rank, or a clear skip where there are not enough."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from . import support

HAS_CUDA = Path("/dev/nvidiactl").exists()  # cheap: no torch import in the test process


@pytest.mark.skipif(HAS_CUDA, reason="this machine has GPUs: the skip path does not apply")
def test_nccl_without_gpus_is_skipped_with_the_reason(tmp_path: Path) -> None:
    done = support.run_grader(
        support.REPO, "check", "ex01", "--solutions", "--backend", "nccl", "--world-size", "2", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr  # skipped is not failed
    assert "SKIP" in done.stdout and "PASS" not in done.stdout and "no check ran: 4 skipped" in done.stdout
    assert "nccl needs one GPU per rank: 2 wanted, 0 visible" in done.stdout or "has no NCCL" in done.stdout


@pytest.mark.skipif(HAS_CUDA, reason="this machine has GPUs: the skip path does not apply")
def test_batch_on_nccl_without_gpus_gives_zero_points_with_the_reason(tmp_path: Path) -> None:
    out = tmp_path / "out"
    done = support.run_grader(
        support.REPO,
        "grade",
        str(support.solutions(tmp_path / "correct")),
        "--out",
        str(out),
        "--backend",
        "nccl",
        "--world-size",
        "2",
        "--no-sandbox",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    tests = json.loads((out / "correct" / "results.json").read_text())["tests"]
    assert tests and all(t["status"] == "failed" and t["score"] == 0 for t in tests)
    assert all(
        "skipped: nccl needs one GPU per rank: 2 wanted, 0 visible" in t["output"]
        or "skipped: this torch build has no NCCL" in t["output"]
        for t in tests
    )


@pytest.mark.skipif(not HAS_CUDA, reason="needs CUDA GPUs")
def test_solutions_pass_on_nccl(tmp_path: Path) -> None:
    done = support.run_grader(
        support.REPO, "check", "--solutions", "--all", "--backend", "nccl", "--world-size", "1", cwd=tmp_path
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "public checks passed" in done.stdout
