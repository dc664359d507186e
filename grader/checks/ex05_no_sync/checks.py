"""Judging exercise 5: every optimizer step equals the large-batch step, ranks agree, and the
gradients are all-reduced exactly once per step (counted by the grader's own comm hook).
Each check runs with k = 2 and k = 4 micro-batches per step."""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.checks.api import CheckContext, check
from grader.checks.compare import first_difference, near, scale_of

SIZE, BATCH, LR = 150, 4, 0.05  # 150 is no multiple of k*b*W: the sampler pads, the loader and the loop drop
KS = (2, 4)


def _ranks(ctx: CheckContext, k: int) -> list[dict[str, Any]]:
    ranks = ctx.facts("train", size=SIZE, batch_size=BATCH, k=k, lr=LR)
    if not ranks[0]["ddp_wraps"]:
        raise ctx.fail("no DDP wrap: the model was never wrapped in DistributedDataParallel, so no_sync has nothing "
                       "to suppress and the gradients are never averaged", hint=1)
    counts = [len(f["steps"]) for f in ranks]
    if len(set(counts)) != 1:
        raise ctx.fail(f"with k={k} the ranks took different numbers of optimizer steps ({counts})")
    if counts[0] == 0:
        raise ctx.fail(f"with k={k} train_accumulate never called optimizer.step()", hint=4)
    return ranks


def _reference(ctx: CheckContext, k: int) -> dict[str, Any]:
    return ctx.reference("reference", world_size=ctx.world_size, size=SIZE, batch_size=BATCH, k=k, lr=LR)


def _step_count(ctx: CheckContext, k: int, mine: int, want: dict[str, Any]) -> None:
    expected, micro = len(want["steps"]), want["micro_batches"]
    if mine == expected:
        return
    setting = f"with k={k}: {micro} full micro-batches of {BATCH} per rank"
    if mine in (micro, micro + 1):
        raise ctx.fail(f"stepping every micro-step: {mine} optimizer steps instead of {expected} ({setting}); call "
                       f"optimizer.step() once per {k} micro-batches", hint=4)
    if mine == expected + 1:
        raise ctx.fail(f"{mine} optimizer steps instead of {expected} ({setting}): the trailing group of "
                       f"{micro % k} micro-batch(es) made a step; drop a group of fewer than k", hint=4)
    raise ctx.fail(f"{mine} optimizer steps instead of {expected} ({setting}, one step per {k}; a trailing "
                   "partial group makes none)", hint=4)


def _close(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return first_difference(a, b) is None


@check("matches_large_batch")
def matches_large_batch(ctx: CheckContext) -> str:
    for k in KS:
        ranks, want = _ranks(ctx, k), _reference(ctx, k)
        mine = ranks[0]["steps"]
        _step_count(ctx, k, len(mine), want)
        first, expected = mine[0]["grads"], want["steps"][0]["grads"]
        last_micro = want["last_micro_grads"]
        if not _close(first, expected):
            if _close(first, last_micro) or _close(first, {n: g * k for n, g in last_micro.items()}):
                raise ctx.fail(f"zero_grad on every micro-step: with k={k} the first step's gradient is that of the "
                               "last micro-batch alone; clear the gradients only after optimizer.step()", hint=3)
            scale = scale_of(first, expected)
            if near(scale, k):
                raise ctx.fail(f"loss not divided by k: with k={k} the gradient is {scale:.3g} times the large-batch "
                               f"gradient, k times too large; divide each micro-batch loss by {k}", hint=2)
        for step, (got, reference) in enumerate(zip(mine, want["steps"]), 1):
            difference = first_difference(got["grads"], reference["grads"]) or first_difference(
                got["params"], reference["params"])
            if difference and sum(ranks[0]["all_reduces_per_step"]) == 0:
                raise ctx.fail(f"with k={k}, step {step} differs from the large-batch step ({difference}) and no "
                               "gradient was ever all-reduced: no_sync also on the last micro-step?", hint=1)
            if difference:
                raise ctx.fail(
                    f"with k={k}, step {step} differs from one process on the k*b*W = {k * BATCH * ctx.world_size} "
                    f"samples of the step: {difference} (gradient scale "
                    f"{scale_of(got['grads'], reference['grads']):.3g}x). Check the sampler (seed 0), drop_last, the "
                    f"mean loss divided by k, and SGD(lr, momentum=0.9)", hint=5)
        difference = first_difference(ranks[0]["final"], want["steps"][-1]["params"])
        if difference:
            raise ctx.fail(f"train_accumulate returned a model ({ranks[0]['returned']}) whose weights are not the "
                           f"trained ones: {difference}")
    return f"k = {' and '.join(map(str, KS))}: every optimizer step equals one process on its k*b*W samples"


@check("ranks_stay_in_sync")
def ranks_stay_in_sync(ctx: CheckContext) -> None:
    for k in KS:
        ranks = _ranks(ctx, k)
        for rank, facts in enumerate(ranks[1:], 1):
            for step, (mine, first) in enumerate(zip(facts["steps"], ranks[0]["steps"]), 1):
                difference = first_difference(mine["params"], first["params"], rtol=1e-6, atol=1e-7)
                if difference is None:
                    continue
                if sum(ranks[0]["all_reduces_per_step"]) == 0:
                    raise ctx.fail(f"no_sync also on the last micro-step: with k={k} the gradients were never "
                                   f"all-reduced and the ranks diverge at step {step} (rank {rank}'s {difference} from "
                                   "rank 0's); run the k-th backward outside no_sync", hint=1)
                raise ctx.fail(f"with k={k} the ranks diverge at step {step}: rank {rank}'s {difference} from "
                               "rank 0's", hint=1)


@check("one_allreduce_per_step")
def one_allreduce_per_step(ctx: CheckContext) -> str:
    for k in KS:
        ranks, want = _ranks(ctx, k), _reference(ctx, k)
        _step_count(ctx, k, len(ranks[0]["steps"]), want)
        counts = ranks[0]["all_reduces_per_step"]
        if all(count == 1 for count in counts):
            continue
        if all(count == k for count in counts):
            raise ctx.fail(f"correct but k times the communication: with k={k} every optimizer step all-reduced the "
                           f"gradients {k} times, once per micro-batch; run the first k-1 backward passes inside "
                           "ddp_model.no_sync()", hint=1)
        if all(count == 0 for count in counts):
            raise ctx.fail(f"no gradient all-reduce at all with k={k}: is the last micro-step under no_sync too?",
                           hint=1)
        raise ctx.fail(f"with k={k} the gradient all-reduces per optimizer step were {counts}; expected exactly one "
                       "per step, on the last micro-batch", hint=1)
    size = 4 * ranks[0]["parameters"]  # fp32 gradients
    return f"one all-reduce of {size} bytes per optimizer step, where accumulating without no_sync sends k times that"
