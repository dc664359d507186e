"""The grader's memory is bounded by construction: whatever a rank writes into its streams (stack
dumps, reports over the size limit, bytes past a report, reports that would expand when decoded),
the grader holds a few megabytes of it, and a refused report is that rank's problem, in a sentence.

What the grader's process holds is measured with tracemalloc around one run (its Python objects: the
buffers a flood would grow); benchmarks/bench_memory.py measures the whole process's peak RSS."""

from __future__ import annotations

import os
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from grader.engine import Engine, Job, RunResult, wire
from grader.engine.contract import OUTPUT_HEAD, OUTPUT_TAIL, STACK_DUMP_CHARS
from grader.engine.torchrun_launch import TorchrunEngine
from grader.judge.diagnose import failure_verdict

HERE = Path(__file__).resolve().parent
FAULTS = HERE / "fault_workers.py"
FLOOD_MB = 48  # per rank: before its readers had a total cap, the grader held 127 to 208 MB of two such floods
HELD_BOUND = 8 << 20  # what one run of two ranks may make the grader hold at once, floods included


@pytest.fixture(scope="module")
def fault_engine() -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        with Engine(preload=["fault_workers"]) as engine:
            engine.wait_ready()
            yield engine


def run_measured(engine: Engine, worker: str, deadline: float = 20.0, **kwargs: Any) -> tuple[RunResult, int]:
    """The run's result, and the most the grader's Python objects grew while it ran (bytes)."""
    engine.wait_warm()
    tracemalloc.start()
    try:
        result = engine.run(Job(f"fault_workers:{worker}", 2, kwargs, student_file=FAULTS, deadline=deadline))
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_stack_dump_flood_is_held_to_its_tail_and_the_dump_at_the_deadline_still_names_the_line(fault_engine):
    result, held = run_measured(fault_engine, "floods_stacks", deadline=4.0, megabytes=FLOOD_MB)
    assert held < HELD_BOUND, f"the grader held {held / 1e6:.0f} MB"
    verdict = failure_verdict(result, FAULTS)
    assert verdict is not None and result.timed_out
    assert "in floods_stacks()" in verdict.message  # the last dump, asked for at the deadline
    assert all(len(rank.stack_dump) <= STACK_DUMP_CHARS for rank in result.ranks)


@pytest.mark.parametrize(
    "announced, said",
    [
        (300 << 20, "rank {}'s report is 300 MB, over the grader's limit of 1 MB"),
        (
            1000,
            "rank {}'s report channel was written by something other than the grader's rank runtime: "
            "a report the runtime did not seal",
        ),
    ],
    ids=["announced", "past-the-frame"],
)
def test_an_oversized_report_is_refused_in_a_sentence_without_being_held(fault_engine, announced, said):
    result, held = run_measured(fault_engine, "sends_an_oversized_report", announced=announced, megabytes=FLOOD_MB)
    assert held < HELD_BOUND, f"the grader held {held / 1e6:.0f} MB"
    assert [rank.report_problem for rank in result.ranks] == [said.format(rank) for rank in range(2)]


def test_a_report_that_would_expand_when_decoded_is_refused_in_a_sentence(fault_engine):
    result, held = run_measured(fault_engine, "sends_an_expanding_report", values=300_000)
    assert held < HELD_BOUND, f"the grader held {held / 1e6:.0f} MB"
    for rank in result.ranks:  # the lists, the report's keys and rendezvous_ranks
        assert rank.report_problem == (
            f"rank {rank.rank}'s report holds 300,011 values, over the grader's limit of {wire.MAX_REPORT_VALUES:,}"
        )
    verdict = failure_verdict(result, FAULTS)
    assert verdict is not None and "sent a damaged report (rank 0's report holds 300,011 values" in verdict.message


def test_torchrun_rank_files_are_read_within_the_same_bounds(tmp_path):
    """The torchrun mode reads a rank's report, output and stack dump from files it may have made huge."""
    with open(tmp_path / "rank0.report", "wb") as report:
        report.write(bytes(wire.OPENING_BYTES) + (300 << 20).to_bytes(8, "big"))
        report.truncate(300 << 20)
    for name in ("rank0.out", "rank0.stack"):
        with open(tmp_path / name, "wb") as flood:
            flood.write(b"start\n")
            flood.truncate(256 << 20)
            flood.seek(0, os.SEEK_END)
            flood.write(b"\nend\n")
    tracemalloc.start()
    try:
        outcome = TorchrunEngine._outcome(0, tmp_path, timed_out=False, trusted=False)
        held = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert held < HELD_BOUND, f"the grader held {held / 1e6:.0f} MB"
    assert outcome.report_problem == "rank 0's report is 300 MB, over the grader's limit of 1 MB"
    assert outcome.output.startswith("start") and outcome.output.endswith("end\n")
    assert outcome.output_dropped == (256 << 20) + 5 - OUTPUT_HEAD - OUTPUT_TAIL
    assert outcome.stack_dump.endswith("end\n") and len(outcome.stack_dump) == STACK_DUMP_CHARS
