"""Errors as a student meets them (issue 21, point 4): a wrapper's chain is followed to the
rank's own error, torch's errors with one meaning in this course are explained, an echo is traced
to the rank that caused it."""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.engine import Job, RankOutcome, RunResult
from grader.engine.rank_runtime import describe_exception, exception_chain
from grader.judge.diagnose import MEANING_PREFIX, failure_verdict
from grader.judge.explain import error_messages, error_types, explain, known_errors, parse


def _raised(make) -> BaseException:
    try:
        make()
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("nothing raised")


def _from(suppress: bool, explicit: bool):
    def make() -> None:
        try:
            raise ValueError("the rank's own error")
        except ValueError as exc:
            if suppress:
                raise RuntimeError("wrapped") from None
            if explicit:
                raise RuntimeError("wrapped") from exc
            raise RuntimeError("wrapped")  # noqa: B904 - the implicit __context__ is what is tested

    return make


def test_the_chain_follows_cause_and_context_but_not_a_suppressed_context():
    assert [type(e).__name__ for e in exception_chain(_raised(_from(False, True)))] == ["RuntimeError", "ValueError"]
    assert [type(e).__name__ for e in exception_chain(_raised(_from(False, False)))] == ["RuntimeError", "ValueError"]
    assert [type(e).__name__ for e in exception_chain(_raised(_from(True, False)))] == ["RuntimeError"]


def test_a_reported_error_carries_its_chain_and_the_judge_searches_all_of_it():
    error = describe_exception(_raised(_from(False, True)), Path(__file__))
    assert error["message"] == "wrapped"
    assert "the rank's own error" in error_messages(error)
    assert error_types(error) == ["RuntimeError", "ValueError"]
    hidden = describe_exception(_raised(_from(True, False)), Path(__file__))
    assert "the rank's own error" not in error_messages(hidden)


def test_an_error_reported_without_a_chain_is_its_own_chain():
    assert error_types({"type": "ValueError", "message": "m"}) == ["ValueError"]
    assert error_messages({"type": "ValueError", "message": "m", "chain": "not a list"}) == "m"
    assert error_messages(None) == ""


# --- torch's errors explained: the table is data, checked here -------------------------------------


def test_every_entry_of_the_table_compiles_is_unique_and_explains_its_own_example(catalog):
    entries = known_errors()
    assert len({e.name for e in entries}) == len(entries) >= 9
    hints = {hint.name for exercise in catalog.exercises for hint in exercise.hints}
    for entry in entries:
        error = {"type": "", "message": entry.example, "traceback": entry.example_traceback}
        assert entry.pattern.search(entry.example), entry.name
        assert explain(error) == entry, f"{entry.name}'s example is explained by another entry"
        assert entry.hint is None or entry.hint in hints, f"{entry.name}: no hint named {entry.hint!r}"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('[[error]]\nname="a"\npattern="("\nmeaning="m"\nexample="e"', "missing \\)"),
        ('[[error]]\nname="a"\npattern="x"\nmeaning="m"\nexample="x"\n' * 2, "two entries are named 'a'"),
        ('[[error]]\nname="a"\npattern="x"\nexample="x"', "lacks \\['meaning'\\]"),
        ('[[error]]\nname="a"\npattern="x"\nmeaning="m"\nexample="x"\nwhere="y"', "no `example_traceback`"),
    ],
)
def test_a_broken_table_is_refused_with_the_entry_named(table, problem):
    with pytest.raises(ValueError, match=problem):
        parse(table)


def test_a_pickling_error_means_what_raised_it_there():
    message = "AttributeError: Can't pickle local object 'f.<locals>.Net'"
    saved = {"type": "AttributeError", "message": message, "traceback": 'File "/x/torch/serialization.py"'}
    spawned = {"type": "AttributeError", "message": message, "traceback": 'File "/x/multiprocessing/reduction.py"'}
    pickled, target = explain(saved), explain(spawned)
    assert pickled is not None and pickled.name == "pickled_model"
    assert target is not None and target.name == "pickled_process_target"
    assert explain({"type": "AttributeError", "message": message, "traceback": ""}) is None


def test_a_wrapped_torch_error_is_explained_from_its_chain_and_the_verdict_keeps_torchs_message():
    wrapped = {
        "type": "RuntimeError",
        "message": "setup failed",
        "traceback": "",
        "chain": [
            {"type": "RuntimeError", "message": "setup failed"},
            {"type": "ValueError", "message": "Default process group has not been initialized, please make sure"},
        ],
    }
    verdict = failure_verdict(_result([_raised_outcome(0, wrapped), _raised_outcome(1, wrapped)]), None)
    assert verdict is not None
    assert verdict.message.startswith("every rank raised RuntimeError: setup failed")
    assert f"{MEANING_PREFIX}a collective, or DDP, was used before `dist.init_process_group`" in verdict.message
    unknown = {"type": "KeyError", "message": "'weight'", "traceback": ""}
    verdict = failure_verdict(_result([_raised_outcome(0, unknown)]), None)
    assert verdict is not None
    assert MEANING_PREFIX not in verdict.message


def test_the_hint_of_a_known_error_goes_with_the_verdict():
    error = {"type": "RuntimeError", "message": "Expected to have finished reduction in the prior iteration"}
    verdict = failure_verdict(_result([_raised_outcome(0, error)]), None)
    assert verdict is not None
    assert verdict.hint == "find_unused_parameters"


# --- echoes: constructed outcomes (tests/engine/test_faults.py has the real runs) ---------------------

RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9102: Connection reset by peer"


def _raised_outcome(rank: int, error: dict) -> RankOutcome:
    return RankOutcome(rank, report={"facts": {}, "error": {"traceback": "", **error}}, status=0)


def _result(ranks: list[RankOutcome]) -> RunResult:
    return RunResult(Job("w:f", len(ranks)), ranks, 1.0, False)


@pytest.mark.parametrize(
    "cause",
    [
        _raised_outcome(2, {"type": "KeyError", "message": "'weight'"}),
        RankOutcome(2, status=-9),  # killed
        RankOutcome(2, status=3),  # exited before reporting
        RankOutcome(2, status=-9, stopped="deadline"),  # hung
    ],
)
def test_a_connection_error_is_the_echo_of_the_rank_that_failed_otherwise(cause):
    echo = {"type": "RuntimeError", "message": RESET}
    verdict = failure_verdict(_result([_raised_outcome(0, echo), _raised_outcome(1, echo), cause]), None)
    assert verdict is not None
    first, *rest = verdict.message.splitlines()
    assert first.startswith("rank 2 "), verdict.message
    assert 'the errors of ranks 0-1, "Connection reset by peer", are the echo of rank 2\'s failure above' in rest[-1]
    assert RESET in verdict.verbose_details


def test_connection_errors_on_every_rank_are_reported_as_they_are():
    echo = {"type": "RuntimeError", "message": RESET}
    verdict = failure_verdict(_result([_raised_outcome(0, echo), _raised_outcome(1, echo)]), None)
    assert verdict is not None
    assert verdict.message.startswith("every rank raised RuntimeError: ") and "echo" not in verdict.message
