"""The torchrun mode: the same checks, with ranks started by torchrun (gloo, W=2), on one node
(--standalone) or on two simulated on this machine (node 0 the grader, node 1 a follower).

Each run pays torchrun's start-up (seconds), so only exercise 2, whose checks share one run.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from grader.catalog import load_catalog
from grader.engine import EngineError, Job
from grader.engine.cluster import Cluster
from grader.engine.supervisor import free_port
from grader.engine.torchrun_launch import TorchrunEngine
from grader.judge.runner import GradeOptions, grade_exercise

from . import support


def test_solution_passes_under_torchrun(tmp_path: Path) -> None:
    done = support.run_grader(
        support.REPO,
        "check",
        "ex02",
        "--path",
        str(support.REPO / "solutions"),
        "--launcher",
        "torchrun",
        "--world-size",
        "2",
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "public checks passed: 3/3" in done.stdout


def test_stub_fails_with_its_reason_under_torchrun() -> None:
    exercise = load_catalog(support.REPO).get("ex02")
    results = grade_exercise(
        TorchrunEngine(),
        exercise,
        support.REPO / "exercises" / exercise.file,
        GradeOptions(world_sizes=(2,)),
    )
    assert [r.status for r in results] == ["failed"] * 3
    assert all("not implemented yet" in r.message for r in results)


def _follower(cluster: list[str]) -> subprocess.Popen[str]:
    """Node 1: a `grader node` follower on this machine."""
    env = {**os.environ, "GRADER_COURSE": str(support.REPO), "PYTHONPATH": str(support.REPO), "NO_COLOR": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "grader", "node", "--node-rank", "1", *cluster],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _cluster_args(shared: Path) -> list[str]:
    return ["--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{free_port()}", "--shared-dir", str(shared)]


def _left_behind(shared: Path) -> str:
    return subprocess.run(["pgrep", "-af", str(shared)], capture_output=True, text=True).stdout.strip()


def test_two_nodes_give_the_zygotes_verdicts(tmp_path: Path) -> None:
    """Node 0 grades, node 1 is a follower: one rank each, meeting by c10d rendezvous."""
    cluster = _cluster_args(tmp_path)
    follower = _follower(cluster)
    try:
        done = support.run_grader(
            support.REPO,
            "check",
            "ex02",
            "--path",
            str(support.REPO / "solutions"),
            "--launcher",
            "torchrun",
            "--world-size",
            "2",
            *cluster,
            cwd=tmp_path,
        )
        follower_output = follower.communicate(timeout=10)[0]  # node 0's stop marker ends it
    finally:
        follower.kill()
    assert done.returncode == 0, done.stdout + done.stderr + follower_output
    assert "public checks passed: 3/3" in done.stdout
    assert "rank(s) on this node" in follower_output and "stopping" in follower_output


def test_a_hang_on_two_nodes_is_named_on_both_and_leaves_nothing(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    folder = support.hanging(tmp_path / "hangs")
    cluster_args = _cluster_args(shared)
    follower = _follower(cluster_args)
    cluster = Cluster(2, cluster_args[3], shared)
    exercise = load_catalog(support.REPO).get("ex02")
    try:
        with TorchrunEngine(cluster=cluster) as engine:  # the default allowance: torch imports slowly under load
            engine.start()
            options = GradeOptions(world_sizes=(2,), deadline=2.0, only=frozenset({"shards_are_disjoint"}))
            results = grade_exercise(engine, exercise, folder / exercise.file, options)
        follower.communicate(timeout=10)
    finally:
        follower.kill()
    assert [r.status for r in results] == ["failed"]
    both = results[0].message + results[0].details
    # both ranks named (in one sentence when stuck at the same line), each with the line its node's stack dump showed
    assert "every rank did not finish" in both or ("rank 0 did not finish" in both and "rank 1 did not finish" in both)
    assert both.count(
        "did not finish within the 2 s deadline (a hang?)\n  it was at ex02_data_sharding.py"
    ) == both.count("did not finish"), both
    assert not _left_behind(shared), _left_behind(shared)


def test_a_missing_node_is_named_within_the_deadline(tmp_path: Path) -> None:
    cluster = Cluster(2, f"127.0.0.1:{free_port()}", tmp_path)
    started = time.monotonic()
    with TorchrunEngine(cluster=cluster, start_allowance=4.0) as engine:
        engine.start()
        with pytest.raises(EngineError, match=r"ranks 0, 1 never started: node\(s\) 1 of 2 never took up the run"):
            engine.run(Job("grader.engine.probe:accelerators", 2, deadline=2.0))
    assert time.monotonic() - started < 2.0 + 4.0 + 5.0
    assert (tmp_path / "stop").exists() and not list((tmp_path / "runs").iterdir())
    assert not _left_behind(tmp_path), _left_behind(tmp_path)


def test_ranks_still_starting_when_time_runs_out_are_no_hang_of_the_submission() -> None:
    """The deadline counts from the moment the ranks have imported torch; ranks that never got that
    far (here: an allowance far shorter than any torch import) are the node's trouble, said as such."""
    with TorchrunEngine(start_allowance=0.05) as engine:
        with pytest.raises(
            EngineError,
            match=r"rank\(s\) 0, 1 were still importing torch after the 0.05 s start "
            r"allowance: the node is overloaded",
        ):
            engine.run(Job("grader.engine.probe:accelerators", 2, deadline=0.05))


def test_a_world_size_that_cannot_be_split_over_the_nodes_is_refused(tmp_path: Path) -> None:
    done = support.run_grader(
        support.REPO,
        "check",
        "ex02",
        "--launcher",
        "torchrun",
        "--world-size",
        "3",
        *_cluster_args(tmp_path),
        cwd=tmp_path,
    )
    assert done.returncode == 2
    assert "world size 3 cannot be split over 2 nodes: use a multiple of 2" in done.stderr
