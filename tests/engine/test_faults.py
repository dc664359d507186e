"""Each way a rank can fail is reported as what it is, within the deadline plus 2 s, and leaves no
process behind. A fault that ends the run by itself gets a deadline it never needs (a loaded machine
can take seconds to start ranks, and a run cut by the deadline would say "hang", not what happened);
a hang gets a short one, since it takes all of it."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from grader.engine import Engine, Job, RunResult
from grader.judge.diagnose import failure_verdict
from grader.judge.verdict import Verdict

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "fault_workers.py"
DEADLINE = 20.0  # a fault that ends the run by itself is reported long before this
HANG_DEADLINE = 3.0  # a hang takes the whole deadline


@pytest.fixture(scope="module")
def fault_engine() -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        with Engine(preload=["fault_workers"]) as engine:
            engine.wait_ready()
            yield engine


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def run_fault(
    engine: Engine, worker: str, deadline: float = DEADLINE, **kwargs
) -> tuple[RunResult, Verdict | None, float]:
    engine.wait_warm()  # what is timed is the run, not the portable pool's refill
    started = time.monotonic()
    result = engine.run(Job(f"fault_workers:{worker}", 2, kwargs, student_file=FAULTS, deadline=deadline))
    elapsed = time.monotonic() - started
    assert elapsed < deadline + 2.0
    for rank in result.ranks:
        assert not _alive(rank.pid), f"rank {rank.rank} (pid {rank.pid}) outlived its run"
    return result, failure_verdict(result, FAULTS), elapsed


def test_healthy_run_reports_facts(fault_engine):
    result, verdict, _ = run_fault(fault_engine, "healthy")
    assert result.ok and not verdict
    assert [float(r.facts["sum"][0]) for r in result.ranks] == [3.0, 3.0]


def test_a_raising_rank_is_named_with_its_line_and_its_peer_is_stopped(fault_engine):
    result, verdict, elapsed = run_fault(fault_engine, "raises")
    assert verdict is not None
    assert "rank 1 raised ValueError: planted error on rank 1" in verdict.message
    assert "fault_workers.py" in verdict.message and "in raises()" in verdict.message
    assert result.ranks[0].stopped == "peer failure"
    assert elapsed < 2.5  # the sleeping peer is stopped after a short grace, not at the deadline


def test_a_hang_names_rank_and_line_and_kills_the_process_tree(fault_engine, tmp_path):
    pid_file = str(tmp_path / "grandchild")
    result, verdict, elapsed = run_fault(fault_engine, "hangs", HANG_DEADLINE, pid_file=pid_file)
    assert verdict is not None
    assert result.timed_out and elapsed >= HANG_DEADLINE
    assert "did not finish within the 3 s deadline" in verdict.message
    assert "fault_workers.py" in verdict.message and "in hangs()" in verdict.message
    for rank in range(2):
        grandchild = int(Path(f"{pid_file}.{rank}").read_text())
        deadline = time.monotonic() + 1.0
        while _alive(grandchild) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert not _alive(grandchild), "a process started by a rank outlived the run"


def test_abort_is_explained_in_plain_words(fault_engine):
    _, verdict, _ = run_fault(fault_engine, "aborts")
    assert verdict is not None
    assert "rank 1 aborted (SIGABRT)" in verdict.message
    assert "mismatched tensor shapes" in verdict.message
    assert "in aborts()" in verdict.message  # the line, from the crash's stack dump


def test_os_exit_before_reporting(fault_engine):
    _, verdict, _ = run_fault(fault_engine, "exits_quietly")
    assert verdict is not None
    assert "exited with code 0 before reporting" in verdict.message


def test_sys_exit_is_reported_as_such(fault_engine):
    _, verdict, _ = run_fault(fault_engine, "calls_sys_exit")
    assert verdict is not None
    assert "the code called sys.exit(0)" in verdict.message


MISMATCH_DEADLINE = 60.0  # gloo's timeout is 2 s less: a mismatch found by waiting it out takes a minute
MISMATCH_BOUND_S = 15.0  # measured 1-2 s a run at W=2 (benchmarks/bench_mismatch.py); loaded cores take longer
MISMATCHES = {
    "barrier_on_rank_zero_only": r"rank 0 called barrier\(\) at fault_workers.py:\d+, rank 1 had already finished",
    "all_reduce_against_broadcast": r"rank 0 called all_reduce \(4 floats\) at fault_workers.py:\d+, rank 1 called "
    r"broadcast from rank 0 \(4 floats\) at fault_workers.py:\d+",
    "broadcast_from_own_rank": r"rank 0 called broadcast from rank 0 \(4 floats\) at fault_workers.py:\d+, rank 1 "
    r"called broadcast from rank 1 \(4 floats\) at fault_workers.py:\d+",
    "mismatched_collective": r"rank 0 called all_reduce \(1 float\) at fault_workers.py:\d+, rank 1 called "
    r"all_reduce \(2 floats\) at fault_workers.py:\d+",
}


@pytest.mark.parametrize("worker", list(MISMATCHES))
@pytest.mark.parametrize("debug_collectives", [False, True])
def test_a_collective_mismatch_is_named_with_each_ranks_call_in_seconds(fault_engine, worker, debug_collectives):
    """Without DETAIL (exercises that build DDP) gloo would wait out its timeout, or abort one rank; with it,
    torch says "Detected mismatch" without the lines, or, for another root, nothing."""
    fault_engine.wait_warm()
    job = Job(f"fault_workers:{worker}", 2, student_file=FAULTS, deadline=MISMATCH_DEADLINE)
    started = time.monotonic()
    result = fault_engine.run(replace(job, debug_collectives=debug_collectives))
    elapsed = time.monotonic() - started
    verdict = failure_verdict(result, FAULTS)
    assert verdict is not None
    assert re.match(r"ranks called different collectives: " + MISMATCHES[worker] + "\n", verdict.message), verdict
    assert "in the same order, with the same root, sizes and dtypes" in verdict.message
    assert "fault_workers.py:" in verdict.details and "`dist." in verdict.details
    assert elapsed < MISMATCH_BOUND_S


def test_correct_code_waiting_long_for_a_peer_is_no_mismatch(fault_engine):
    """A guard: rank 0 waits 3 s in an all_reduce rank 1 has not reached yet; the watch compares and finds nothing."""
    result, verdict, elapsed = run_fault(fault_engine, "reduces_after_a_while")
    assert result.ok and not verdict, verdict
    assert [float(r.facts["sum"][0]) for r in result.ranks] == [3.0, 3.0]
    assert elapsed >= 3.0


def test_output_flood_is_capped_and_does_not_stall(fault_engine):
    result, verdict, _ = run_fault(fault_engine, "floods_output")
    assert result.ok and not verdict
    for rank in result.ranks:
        assert rank.output_dropped > 9 * 1024 * 1024
        assert len(rank.output) < 40 * 1024
        assert "bytes of output not shown" in rank.output


def test_code_that_kills_the_zygote_fails_its_run_and_the_next_run_gets_a_new_one(fault_engine):
    from grader.engine import EngineError

    said = r"stopped unexpectedly \(killed by SIGKILL: .*\), \d+\.\d s after it was ready, during run\d+ "
    with pytest.raises(EngineError, match=said + r"\(fault_workers:kills_the_launcher on 2 ranks\):"):
        fault_engine.run(Job("fault_workers:kills_the_launcher", 2, student_file=FAULTS, deadline=DEADLINE))
    result = fault_engine.run(Job("fault_workers:healthy", 2, student_file=FAULTS))  # includes a new warm-up
    assert result.ok


def test_temporary_files_a_rank_leaves_go_with_its_run(fault_engine):
    result, verdict, _ = run_fault(fault_engine, "leaves_temp_files")
    assert result.ok and not verdict
    left = [rank.facts[kind] for rank in result.ranks for kind in ("folder", "file")]
    assert all(str(fault_engine.scratch_root) in path for path in left), left  # not the system's temp folder
    assert not any(os.path.exists(path) for path in left), left


def test_a_gpu_call_on_a_cpu_run_keeps_torchs_message_and_says_what_it_means(fault_engine):
    _, verdict, _ = run_fault(fault_engine, "model_to_rank")
    assert verdict is not None
    assert "raised RuntimeError: Cannot access accelerator device when none is available" in verdict.message
    assert "what this error means here: this run has no GPU" in verdict.message


@pytest.mark.parametrize("worker", ["raises_while_peer_reduces", "dies_while_peer_reduces"])
@pytest.mark.parametrize("debug_collectives", [False, True])
def test_a_peers_connection_error_is_named_as_the_echo_of_the_rank_that_failed(fault_engine, worker, debug_collectives):
    fault_engine.wait_warm()
    job = Job(f"fault_workers:{worker}", 2, student_file=FAULTS, deadline=8.0, debug_collectives=debug_collectives)
    result = fault_engine.run(job)
    verdict = failure_verdict(result, FAULTS)
    assert verdict is not None
    assert verdict.message.startswith("rank 1 "), verdict.message  # the rank that failed by itself
    if result.ranks[0].error is not None:  # rank 0's collective failed before the grader stopped it
        assert re.search(r"rank 0's error, \".+\", is the echo of rank 1's failure above", verdict.message)
        assert "rank 0" not in verdict.message.splitlines()[0]
