"""Judging exercise 11: SyncBatchNorm layers, running statistics of the global batch, and training
through a branch whose parameters are unused every other step."""

from __future__ import annotations

from typing import Any

from grader.checks.api import CheckContext, check
from grader.checks.compare import first_difference
from grader.engine import RunResult

SIZE, BATCH, STEPS, LR = 96, 4, 4, 0.05
UNUSED_MESSAGES = ("not used in producing loss", "did not receive grad", "Expected to have finished reduction")
STATISTICS = ("norm.running_mean", "norm.running_var")


def _run(ctx: CheckContext) -> RunResult:
    return ctx.run("train", size=SIZE, batch_size=BATCH, steps=STEPS, lr=LR)


def _unused_parameter_error(result: RunResult) -> str:
    for outcome in result.ranks:
        message = (outcome.error or {}).get("message", "")
        if any(text in message for text in UNUSED_MESSAGES):
            return f"rank {outcome.rank}"
    return ""


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    """Every rank's facts after the full training; DDP's unused-parameter error is named here."""
    result = _run(ctx)
    rank = _unused_parameter_error(result)
    if rank:
        raise ctx.fail(f"parameters that received no gradient: the aux head is unused on odd steps, so DDP never "
                       f"reduced its gradient bucket, and {rank} failed at the next step with DDP's "
                       "'parameters that were not used in producing loss' error. Pass "
                       "find_unused_parameters=True to DistributedDataParallel", hint=3)
    ranks = ctx.require(result)
    if ranks[0]["returned"] != "DistributedDataParallel":
        raise ctx.fail(f"prepare_model returned a {ranks[0]['returned']}, not the DistributedDataParallel model",
                       hint=2)
    return ranks


@check("converts_batchnorm")
def converts_batchnorm(ctx: CheckContext) -> None:
    result = _run(ctx)
    layers = result.ranks[0].facts.get("norm_layers")
    if layers is None:
        ctx.require(result)
    plain = [name for name, kind in layers.items() if kind != "SyncBatchNorm"]
    if plain:
        raise ctx.fail(f"BatchNorm not converted: {plain[0]} is a {layers[plain[0]]}; "
                       "nn.SyncBatchNorm.convert_sync_batchnorm(model) replaces every BatchNorm layer", hint=1)
    if not layers:
        raise ctx.fail("the prepared model has no normalization layer left: convert BatchNorm, do not remove it",
                       hint=1)


@check("global_batch_statistics")
def global_batch_statistics(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = ctx.reference("reference", world_size=ctx.world_size, size=SIZE, batch_size=BATCH, steps=STEPS, lr=LR)
    want = {name: reference["steps"][0][name] for name in STATISTICS}
    for rank, facts in enumerate(ranks):
        got = {name: facts["steps"][0][name] for name in STATISTICS}
        difference = first_difference(got, want)
        if difference:
            synced = all(kind == "SyncBatchNorm" for kind in facts["norm_layers"].values())
            why = ("the BatchNorm layers were not converted, so each rank tracks its own batch of "
                   f"{BATCH} samples" if not synced else "check the conversion")
            raise ctx.fail(f"after step 1, rank {rank}'s running statistics are not those of the global batch of "
                           f"{BATCH * ctx.world_size} samples: {difference}; {why}", hint=1)


@check("trains_with_unused_branch")
def trains_with_unused_branch(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = ctx.reference("reference", world_size=ctx.world_size, size=SIZE, batch_size=BATCH, steps=STEPS, lr=LR)
    for step, want in enumerate(reference["steps"], 1):
        parameters = {name: value for name, value in want.items() if name not in STATISTICS}
        for rank, facts in enumerate(ranks):
            difference = first_difference(facts["steps"][step - 1], parameters)
            if difference:
                raise ctx.fail(f"step {step} (aux head {'used' if step % 2 else 'unused'}) on rank {rank} differs "
                               f"from one process training on the union of the ranks' batches: {difference}", hint=3)
