"""One failure, said once, costing the checks whose facts it cut short, not every check sharing its run.

A barrier inside `if rank == 0:` ends ex03's shared training run with rank 0 alone in the barrier, after every
step and after its save. The training's checks and the checkpoint's are judged on the facts recorded before the
failure, proven complete (every rank took every step; rank 0's save had ended); the check whose contract the
barrier breaks says the failure (issue 31: one mistake costs the checks whose contract it breaks). Where the facts
a check reads are not proven complete, it points at the check that said the failure (a knock-on). A file that
cannot be imported is an error of every check alike, not a failed run: those keep one message, said once.
"""

from __future__ import annotations

from pathlib import Path

from conftest import SEED, describe
from variants import materialize

from grader.judge.runner import ALL_CHECKS, GradeOptions, grade_exercise

BARRIER_IN_THE_IF = {
    "replace": [
        [
            "        torch.save(model.state_dict(), checkpoint_path)\n    dist.barrier()",
            "        torch.save(model.state_dict(), checkpoint_path)\n        dist.barrier()",
        ]
    ]
}
# a rank that fails in its first step: no training fact is complete, so every check sharing the run fails
RAISES_IN_THE_FIRST_STEP = {
    "replace": [["            optimizer.step()\n", "            optimizer.step()\n            assert rank != 1\n"]]
}
JUDGED = ["ranks_stay_in_sync", "matches_large_batch", "checkpoint_rank0_only", "checkpoint_loads_plain"]
SHARED = [*JUDGED, "waits_for_checkpoint"]


def test_a_failure_after_training_costs_only_the_check_it_breaks(grade, catalog, tmp_path: Path) -> None:
    exercise = catalog.get("ex03_train_ddp")
    path = materialize(exercise.file, BARRIER_IN_THE_IF, tmp_path)
    said: list[str] = []
    results = {r.check: r for r in grade("ex03_train_ddp", path, world_sizes=(2,), checks=set(SHARED))}
    for name in JUDGED:
        result = results[name]
        assert result.status == "passed" and result.points == result.max_points, describe([result])
        assert "recorded before the run failed" in result.details, describe([result])
        said.append(result.check)
    barrier = results["waits_for_checkpoint"]
    assert barrier.status == "failed" and barrier.points == 0, describe([barrier])
    assert barrier.message.startswith("only rank 0 called dist.barrier()"), describe([barrier])
    assert said == JUDGED


def test_checks_whose_facts_the_failure_cut_short_point_at_the_one_that_says_why(
    grade, catalog, tmp_path: Path
) -> None:
    exercise = catalog.get("ex03_train_ddp")
    path = materialize(exercise.file, RAISES_IN_THE_FIRST_STEP, tmp_path)
    results = {r.check: r for r in grade("ex03_train_ddp", path, world_sizes=(2,), checks=set(SHARED))}
    first, *others = (results[name] for name in SHARED)
    assert first.status == "failed" and "AssertionError" in first.message, describe([first])
    assert "assert rank != 1" in first.details  # the student's line, once
    for result in others:
        assert result.status == "failed" and result.points == 0, describe([result])
        assert result.message.startswith("not judged: the run it shares with ranks_stay_in_sync failed"), describe(
            [result]
        )
        assert "AssertionError" not in result.message, "the failure is said once"
        assert result.details == "" and result.verbose_details == "" and result.hint is None and result.cause == ""


def test_a_failure_no_selected_check_says_still_costs_the_first_check_that_read_its_run(
    engine, catalog, tmp_path: Path
) -> None:
    """Without waits_for_checkpoint, every selected check's facts were complete before the failure: the first of
    them fails with it after all, and results are still handed on in the catalog's order."""
    exercise = catalog.get("ex03_train_ddp")
    path = materialize(exercise.file, BARRIER_IN_THE_IF, tmp_path)
    handed: list[str] = []
    options = GradeOptions(world_sizes=(2,), only=frozenset(JUDGED), visibilities=ALL_CHECKS, seed=SEED)
    results = grade_exercise(engine, exercise, path, options, on_result=lambda r: handed.append(r.check))
    first, *others = results
    assert handed == [r.check for r in results] == [s.name for s in exercise.checks if s.name in JUDGED]
    assert first.status == "failed" and first.points == 0, describe([first])
    assert first.message.startswith("ranks called different collectives: rank 0 called barrier()"), describe([first])
    for result in others:
        assert result.status == "passed", describe([result])


LOADED_TO_CUDA = {"replace": [['torch.load(path, map_location="cpu")', 'torch.load(path, map_location="cuda")']]}


def test_a_failure_in_load_checkpoint_costs_resume_matches_not_the_checks_of_the_save(
    grade, catalog, tmp_path: Path
) -> None:
    """ex09: every rank returned from save_checkpoint and called torch.load, which raised: the save's checks are
    judged on what happened until then; resume_matches says the failure."""
    exercise = catalog.get("ex09_checkpoint")
    path = materialize(exercise.file, LOADED_TO_CUDA, tmp_path)
    results = {r.check: r for r in grade("ex09_checkpoint", path, world_sizes=(2,))}
    for name in ("saves_once_rank0", "waits_for_save", "checkpoint_contents"):
        assert results[name].status == "passed", describe([results[name]])
        assert "until it returned from save_checkpoint" in results[name].details, describe([results[name]])
    resumed = results["resume_matches"]
    assert resumed.status == "failed" and "Attempting to deserialize object on a CUDA device" in resumed.message


LOSS_SUMMED_TOO = {
    "replace": [
        *BARRIER_IN_THE_IF["replace"],
        [
            "loss = F.mse_loss(ddp_model(inputs), targets)",
            'loss = F.mse_loss(ddp_model(inputs), targets, reduction="sum")',
        ],
    ]
}


def test_a_failure_no_selected_check_says_is_said_by_the_check_that_failed_on_the_facts_before_it(
    grade, catalog, tmp_path: Path
) -> None:
    """A loss summed, and then rank 0 alone in a barrier: matches_large_batch fails on the steps, and says the
    run's failure after its own finding; the checks that passed keep their points."""
    exercise = catalog.get("ex03_train_ddp")
    path = materialize(exercise.file, LOSS_SUMMED_TOO, tmp_path)
    results = {r.check: r for r in grade("ex03_train_ddp", path, world_sizes=(2,), checks=set(JUDGED))}
    wrong = results["matches_large_batch"]
    assert wrong.status == "failed" and wrong.message.startswith("loss summed, not averaged"), describe([wrong])
    assert "\nthe run then failed as well: ranks called different collectives" in wrong.message, describe([wrong])
    assert results["ranks_stay_in_sync"].status == "passed", describe([results["ranks_stay_in_sync"]])
