"""A failed rank's facts, as far as a proof covers them: any other fact is the run's failure, never a default."""

from __future__ import annotations

import pytest

from grader.judge.api import CheckFailed, UpToFailure
from grader.judge.verdict import Verdict


def test_reading_a_fact_the_proof_does_not_cover_fails_with_the_runs_failure() -> None:
    failure = CheckFailed(Verdict("failed", "rank 0 raised RuntimeError: boom"))
    facts = UpToFailure({"steps": [1, 2]}, failure)
    assert facts["steps"] == [1, 2]
    assert "final" not in facts
    for read in (lambda: facts["final"], lambda: facts.get("final"), lambda: facts.get("final", {})):
        with pytest.raises(CheckFailed) as raised:
            read()
        assert raised.value is failure
