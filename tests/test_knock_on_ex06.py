"""Exercise 6: a checkpoint gathered on rank 0 only costs full_checkpoint, not the three checks sharing its run.

Rank 0 then waits in an all-gather its peers never join (they returned from train_fsdp): the collective watch names
it, FSDP2's functional all-gather as FSDP1's. The grader's own gather of the trained weights waits until every rank
returned from train_fsdp, so it never meets rank 0's call (it did, and rank 0's checkpoint passed). The sharding,
the units and the training are judged on what every rank recorded at its optimizer steps, proven complete (every
rank took the reference's steps); a rank that fails before its last step leaves every check failing.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from conftest import describe
from variants import REPO, materialize

CHECKS = ["shards_parameters", "wraps_each_block", "matches_reference", "full_checkpoint"]
JUDGED = {
    "shards_parameters": "judged on the FSDP units and shards every rank held when it took its 2 optimizer steps",
    "wraps_each_block": "judged on the FSDP units rank 0 held when it took its 2 optimizer steps",
    "matches_reference": "judged on the 2 optimizer steps of every rank's shards, joined",
}
# a rank that fails after its first step: no rank took every step, so no check sharing the run is judged
RAISES_AFTER_THE_FIRST_STEP = {
    "name": "raises_after_the_first_step",
    "replace": [["        optimizer.step()\n", "        optimizer.step()\n        assert rank != 1\n"]],
}


def _mistake(name: str) -> dict:
    spec = tomllib.loads((REPO / "tests" / "mistakes" / "ex06_fsdp.toml").read_text())
    return next(m for m in spec["mistake"] if m["name"] == name)


@pytest.mark.parametrize(
    ("mistake", "call"),
    [
        ("full_state_dict_gathered_on_rank0_only", "all_gather_into_tensor"),
        ("fsdp1_full_state_dict_on_rank0_only", "all_gather"),
    ],
)
def test_a_checkpoint_gathered_on_rank0_only_costs_only_full_checkpoint(
    grade, catalog, tmp_path: Path, mistake: str, call: str
) -> None:
    path = materialize(catalog.get("ex06_fsdp").file, _mistake(mistake), tmp_path)
    results = {r.check: r for r in grade("ex06_fsdp", path, world_sizes=(2,), checks=set(CHECKS))}
    checkpoint = results["full_checkpoint"]
    assert checkpoint.status == "failed" and checkpoint.points == 0, describe([checkpoint])
    assert (
        checkpoint.message.startswith(f"ranks called different collectives: rank 0 called {call} (")
        and ", rank 1 had already returned from train_fsdp\n" in checkpoint.message
    ), describe([checkpoint])
    for name, judged in JUDGED.items():
        result = results[name]
        assert result.status == "passed" and result.points == result.max_points, describe([result])
        assert f"{judged}, recorded before the run failed" in result.details, describe([result])


def test_a_check_whose_facts_the_failure_cut_short_still_fails(grade, catalog, tmp_path: Path) -> None:
    """The optimizer built before wrapping steps the whole original tensors, which do not join as shards: whether
    training changed the weights is then read from the weights gathered after train_fsdp, which rank 1's lone
    gather cut short. matches_reference fails with that failure (rank 0, which returned, gathered nothing either)."""
    old, on_rank0 = _mistake("full_state_dict_gathered_on_rank0_only")["replace"][0]
    mistake = {
        "name": "optimizer_before_wrapping_gathered_on_rank1_only",
        "replace": [
            *_mistake("optimizer_before_wrapping")["replace"],
            [old, on_rank0.replace("rank == 0", "rank == 1")],
        ],
    }
    path = materialize(catalog.get("ex06_fsdp").file, mistake, tmp_path)
    results = {r.check: r for r in grade("ex06_fsdp", path, world_sizes=(2,), checks=set(CHECKS))}
    training = results["matches_reference"]
    assert training.status == "failed", describe([training])
    assert training.message.startswith(
        "ranks called different collectives: rank 0 had already returned from train_fsdp, rank 1 called "
        "all_gather_into_tensor"
    ), describe([training])
    assert results["full_checkpoint"].message.startswith("not judged: the run it shares with matches_reference")
    for name in ("shards_parameters", "wraps_each_block"):
        assert results[name].status == "passed", describe([results[name]])


def test_a_rank_that_fails_before_its_last_step_fails_every_check(grade, catalog, tmp_path: Path) -> None:
    path = materialize(catalog.get("ex06_fsdp").file, RAISES_AFTER_THE_FIRST_STEP, tmp_path)
    results = {r.check: r for r in grade("ex06_fsdp", path, world_sizes=(2,), checks=set(CHECKS))}
    first, *others = (results[name] for name in CHECKS)
    assert first.status == "failed" and "AssertionError" in first.message, describe([first])
    for result in others:
        assert result.status == "failed" and result.points == 0, describe([result])
        assert result.message.startswith("not judged: the run it shares with shards_parameters failed"), describe(
            [result]
        )
