"""Exercise 18's structural replays, on layouts written out by hand.

A swapped TP plan fails in forward in torch 2.13 before any placement can be read, so no run of
tests/mistakes/ reaches `colwise_rowwise_swapped`: these facts, each rank's mesh, placements and local shape
computed here by hand, hold the replay to its structure (and the reference's own layout to no cause).
"""

from __future__ import annotations

from typing import Any

from grader.checks.ex18_fsdp_tp_2d import checks

SHAPES = {
    "inp.weight": [8, 4],
    "blocks.0.up.weight": [16, 8],
    "blocks.0.up.bias": [16],
    "blocks.0.down.weight": [8, 16],
}
GRID = [[0, 1], [2, 3]]  # (dp, tp) at W=4: rows are tp groups, columns dp groups


def _facts(tp: dict[str, tuple[str, list[int]]]) -> list[Any]:
    """Four ranks: inp.weight sharded by FSDP over the dp group, each block parameter on the 2D mesh with the
    placement on tp and the local shape given (the same on every rank: every dimension here splits evenly)."""
    ranks = []
    for rank in range(4):
        held = [
            {"name": "inp.weight", "mesh": [rank % 2, rank % 2 + 2], "placements": ["Shard(dim=0)"], "local": [4, 4]}
        ]
        for name, (placement, local) in tp.items():
            held.append({"name": name, "mesh": GRID, "placements": ["Shard(dim=0)", placement], "local": local})
        ranks.append({"parameters": held})
    return ranks


REFERENCE = {
    "blocks.0.up.weight": ("Shard(dim=0)", [4, 8]),
    "blocks.0.up.bias": ("Shard(dim=0)", [4]),
    "blocks.0.down.weight": ("Shard(dim=1)", [4, 8]),
}
SWAPPED = {
    "blocks.0.up.weight": ("Shard(dim=1)", [8, 4]),
    "blocks.0.up.bias": ("Replicate()", [8]),
    "blocks.0.down.weight": ("Shard(dim=0)", [2, 16]),
}


def test_a_swapped_plan_is_proven_by_every_parameters_structure() -> None:
    proven = checks._plan_swapped(_facts(SWAPPED), SHAPES, 4)
    assert proven is not None and proven.cause == "colwise_rowwise_swapped" and proven.how == "structure"


def test_the_reference_layout_proves_no_mistake() -> None:
    facts = _facts(REFERENCE)
    assert checks._plan_swapped(facts, SHAPES, 4) is None
    assert checks._dims_swapped(facts, SHAPES, 4) is None


def test_one_parameter_off_the_swapped_plan_proves_nothing() -> None:
    """The up weight swapped, the down weight as the plan has it: a placement on tp, not the swapped plan."""
    assert (
        checks._plan_swapped(_facts({**SWAPPED, "blocks.0.down.weight": REFERENCE["blocks.0.down.weight"]}), SHAPES, 4)
        is None
    )


def test_a_local_shape_other_than_the_placements_give_proves_nothing() -> None:
    assert checks._plan_swapped(_facts({**SWAPPED, "blocks.0.up.bias": ("Replicate()", [16])}), SHAPES, 4) is None
