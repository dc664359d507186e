"""Judging exercise 3: sync across ranks, equality with the large-batch reference, checkpoint."""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.checks.api import CheckContext, check
from grader.checks.compare import first_difference, near, scale_of

SIZE, EPOCHS, BATCH, LR = 100, 2, 8, 0.05


def _checkpoint_path(ctx: CheckContext) -> str:
    return str(ctx.scratch / f"checkpoint-w{ctx.world_size}.pt")


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    ranks = ctx.facts("train", size=SIZE, epochs=EPOCHS, batch_size=BATCH, lr=LR,
                      checkpoint_path=_checkpoint_path(ctx))
    counts = [len(f["steps"]) for f in ranks]
    if len(set(counts)) != 1:
        raise ctx.fail(f"the ranks took different numbers of optimizer steps ({counts}): a rank that stops "
                       "early leaves the others waiting in an all-reduce")
    if counts[0] == 0:
        raise ctx.fail("train_ddp never called optimizer.step()")
    return ranks


def _differs(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return first_difference(a, b, rtol=1e-6, atol=1e-7) is not None


@check("ranks_stay_in_sync")
def ranks_stay_in_sync(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    wrapped = all(f["ddp_wraps"] for f in ranks)
    for rank, facts in enumerate(ranks[1:], 1):
        if _differs(facts["start"], ranks[0]["start"]):
            raise ctx.fail(
                f"no DDP wrap: rank {rank} started training from other weights than rank 0 (the grader seeds "
                "each rank differently; DDP's constructor broadcasts rank 0's weights)", hint=1)
        for step, (mine, first) in enumerate(zip(facts["steps"], ranks[0]["steps"]), 1):
            if _differs(mine["params"], first["params"]):
                difference = first_difference(mine["params"], first["params"], rtol=1e-6, atol=1e-7)
                if not wrapped:
                    raise ctx.fail(f"no DDP wrap: ranks diverge at step {step} ({difference}); the gradients "
                                   "are never averaged across ranks", hint=1)
                raise ctx.fail(
                    f"ranks diverge at step {step}: rank {rank}'s {difference} from rank 0's. The model is wrapped "
                    "in DDP but the gradients were not synchronized: is the forward pass going through the "
                    "unwrapped model instead of the DDP wrapper?", hint=2)


@check("matches_large_batch")
def matches_large_batch(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = ctx.reference("reference", world_size=ctx.world_size, size=SIZE, epochs=EPOCHS,
                              batch_size=BATCH, lr=LR)
    mine, want = ranks[0]["steps"], reference["steps"]
    if len(mine) != len(want):
        ratio = len(mine) / len(want)
        why = (" (each rank went through the whole dataset: is the DistributedSampler missing?)"
               if near(ratio, ctx.world_size, 0.2) else "")
        raise ctx.fail(f"{len(mine)} optimizer steps instead of {len(want)} ({EPOCHS} epochs of {SIZE} samples, "
                       f"batches of {BATCH} per rank){why}")
    scale = scale_of(mine[0]["grads"], want[0]["grads"])
    if near(scale, BATCH):
        raise ctx.fail(f"loss summed, not averaged: the first gradient is {scale:.3g} times the reference, the "
                       f"batch size {BATCH}; use the mean loss", hint=3)
    if near(scale, ctx.world_size) and ctx.world_size > 1:
        raise ctx.fail(f"the first gradient is {scale:.3g} times the reference, the world size: gradients are "
                       "summed across ranks instead of averaged")
    for step, (got, expected) in enumerate(zip(mine, want), 1):
        difference = first_difference(got["grads"], expected["grads"]) or first_difference(
            got["params"], expected["params"])
        if difference:
            raise ctx.fail(
                f"step {step} differs from one process training on the union of the ranks' batches: {difference} "
                f"(gradient scale {scale_of(got['grads'], expected['grads']):.3g}x). Check the sampler (seed 0, "
                "set_epoch), the mean loss, and SGD(lr, momentum=0.9)")
    final = ranks[0]["final"]
    difference = first_difference(final, want[-1]["params"])
    if difference:
        raise ctx.fail(f"train_ddp returned a model ({ranks[0]['returned']}) whose weights are not the trained "
                       f"ones: {difference}")


@check("checkpoint_rank0_only")
def checkpoint_rank0_only(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    path = _checkpoint_path(ctx)
    for rank, facts in enumerate(ranks[1:], 1):
        if facts["saves"]:
            raise ctx.fail(f"every rank saving: rank {rank} also called torch.save({facts['saves'][0]['path']!r}); "
                           "only rank 0 should write, then all ranks meet at a barrier", hint=4)
    paths = [save["path"] for save in ranks[0]["saves"]]
    if path not in paths:
        raise ctx.fail(f"rank 0 did not save the checkpoint to checkpoint_path (torch.save calls: {paths or 'none'})",
                       hint=4)


@check("checkpoint_loads_plain")
def checkpoint_loads_plain(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    saved = ctx.inspect("inspect_checkpoint", path=_checkpoint_path(ctx))
    if not saved["exists"]:
        raise ctx.fail("no checkpoint was written at checkpoint_path", hint=4)
    if saved.get("problem"):
        raise ctx.fail(f"the checkpoint cannot be used: {saved['problem']}")
    prefixed = [key for key in saved["keys"] if key.startswith("module.")]
    if prefixed:
        raise ctx.fail(f"`module.` prefix in the checkpoint (e.g. {prefixed[0]!r}): that is the DDP wrapper's "
                       "state_dict, which a plain model cannot load; save model.state_dict() of the inner model",
                       hint=5)
    if saved["loads_plain"]:
        raise ctx.fail(f"the checkpoint does not load into a plain model: {saved['loads_plain']}")
    difference = first_difference(saved["tensors"], ranks[0]["final"])
    if difference:
        raise ctx.fail(f"the checkpoint does not hold the trained weights: {difference}")
