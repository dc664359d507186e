"""Exercise 7: a failure late in the torchrun launch costs the checks it breaks, not every check of the launch.

One launch serves every check of ex07. Where it failed, a check is judged on the facts recorded before the failure
if a proof shows them complete: every process had joined the group (joins_from_env), every process took the drawn
steps (trains_in_sync), every process but RANK 0 ended its script and RANK 0 had printed (logs_from_rank0). A
process the failure stopped keeps only the facts its check reads. The device is asked, and the end of the script
seen, only once a script ended: device_from_local_rank and destroys_group say the failure (issue 31).
"""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, describe
from prepared import prepared_context
from variants import materialize

from grader.checks.ex07_torchrun.checks import logs_from_rank0
from grader.judge.api import CheckFailed
from grader.judge.verdict import CheckResult

CHECKS = ["joins_from_env", "trains_in_sync", "device_from_local_rank", "logs_from_rank0", "destroys_group"]
MISTAKES = {m["name"]: m for m in tomllib.loads((REPO / "tests/mistakes/ex07_torchrun.toml").read_text())["mistake"]}
BARRIER_RAISED = "the process with RANK=0 raised RuntimeError"
# which checks each late failure leaves judged (the rest say the failure)
JUDGED = {
    "barrier_on_rank_zero_only": ["joins_from_env", "trains_in_sync", "logs_from_rank0"],
    # rank 1, stopped in its sleep once rank 0 failed, might have printed later: its output is not complete
    "barrier_on_rank_zero_only_while_rank_one_lingers": ["joins_from_env", "trains_in_sync"],
    "rank_zero_never_ends": ["joins_from_env", "trains_in_sync", "logs_from_rank0"],
}
SAID = {
    "barrier_on_rank_zero_only": BARRIER_RAISED,
    "barrier_on_rank_zero_only_while_rank_one_lingers": BARRIER_RAISED,
    "rank_zero_never_ends": "the torchrun launch did not finish within",
}
# a process raises before any process group formed: no fact of any check is complete
PLANTED = "    if rank == 2:\n        raise ValueError('planted')\n"
RAISES_BEFORE_INIT = {"replace": [["    device = pick_device()\n", f"{PLANTED}    device = pick_device()\n"]]}


def _graded(grade, catalog, tmp_path: Path, mistake: dict[str, Any], checks: list[str]) -> dict[str, CheckResult]:
    path = materialize(catalog.get("ex07_torchrun").file, mistake, tmp_path)
    results = grade("ex07_torchrun", path, world_sizes=(2,), deadline=mistake.get("deadline", 8.0), checks=set(checks))
    return {r.check: r for r in results}


@pytest.mark.parametrize("name", sorted(JUDGED))
def test_a_late_failure_costs_only_the_checks_whose_facts_it_cut_short(grade, catalog, tmp_path, name) -> None:
    results = _graded(grade, catalog, tmp_path, MISTAKES[name], CHECKS)
    for check in CHECKS:
        result = results[check]
        if check in JUDGED[name]:
            assert result.status == "passed" and result.points == result.max_points, describe([result])
            assert "recorded before the run failed" in result.details, describe([result])
        else:
            assert result.status == "failed" and result.points == 0, describe([result])
            assert result.message.startswith(SAID[name]), describe([result])


def test_a_failure_mid_training_costs_every_check_but_the_joining_done_before(grade, catalog, tmp_path) -> None:
    results = _graded(grade, catalog, tmp_path, MISTAKES["one_process_raises_mid_training"], CHECKS)
    joined = results["joins_from_env"]
    assert joined.status == "passed", describe([joined])
    assert "judged on the process group every process had joined" in joined.details, describe([joined])
    for check in CHECKS[1:]:
        result = results[check]
        assert result.status == "failed" and result.points == 0, describe([result])
        assert "the process with RANK=2 raised ValueError: planted failure on RANK 2" in result.message


def test_a_failure_before_any_group_formed_costs_every_check(grade, catalog, tmp_path) -> None:
    results = _graded(grade, catalog, tmp_path, RAISES_BEFORE_INIT, CHECKS)
    for check in CHECKS:
        result = results[check]
        assert result.status == "failed" and result.points == 0, describe([result])
        assert "the process with RANK=2 raised ValueError: planted" in result.message, describe([result])


