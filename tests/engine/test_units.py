"""Small parts of the engine and the diagnosis, tested without starting ranks."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from grader.catalog import Catalog
from grader.engine import Job, RankOutcome, RunResult, wire
from grader.engine.contract import CappedOutput
from grader.judge.api import CheckContext, CheckFailed, RunCache
from grader.judge.diagnose import failure_verdict, stuck_frame


def test_wire_round_trip_keeps_arrays_and_structure():
    facts: dict[str, Any] = {
        "a": np.arange(6, dtype=np.float32).reshape(2, 3),
        "b": [1, "x", None, True],
        "c": {"d": 2.5},
    }
    back = wire.decode(wire.encode(facts))
    assert np.array_equal(back["a"], facts["a"]) and back["a"].dtype == np.float32
    assert back["b"] == [1, "x", None, True] and back["c"] == {"d": 2.5}


@pytest.mark.parametrize("frame", [b"", b"\x00" * 8 + b"{", wire.encode({"x": 1})[:-1]])
def test_wire_rejects_damaged_frames(frame):
    with pytest.raises(wire.WireError):
        wire.decode(frame)


def test_wire_refuses_object_arrays():
    payload = wire.encode({"x": 1}).replace(b'{"x":1}', b'{"x":{"__array__":{"dtype":"object","shape":[1],"data":""}}}')
    payload = len(payload[8:]).to_bytes(8, "big") + payload[8:]
    with pytest.raises(wire.WireError, match="not allowed"):
        wire.decode(payload)


def test_capped_output_keeps_head_and_tail():
    capped = CappedOutput(head=4, tail=4)
    capped.add(b"abcdefghij")
    capped.add(b"klmnop")
    assert capped.dropped == 8
    assert capped.text().startswith("abcd") and capped.text().endswith("mnop")


def test_stuck_frame_prefers_the_students_innermost_line(tmp_path: Path):
    student = tmp_path / "ex.py"
    student.write_text("def f():\n    wait_forever()\n")
    dump = (
        "Thread 0x00007f (most recent call first):\n"
        '  File "/usr/lib/python3.11/threading.py", line 320 in wait\n'
        f'  File "{student}", line 2 in f\n'
        '  File "/x/grader/engine/rank_runtime.py", line 10 in run_rank\n'
    )
    assert stuck_frame(dump, student) == "ex.py:2 in f(): `wait_forever()`"


def _result(*outcomes: RankOutcome) -> RunResult:
    return RunResult(Job("m:f", len(outcomes)), list(outcomes), 0.1, False)


class _NoRuns:
    """The runner of a check that only judges a result it is given: starting ranks is not expected."""

    def run(self, job: Job) -> RunResult:
        raise AssertionError(f"unexpected run of {job.target}")

    def new_scratch(self) -> str:
        raise AssertionError("unexpected scratch folder")

    def discard_scratch(self, path: str) -> None:
        pass


def _judging(catalog: Catalog) -> CheckContext:
    """A check's context that judges results only (any exercise: it runs nothing)."""
    return CheckContext(RunCache(_NoRuns()), catalog.exercises[0], student_file=Path("x.py"), world_size=2)


def test_crash_at_teardown_after_a_full_report_is_not_a_failure(catalog: Catalog) -> None:
    reported = {"facts": {"x": 1}, "error": None}
    result = _result(RankOutcome(0, report=reported, status=0), RankOutcome(1, report=reported, status=-6))
    assert failure_verdict(result, None) is None
    context = _judging(catalog)
    assert context.require(result) == [{"x": 1}, {"x": 1}]
    assert "died by signal 6 after it had reported" in context.notes[0]


def test_a_missing_report_fails_closed_even_with_exit_code_zero(catalog: Catalog) -> None:
    result = _result(
        RankOutcome(0, report={"facts": {}, "error": None}, status=0),
        RankOutcome(1, report=None, report_problem="no report", status=0),
    )
    verdict = failure_verdict(result, None)
    assert verdict is not None
    assert verdict.status == "failed" and "rank 1 exited with code 0 before reporting" in verdict.message
    context = _judging(catalog)
    with pytest.raises(CheckFailed):
        context.require(result)


def test_a_lost_race_for_the_free_port_is_recognised():
    from grader.engine.supervisor import _lost_port_race

    message = "The server socket has failed to listen ... code: -98, name: EADDRINUSE, message: address already in use"
    collided = RankOutcome(0, report={"facts": {}, "error": {"message": message}}, status=0)
    assert _lost_port_race(_result(collided, RankOutcome(1, report=None, status=-9)))
    assert not _lost_port_race(_result(RankOutcome(0, report={"facts": {}, "error": None}, status=0)))


def test_an_engine_failure_is_marked_on_each_result_in_the_same_words(catalog, tmp_path):
    """Any `Runner` grades (no Engine needed); a broken one marks its results, which the batch reads to
    replace the engine, and the mark stays out of the result's record."""
    from grader.engine import EngineError
    from grader.grading_engines import _engine_failed
    from grader.judge.runner import ENGINE_FAILURE, grade_exercise

    class Broken:
        def run(self, job: Job) -> RunResult:
            raise EngineError("the rank launcher is gone")

        def new_scratch(self) -> str:
            return str(tmp_path)

        def discard_scratch(self, path: str) -> None:
            pass

    exercise = catalog.get("ex01_process_group")
    solution = Path(__file__).resolve().parents[2] / "solutions" / exercise.file
    results = grade_exercise(Broken(), exercise, solution)
    assert results and all(r.status == "error" and r.engine_failed for r in results)
    assert all(r.message == f"{ENGINE_FAILURE}: the rank launcher is gone" for r in results)
    assert _engine_failed(results) and "engine_failed" not in results[0].to_json()
    assert not _engine_failed([replace(results[0], engine_failed=False)])
