"""Nothing a rank starts outlives its run, however it detached, and a stray never holds a run open:
the run ends in its normal time plus the sweep's short grace, and the strays are named."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import REPO, describe
from test_faults import FAULTS, fault_engine  # noqa: F401 (the module-scoped engine fixture)

from grader.engine import Job
from grader.engine.pool import STRAY_GRACE_S

KINDS = ("new_session", "double_fork", "multiprocessing")


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 2] != "Z"


def left_alive(pid_dir: Path) -> list[int]:
    pids = [int(p.name) for p in pid_dir.iterdir()]
    assert pids, "the stray never started"
    give_up = time.monotonic() + 1.0
    while any(alive(pid) for pid in pids) and time.monotonic() < give_up:
        time.sleep(0.02)
    return [pid for pid in pids if alive(pid)]


@pytest.mark.parametrize("kind", KINDS)
def test_a_stray_is_killed_named_and_does_not_hold_the_run(fault_engine, tmp_path, kind):  # noqa: F811
    healthy = fault_engine.run(Job("fault_workers:healthy", 2, student_file=FAULTS))
    fault_engine.wait_warm()
    result = fault_engine.run(
        Job(
            "fault_workers:leaves_strays",
            2,
            {"kind": kind, "pid_dir": str(tmp_path)},
            student_file=FAULTS,
            deadline=20.0,
        )
    )
    assert result.ok and not result.timed_out
    # held open, the run would last to its 20 s deadline; 2 s above the grace absorb a loaded machine's start-up
    # of the stray (1.2 s against a healthy run's 0.08 s once, in CI on 2 cores)
    assert result.seconds < healthy.seconds + STRAY_GRACE_S + 2.0
    assert result.stray_count == 2, result.strays
    expected = "sleep 137" if kind == "new_session" else "python"
    assert all(expected in stray.command for stray in result.strays), result.strays
    assert left_alive(tmp_path) == []


HERE = Path(__file__).resolve().parent
STRAY_CODE = (
    "__import__('sys').path.insert(0, {here!r}); __import__('tests_strays_support').start_stray({kind!r}, {pid_dir!r})"
)
# Where each exercise's solution gets the stray: the first line of the function's body.
PLACES = {
    "ex01_process_group": ('    """Leave and destroy the default process group."""\n', "cleanup_ddp"),
    "ex03_train_ddp": ('    on_gpu = dist.get_backend() == "nccl"\n', "train_ddp"),
    "ex04_launch": ("    results = mp.get_context(start_method).SimpleQueue()\n", "launch_distributed"),
}


def _patched(exercise_file: str, anchor: str, code: str, folder: Path) -> Path:
    source = (REPO / "solutions" / exercise_file).read_text()
    assert anchor in source, f"{anchor!r} is no longer in the solution"
    target = folder / exercise_file
    target.write_text(source.replace(anchor, anchor + f"    {code}\n", 1))
    return target


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("exercise_id", sorted(PLACES))
def test_strays_in_an_exercise_are_named_and_stopped(grade, engine, catalog, tmp_path, exercise_id, kind):
    exercise = catalog.get(exercise_id)
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    anchor, function = PLACES[exercise_id]
    path = _patched(exercise.file, anchor, STRAY_CODE.format(here=str(HERE), kind=kind, pid_dir=str(pid_dir)), tmp_path)
    engine.wait_warm()  # what is compared is the checks, not the portable pool's refills
    clean = grade(exercise_id, REPO / "solutions" / exercise.file, world_sizes=(2,))
    engine.wait_warm()
    results = grade(exercise_id, path, world_sizes=(2,))
    # a stray holding the run would keep it to the 30 s deadline; the clean run's time sets the pace of a loaded machine
    assert max(r.seconds for r in results) < 2 * max(r.seconds for r in clean) + 3.0, describe(results)
    policy = {spec.name: spec.strays for spec in exercise.checks}
    for result in results:
        if policy[result.check] == "fail":  # a check about leaving no process behind (it may see them first)
            assert result.status == "failed" and "process" in result.message, describe([result])
        else:
            assert result.status == "passed", describe([result])
            assert any("left" in note and "running" in note for note in result.notes), describe([result])
    if exercise_id == "ex04_launch":
        assert any(r.status == "failed" for r in results)
    named = [note for r in results for note in r.notes] + [r.message for r in results]
    assert any(f"{function}()" in text for text in named), named
    assert left_alive(pid_dir) == []


@pytest.mark.parametrize("kind", KINDS)
def test_strays_under_torchrun_fail_every_check(grade, catalog, tmp_path, kind):
    """Exercise 7 forbids strays: whatever the kind, every check fails (never a warning), the strays
    are named and none is left. A process that still holds what the torchrun agent watches (a fork
    that inherited the worker's sentinel pipe, a multiprocessing child the worker joins at exit)
    keeps the launch from ending: then the launch's deadline is what ends it, and says so."""
    exercise = catalog.get("ex07_torchrun")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    code = STRAY_CODE.format(here=str(HERE), kind=kind, pid_dir=str(pid_dir))
    path = _patched(exercise.file, "    parser = argparse.ArgumentParser()\n", code, tmp_path)
    clean = grade("ex07_torchrun", REPO / "solutions" / exercise.file, world_sizes=(3,))
    results = grade("ex07_torchrun", path, world_sizes=(3,))
    assert results and all(r.status == "failed" for r in results), describe(results)
    if kind == "new_session":  # held by nothing the agent watches: the launch ends in its normal time
        assert max(r.seconds for r in results) < 2 * max(r.seconds for r in clean) + 3.0, describe(results)
        assert all("process left behind" in r.message for r in results), describe(results)
    named = [note for r in results for note in r.notes] + [r.message for r in results]
    assert any(("main()" in text and "left" in text) or "never joined" in text for text in named), named
    assert left_alive(pid_dir) == []