def test_a_late_failure_no_selected_check_says_still_costs_the_check_that_read_it(grade, catalog, tmp_path) -> None:
    """joins_from_env alone: judged before the failure, it is charged with the launch's failure in ex07's own words
    (the grader's launch worker itself ended well, so the run's ranks do not say it)."""
    results = _graded(grade, catalog, tmp_path, MISTAKES["barrier_on_rank_zero_only"], ["joins_from_env"])
    joined = results["joins_from_env"]
    assert joined.status == "failed" and joined.points == 0, describe([joined])
    assert joined.message.startswith(BARRIER_RAISED) and "dist.barrier()" in joined.message, describe([joined])


def _process(rank: int, local: int, printed: str = "", ended: bool = True) -> dict[str, Any]:
    env = {"RANK": str(rank), "LOCAL_RANK": str(local), "WORLD_SIZE": "3", "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0"}
    return {
        "env": env,
        "pid": 1,
        "printed": printed,
        "init_calls": [{"backend": "gloo", "init_method": "env://", "rank": None, "world_size": None}],
        "start": None,
        "steps": [],
        "device": "cpu" if ended else None,
        "error": None,
        "destroy_calls": 1,
        "initialized_at_end": False,
        "script_finished": True,
        "ended": ended,
        "stack": "",
    }


def _rank0_raised_after_printing(rank1_ended: bool) -> dict[str, Any]:
    rank0 = _process(0, 0, printed="step 0 loss 1.0\n", ended=False)
    rank0.update(
        script_finished=False,
        initialized_at_end=None,
        error={
            "type": "RuntimeError",
            "message": "planted",
            "stage": "running the script",
            "student_frames": [],
            "not_implemented": False,
            "traceback": "",
        },
    )
    return {
        "commands": ["torchrun ...", "torchrun ..."],
        "seconds": 1.0,
        "timed_out": False,
        "exit_codes": [1, 0],
        "agent_output": ["", ""],
        "processes": [rank0, _process(1, 1, ended=rank1_ended), _process(2, 0)],
    }


def test_output_is_judged_once_every_process_but_rank0_ended_and_rank0_printed() -> None:
    ctx = prepared_context("ex07_torchrun", "torchrun", [_rank0_raised_after_printing(rank1_ended=True)], 3)
    logs_from_rank0(ctx)
    [(_, failure)] = ctx.judged_before_failure  # what the runner says if no other check says it
    assert failure.message.startswith("the process with RANK=0 raised RuntimeError: planted")


def test_a_process_stopped_after_its_script_but_before_its_last_fact_is_not_judged() -> None:
    """Its script ended, but the shim had not recorded every fact (`ended`): its output might be cut short."""
    ctx = prepared_context("ex07_torchrun", "torchrun", [_rank0_raised_after_printing(rank1_ended=False)], 3)
    with pytest.raises(CheckFailed, match="the process with RANK=0 raised RuntimeError: planted"):
        logs_from_rank0(ctx)
    assert ctx.judged_before_failure == []


SHIM_RUNS = """
import json, os, sys
from pathlib import Path
from grader.checks.ex07_torchrun import shim
folder = Path(sys.argv[1])
os.environ.update({shim.FACTS_ENV: str(folder), "RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1",
                   "LOCAL_WORLD_SIZE": "1", "GROUP_RANK": "0"})
for name in ("stopped", "raising"):
    try:
        shim.run(str(folder / f"{name}.py"))
    except BaseException as exc:
        print(name, "raised", type(exc).__name__, file=sys.__stderr__)
    facts = json.loads((folder / "rank0.json").read_text())
    said = {"ended": facts["ended"], "error": (facts["error"] or {}).get("type")}
    print(json.dumps({name: said}), file=sys.__stdout__)
"""
STOPPED = """
import signal
from torch.distributed.elastic.multiprocessing.api import SignalException
def pick_device():
    raise SignalException("stopped", signal.SIGTERM)
"""


def test_a_process_stopped_while_its_device_is_asked_has_not_ended(tmp_path: Path) -> None:
    """torchrun stops the processes left once one failed (SIGTERM, raised as SignalException): one stopped while the
    shim asked pick_device() has not recorded every fact, and pick_device() is not said to have raised."""
    (tmp_path / "stopped.py").write_text(STOPPED)
    (tmp_path / "raising.py").write_text("def pick_device():\n    raise ValueError('no device')\n")
    ran = subprocess.run(
        [sys.executable, "-c", SHIM_RUNS, str(tmp_path)], capture_output=True, text=True, cwd=REPO, timeout=120
    )
    said = {k: v for line in ran.stdout.splitlines() for k, v in json.loads(line).items()}
    assert said == {
        "stopped": {"ended": False, "error": None},
        "raising": {"ended": True, "error": "ValueError"},
    }, ran.stderr
