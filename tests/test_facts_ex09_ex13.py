"""Exercises 9 to 13 hold their reports to typed facts: reports that the typing showed could pass or crash a
check (a short list read through zip, a missing key read with []) now fail it with a sentence."""

from __future__ import annotations

from typing import Any, TypedDict

import pytest
from prepared import prepared_context

from grader.checks.ex09_checkpoint.facts import WriteEvent
from grader.checks.ex10_scaling import checks as ex10
from grader.checks.ex10_scaling.probes import BAD_ZERO_STAGES, PROBES
from grader.checks.ex11_syncbn_unused import checks as ex11
from grader.checks.ex13_zero1 import checks as ex13
from grader.judge.api import CheckContext, CheckFailed
from grader.judge.facts import problems


def _context(exercise: str, worker: str, facts: list[dict[str, Any]]) -> CheckContext:
    return prepared_context(exercise, worker, facts)


def _right(name: str) -> list[float]:
    return [float(ex10.expected(name, *args)) for args in PROBES[name]]


def test_ex10_right_values_pass() -> None:
    ex10.effective_batch(_context("ex10", "evaluate", [{"values": {"effective_batch": _right("effective_batch")}}]))


def test_ex10_fewer_values_than_inputs_fail_instead_of_judging_fewer_inputs() -> None:
    values = _right("effective_batch")[:1]  # zip used to judge this one input alone, and pass
    with pytest.raises(CheckFailed, match="cannot judge: 1 values of effective_batch for its 12 inputs"):
        ex10.effective_batch(_context("ex10", "evaluate", [{"values": {"effective_batch": values}}]))


def test_ex10_unknown_stages_unreported_fail_instead_of_passing() -> None:
    values = {"zero_memory_per_gpu": _right("zero_memory_per_gpu")}
    with pytest.raises(CheckFailed, match="cannot judge: no values of zero_memory_per_gpu at an unknown stage"):
        ex10.zero_memory(_context("ex10", "evaluate", [{"values": values}]))
    raised = [{"raised": "ValueError: unknown stage"}] * len(BAD_ZERO_STAGES)
    ex10.zero_memory(_context("ex10", "evaluate", [{"values": values, "bad_stage": raised}]))


def test_ex11_a_ddp_of_another_class_fails_with_a_sentence() -> None:
    facts = {"returned": "DistributedDataParallel", "norm_layers": {"norm": "SyncBatchNorm"}}
    with pytest.raises(CheckFailed, match="returned a DistributedDataParallel that is not torch's"):
        ex11.global_batch_statistics(_context("ex11", "train", [facts, facts]))


def test_ex13_a_rank_that_agreed_but_did_not_train_cannot_be_judged(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ex13, "_run_kwargs", lambda ctx: {})  # no reference run to draw the inputs
    ctx = _context("ex13", "train", [{"partitions": [], "partitions_done": True}])
    with pytest.raises(CheckFailed, match="rank 0 reported facts the grader cannot judge: the facts lack 'training'"):
        ex13._ranks(ctx)


class _Events(TypedDict):
    """A schema holding write events, as ex09's Resumed does."""

    events: list[WriteEvent]


@pytest.mark.parametrize(
    ("event", "fits"),
    [
        ({"op": "save", "path": "/c.pt", "into": "path", "start": 1.0, "end": 2.0}, True),
        ({"op": "load", "path": None, "start": 1.0}, True),
        ({"op": "rename", "path": "/t", "to": "/c.pt", "time": 1.0}, True),
        ({"op": "save", "path": "/c.pt", "into": "disk", "start": 1.0}, False),  # no such target
        ({"op": "write", "path": "/c.pt"}, False),  # no time
    ],
)
def test_ex09_write_events_are_judged_by_their_op(event: dict[str, Any], fits: bool) -> None:
    assert (problems({"events": [event]}, _Events) == []) == fits
