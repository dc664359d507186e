"""Errors as a student meets them (issue 21, point 4): a wrapper's chain is followed to the
rank's own error, torch's errors with one meaning in this course are explained, an echo is traced
to the rank that caused it."""

from __future__ import annotations

from pathlib import Path

from grader.engine.rank_runtime import describe_exception, exception_chain
from grader.judge.diagnose import error_messages, error_types


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
