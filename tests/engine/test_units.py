"""Small parts of the engine and the diagnosis, tested without starting ranks."""

from __future__ import annotations

import json
import tracemalloc
from collections.abc import Callable
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


def _peak_bytes(action: Callable[[], object]) -> int:
    """The most memory Python held at once while `action` ran, beyond what it held before."""
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _frame(body: bytes) -> bytes:
    return len(body).to_bytes(8, "big") + body


def test_a_report_whose_header_announces_too_much_is_refused_before_its_body_is_held():
    reader = wire.ReportReader("rank 2's report")
    chunk = b" " * (1 << 16)

    def feed() -> None:
        reader.add(bytes(wire.OPENING_BYTES) + (300 << 20).to_bytes(8, "big"))
        for _ in range(512):  # 32 MB more
            reader.add(chunk)

    assert _peak_bytes(feed) < 1 << 20
    assert reader.complete
    with pytest.raises(wire.WireError) as refused:
        reader.decode()
    assert str(refused.value) == "rank 2's report is 300 MB, over the grader's limit of 1 MB"


def test_bytes_past_a_report_are_counted_not_held():
    reader = wire.ReportReader()
    chunk = b" " * (1 << 16)
    opening, encode = wire.sealed_encoder(None)

    def feed() -> None:
        reader.add(opening + encode({"facts": {}, "error": None}))
        for _ in range(512):
            reader.add(chunk)

    assert _peak_bytes(feed) < 1 << 20
    assert reader.complete and reader.received > 32 << 20
    with pytest.raises(wire.WireError) as refused:
        reader.decode()
    assert str(refused.value) == (
        "the report channel was written by something other than the grader's rank runtime: "
        "bytes after the runtime's report"
    )


def test_a_report_within_the_size_limit_that_would_expand_is_refused_before_it_is_parsed(monkeypatch):
    body = b"[" + b"[]," * 300_000 + b"[]]"  # 900 KB that json.loads would turn into 20 MB of lists
    assert len(body) < wire.MAX_REPORT_BYTES
    monkeypatch.setattr(wire.json, "loads", lambda *_: pytest.fail("parsed"))
    with pytest.raises(wire.WireError) as refused:
        wire.decode(_frame(body), "rank 1's report")
    assert str(refused.value) == "rank 1's report holds 300,002 values, over the grader's limit of 32,768"


def test_commas_and_brackets_inside_strings_are_not_counted_as_values():
    facts = {"message": "[{,:" * 100_000, "x": [1, 2, 3]}
    assert wire.decode(wire.encode(facts)) == facts


@pytest.mark.parametrize(
    "body",
    [
        b"[" + b",".join([b'{"a":0}'] * 10_922) + b"]",  # the most values: dicts of one key
        b"[" + b",".join([b"[]"] * 16_383) + b"]",
        json.dumps("x" * ((1 << 20) - 2)).encode(),  # the most text
        json.dumps({"__array__": {"dtype": "uint8", "shape": [786_000], "data": "A" * 1_048_000}}).encode(),
    ],
    ids=["dicts", "lists", "string", "array"],
)
def test_what_a_report_at_the_limits_decodes_to_is_bounded(body):
    """The figures in wire.py's comment: a report at both limits decodes within 4.3 MB, keeping about 3."""
    assert len(body) <= wire.MAX_REPORT_BYTES
    kept: list[object] = []
    assert _peak_bytes(lambda: kept.append(wire.decode(_frame(body)))) < 5 << 20


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


def test_stuck_frame_never_names_the_graders_collective_watch():
    """Without a student's line, the frame named is the waiting thread's, not the watch thread's (collectives.py)."""
    dump = (
        "Current thread 0x00007f (most recent call first):\n"
        '  File "/venv/torch/distributed/distributed_c10d.py", line 5356 in barrier\n'
        '  File "/x/grader/engine/rank_runtime.py", line 10 in run_rank\n'
        "\nThread 0x00007e (most recent call first):\n"
        '  File "/x/grader/engine/collectives.py", line 390 in _watching\n'
        '  File "/usr/lib/python3.11/threading.py", line 982 in run\n'
    )
    assert stuck_frame(dump, None).startswith("distributed_c10d.py:5356 in barrier()")


def test_patches_restore_a_pybind_method_so_that_it_still_binds_self():
    """Set back as `getattr` reads it, ProcessGroup.allreduce would be a plain function: `pg.allreduce([t])`
    would then be called without `pg`. The collective log wraps every collective method (collectives.py)."""
    from torch._C._distributed_c10d import ProcessGroup

    from grader.rank.patches import Patches

    stored = vars(ProcessGroup)["allreduce"]
    patches = Patches()
    patches.replace(ProcessGroup, "allreduce", lambda *args, **kwargs: None)
    patches.restore()
    assert vars(ProcessGroup)["allreduce"] is stored


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


def test_a_trusted_workers_report_may_be_larger_than_a_ranks() -> None:
    """ex13's replays of every hypothesis are 2.4 MB at W=2: a job that loads no student code is read within
    TRUSTED_REPORT_BYTES, while a rank beside student code stays within MAX_REPORT_BYTES."""
    opening, encode = wire.sealed_encoder(None)
    frame = encode({"replays": [np.zeros(1 << 17, dtype=np.float32) for _ in range(6)]})  # about 4 MB
    assert len(frame) > 3 * wire.MAX_REPORT_BYTES
    for trusted, accepted in ((True, True), (False, False)):
        reader = wire.report_reader("rank 0's report", trusted)
        reader.add(opening + frame)
        if accepted:
            assert len(reader.decode()["replays"]) == 6
        else:
            with pytest.raises(wire.WireError, match="over the grader's limit of 1 MB"):
                reader.decode()
