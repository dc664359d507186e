"""Rank side of exercise 5: run the student's accumulation loop with a step recorder and a
gradient all-reduce counter the grader installs itself; the trusted large-batch reference."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch import nn
from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.checks.training import StepRecorder, accumulation_batches, gradient_on, make_model, make_regression, \
    rank_batches, state, train_reference
from grader.engine.rank_runtime import RankContext


def _count_all_reduces(wraps: list[dict[str, Any]], reduced: list[int]) -> None:
    """After every DDP construction, register a comm hook that all-reduces as DDP would and
    records the bucket index: the count cannot come from the student's code."""
    original = DistributedDataParallel.__init__

    @functools.wraps(original)
    def init(self: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        wraps.append({})

        def counting(group, bucket):  # type: ignore[no-untyped-def]  (DDP rejects string annotations)
            reduced.append(bucket.index())
            return allreduce_hook(group, bucket)

        self.register_comm_hook(self.process_group, counting)

    DistributedDataParallel.__init__ = init


def train(ctx: RankContext, size: int, batch_size: int, k: int, lr: float) -> dict[str, Any]:
    ctx.init_group()
    model = make_model(seed=1000 + ctx.rank)  # different on purpose: only DDP's broadcast aligns them
    ctx.facts["parameters"] = sum(p.numel() for p in model.parameters())
    reduced: list[int] = []
    ctx.facts["ddp_wraps"] = wraps = []
    _count_all_reduces(wraps, reduced)
    # all-reduce passes (bucket 0) since the previous optimizer step, recorded at every step
    ctx.facts["all_reduces_per_step"] = per_step = []
    seen = [0]

    def count_step(*_: Any) -> None:
        passes = reduced.count(0)
        per_step.append(passes - seen[0])
        seen[0] = passes

    handle = register_optimizer_step_pre_hook(count_step)
    recorder = StepRecorder(model)
    train_accumulate = ctx.student("train_accumulate")
    trained = train_accumulate(ctx.rank, ctx.world_size, model, make_regression(size), batch_size, k, lr)
    recorder.close()
    handle.remove()
    ctx.facts.update(recorder.facts())
    ctx.facts["all_reduces_after_last_step"] = reduced.count(0) - seen[0]
    ctx.facts["returned"] = type(trained).__name__
    if isinstance(trained, DistributedDataParallel):
        trained = trained.module
    ctx.facts["final"] = state(trained) if isinstance(trained, nn.Module) else {}
    return {}


def reference(ctx: RankContext, world_size: int, size: int, batch_size: int, k: int, lr: float) -> dict[str, Any]:
    """Trusted: one process, rank 0's initial weights, one step per k*b*W samples; also the first
    step's gradient from the last micro-batch alone (what zero_grad on every micro-step leaves)."""
    model = make_model(seed=1000)
    dataset = make_regression(size)
    steps = accumulation_batches(size, world_size, batch_size, k)
    last_micro = gradient_on(model, dataset, steps[0][-batch_size * world_size:], grad_scale=1.0 / k)
    facts = train_reference(model, dataset, steps, lr).facts()
    facts["last_micro_grads"] = last_micro
    facts["micro_batches"] = sum(len(batch) == batch_size for batch in rank_batches(size, world_size, 0, batch_size, 0))
    return facts
