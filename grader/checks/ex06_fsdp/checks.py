"""Judging exercise 6: every rank holds about 1/W of every parameter, the blocks are units of
their own, training equals the single-process reference, and rank 0's checkpoint is whole.
All four checks judge one shared run."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from grader.checks.api import CheckContext, check
from grader.checks.compare import first_difference
from grader.checks.trajectory import Finding, Setting, diagnose, gathered_steps

STEPS, BATCH, LR = 2, 4, 0.05  # two steps: the second one uses the momentum buffer


def _trajectory_finding(ctx: CheckContext, ranks: list[dict[str, Any]], want: dict[str, Any]) -> Finding | None:
    """The shared diagnosis of the training steps, on the whole tensors joined from every rank's shards;
    None where they cannot be joined (the losses and final weights are compared instead)."""
    shapes = {name: tuple(np.shape(tensor)) for name, tensor in want["initial"].items()}
    steps = gathered_steps([facts["shard_steps"] for facts in ranks], shapes, ranks[0]["flat_layouts"])
    if steps is None or len(steps) != len(want["steps"]):
        return None
    setting = Setting(lr=LR, momentum=want["momentum"], factors={"b": BATCH, "W": ctx.world_size},
                      reference="one process on all ranks' batches of the step")
    return diagnose(steps, want["start"], want["steps"], want["start"], setting)


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    result = ctx.run("train", steps=STEPS, batch_size=BATCH, lr=LR)
    if not result.ok:
        expected = "cuda" if ctx.backend == "nccl" else "cpu"
        meshes = [m["device_type"] for r in result.ranks for m in (r.facts.get("meshes") or [])]
        wrong = sorted({device for device in meshes if device != expected})
        if wrong:
            raise ctx.fail(f"mesh on the wrong device: a {wrong[0]!r} device mesh on a {ctx.backend} run, which needs "
                           f"init_device_mesh({expected!r}, (world_size,)); the run failed", hint=4)
    return ctx.require(result)


@check("shards_parameters")
def shards_parameters(ctx: CheckContext) -> str:
    ranks = _ranks(ctx)
    world = ctx.world_size
    for index, first in enumerate(ranks[0]["shards"]):
        name, full, rows = first["name"], first["full"], first["rows"]
        held = [facts["shards"][index]["local"] for facts in ranks]
        if sum(held) < full:
            raise ctx.fail(f"{name}: the ranks together hold {sum(held)} of its {full} elements")
        if rows < world:
            continue  # fewer rows than ranks: some ranks hold none, one holds all of it
        bound = math.ceil(rows / world) * (full // rows)
        for rank, local in enumerate(held):
            if local > bound:
                raise ctx.fail(f"not sharded: rank {rank} holds {local} of the {full} elements of {name} (a 1/{world} "
                               f"shard is at most {bound}); was fully_shard called on the model?", hint=1)
    mine = [sum(s["local"] for s in facts["shards"]) for facts in ranks]
    total = sum(s["full"] for s in ranks[0]["shards"])
    kib = [f"{4 * n / 1024:.1f}" for n in mine]
    return (f"parameter memory per rank (fp32): {', '.join(kib)} KiB of {4 * total / 1024:.1f} KiB "
            f"({', '.join(map(str, mine))} of {total} parameters)")


@check("wraps_each_block")
def wraps_each_block(ctx: CheckContext) -> str:
    facts = _ranks(ctx)[0]
    units, blocks, block_units = facts["units"], facts["blocks"], facts["block_units"]
    if not units:
        raise ctx.fail("no FSDP unit at all: the model was not wrapped with fully_shard (or FSDP)", hint=1)
    if len(units) == 1:
        raise ctx.fail(f"only the root is wrapped: one FSDP unit ({units[0]}) holds all the parameters, so forward "
                       "gathers the whole model at once and nothing overlaps; call fully_shard on each block first",
                       hint=3)
    if block_units < blocks:
        raise ctx.fail(f"{block_units} of the {blocks} blocks are FSDP units of their own (units: {units}); wrap "
                       "every block, then the root", hint=3)
    return f"{len(units)} FSDP units: {', '.join(units)}"


@check("matches_reference")
def matches_reference(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    want = ctx.reference("reference", world_size=ctx.world_size, steps=STEPS, batch_size=BATCH, lr=LR)
    facts = ranks[0]
    if facts.get("gather_error"):
        raise ctx.fail(f"the grader could not gather the trained weights: {facts['gather_error']}")
    steps = len(facts["optimizer_steps"])
    if steps != STEPS:
        raise ctx.fail(f"{steps} optimizer steps instead of {STEPS}, one per batch")
    finding = _trajectory_finding(ctx, ranks, want)
    if finding is not None:
        raise ctx.fail(finding.message, hint=2)
    if first_difference(facts["final"], want["initial"], rtol=0.0, atol=0.0) is None:
        owned = max(facts["optimizer_steps"])
        why = (" The optimizer was built before wrapping: it holds the original tensors, which fully_shard replaced "
               "by sharded ones, so they never get a gradient." if owned == 0 else "")
        raise ctx.fail(f"no parameter changed after the step: after {STEPS} optimizer steps the weights are the "
                       f"initial ones.{why}", hint=2)
    losses = np.mean([rank["losses"][:STEPS] for rank in ranks], axis=0)
    if len(losses) != STEPS:
        raise ctx.fail(f"the model ran forward {len(losses)} times for {STEPS} batches")
    for step, (got, expected) in enumerate(zip(losses, want["losses"]), 1):
        if not np.isclose(got, expected, rtol=1e-5, atol=1e-6):
            raise ctx.fail(f"the loss of step {step} (mean over ranks) is {got:.6g}, one process on all ranks' batches "
                           f"gets {expected:.6g}. Check SGD(lr, momentum=0.9), the mean loss, and that the optimizer "
                           "was built after wrapping", hint=2)
    difference = first_difference(facts["final"], want["final"])
    if difference:
        raise ctx.fail(f"after {STEPS} steps the weights differ from one process training on all ranks' batches: "
                       f"{difference}", hint=2)


@check("full_checkpoint")
def full_checkpoint(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    want = ctx.reference("reference", world_size=ctx.world_size, steps=STEPS, batch_size=BATCH, lr=LR)["final"]
    saved = ranks[0]["checkpoint"]
    if saved.get("type") != "dict":
        raise ctx.fail(f"train_fsdp returned a {saved.get('type')} on rank 0, not a state dict", hint=5)
    entries = {e["key"]: e for e in saved["entries"]}
    sharded = [e for e in saved["entries"] if e["kind"] == "DTensor"]
    if sharded:
        raise ctx.fail(f"a checkpoint of local shards passed off as full: {sharded[0]['key']} is a DTensor (this "
                       "rank's shard); gather with get_model_state_dict(..., full_state_dict=True)", hint=5)
    for key, tensor in want.items():
        entry = entries.get(key)
        if entry is None:
            raise ctx.fail(f"the checkpoint has no {key!r} (keys: {list(entries)[:4]}...)", hint=5)
        if entry["shape"] != list(tensor.shape):
            raise ctx.fail(f"a checkpoint of local shards passed off as full: {key} has shape {entry['shape']} "
                           f"instead of {list(tensor.shape)}; each rank holds only its shard, gather with "
                           "get_model_state_dict(..., full_state_dict=True)", hint=5)
    if saved["loads_plain"]:
        raise ctx.fail(f"the checkpoint does not load into a plain model: {saved['loads_plain']}", hint=5)
    difference = first_difference(saved["tensors"], want)
    if difference:
        raise ctx.fail(f"the checkpoint on rank 0 does not hold the trained weights: {difference}", hint=5)
