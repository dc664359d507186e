"""Exercises 2-7 hold their reports to their schemas: a malformed fact fails the check with a sentence where it
would have crashed the judge or been read as something else; a well-formed one is judged as before."""

from __future__ import annotations

from typing import Any

import pytest
from prepared import prepared_context

from grader.checks.ex04_launch.checks import propagates_errors
from grader.checks.ex07_torchrun.checks import joins_from_env
from grader.judge.api import CheckContext, CheckFailed


def _context(exercise: str, worker: str, facts: dict[str, Any], world_size: int) -> CheckContext:
    """A grading whose one run of `worker` reported `facts` on its one process (ex04 and ex07 run one)."""
    return prepared_context(exercise, worker, [facts], world_size)


def _failing(raised: object) -> dict[str, Any]:
    return {
        "raised": raised,
        "seconds_after_raise": 0.5,
        "slept_before_return": [],
        "left_behind": {"running": [], "unreaped": []},
        "observed": None,  # where /proc is not there to observe the launcher's processes
    }


def test_ex04_judges_a_conforming_report_as_before() -> None:
    with pytest.raises(CheckFailed, match="swallowing a child's error"):
        propagates_errors(_context("ex04", "launch_failing", _failing(None), 2))


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        ({"type": "ValueError"}, "fact 'raised' is a dict, not "),  # its message[:200] raised KeyError
        ("ValueError", "fact 'raised' is a str, not "),
    ],
)
def test_ex04_a_malformed_error_fails_with_a_sentence(raised: object, said: str) -> None:
    with pytest.raises(CheckFailed, match="rank 0 reported facts the grader cannot judge") as failed:
        propagates_errors(_context("ex04", "launch_failing", _failing(raised), 2))
    assert said in failed.value.verdict.message


def _process(env: dict[str, Any]) -> dict[str, Any]:
    return {
        "env": env,
        "pid": 1,
        "printed": "",
        "init_calls": [{"backend": "gloo", "init_method": None, "rank": None, "world_size": None}],
        "start": None,
        "steps": [],
        "device": None,
        "error": None,
        "destroy_calls": 1,
        "initialized_at_end": False,
        "script_finished": True,
        "stack": "",
    }


def test_ex07_a_process_without_its_torchrun_variables_fails_with_a_sentence() -> None:
    """int(env["RANK"]) raised TypeError on a variable the process did not have."""
    env = {"RANK": None, "LOCAL_RANK": "0", "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    launch = {
        "commands": ["torchrun ..."],
        "seconds": 1.0,
        "timed_out": False,
        "exit_codes": [0, 0],
        "agent_output": ["", ""],
        "processes": [_process(env)],
    }
    with pytest.raises(CheckFailed, match="cannot judge: fact 'processes'\\[0\\]\\['env'\\]\\['RANK'\\] is missing"):
        joins_from_env(_context("ex07", "torchrun", launch, 3))
