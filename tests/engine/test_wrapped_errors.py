"""torch's wrapping exceptions said as each rank's (or process's) own first error, once (wrapped_errors.py).

DCP's CheckpointException carries every failing rank's traceback in its message and
torch.multiprocessing's ProcessRaisedException the child's: a student read about 60 lines, twice."""

from __future__ import annotations

from pathlib import Path

import pytest
from torch.distributed.checkpoint.api import CheckpointException, _wrap_exception
from torch.multiprocessing import ProcessRaisedException

from grader.engine.rank_runtime import describe_exception
from grader.engine.wrapped_errors import short_message, wrapped_failures


def _raised(error: BaseException) -> BaseException:
    try:
        raise error
    except BaseException as exc:
        return exc


def _checkpoint_exception(errors: dict[int, BaseException]) -> BaseException:
    return _raised(CheckpointException("failed", {rank: _wrap_exception(_raised(e)) for rank, e in errors.items()}))


def test_each_ranks_own_error_in_one_line_the_same_error_said_once() -> None:
    exc = _checkpoint_exception({0: RuntimeError("Missing key: net.w"), 1: RuntimeError("Missing key: net.w")})
    assert short_message(wrapped_failures(exc)) == "rank 0, rank 1: RuntimeError: Missing key: net.w"
    other = _checkpoint_exception({0: ValueError("size 3"), 1: KeyError("x")})
    assert short_message(wrapped_failures(other)) == "rank 0: ValueError: size 3; rank 1: KeyError: 'x'"


def test_a_reported_checkpoint_exception_holds_no_traceback_in_its_message_and_each_once_below() -> None:
    exc = _checkpoint_exception({0: RuntimeError("Missing key: net.w"), 1: RuntimeError("Missing key: net.w")})
    assert str(exc).count("Traceback") == 2  # what torch says: each rank's whole traceback, in the message
    facts = describe_exception(exc, Path("student.py"))
    assert facts["message"] == "rank 0, rank 1: RuntimeError: Missing key: net.w"
    assert "Traceback" not in facts["message"]
    assert facts["traceback"].count("--- rank 0's own error ---") == 1
    assert facts["traceback"].count("--- rank 1's own error ---") == 1
    assert facts["traceback"].count("RuntimeError: Missing key: net.w") == 3  # the summary, then each rank's once
    assert [link.get("who") for link in facts["chain"][:3]] == [None, "rank 0", "rank 1"]


def test_a_spawned_processs_error_is_its_last_line() -> None:
    child = 'Traceback (most recent call last):\n  File "x.py", line 3, in run\n    f()\nValueError: no rank 5\n'
    exc = _raised(ProcessRaisedException(f"\n\n-- Process 1 terminated with the following error:\n{child}", 1, 4242))
    facts = describe_exception(exc, None)
    assert facts["message"] == "process 1: ValueError: no rank 5"
    assert facts["traceback"].count("ValueError: no rank 5") == 2  # the summary, then the child's traceback once


@pytest.mark.parametrize("error", [ValueError("plain"), CheckpointException("odd", {}), KeyboardInterrupt()])
def test_any_other_exception_is_said_as_it_is(error: BaseException) -> None:
    exc = _raised(error)
    assert wrapped_failures(exc) == []
    assert describe_exception(exc, None)["message"] == str(exc)
