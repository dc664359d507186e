"""Rank side of exercise 5: run the student's accumulation loop with a step recorder and a
gradient all-reduce counter the grader installs itself; the trusted large-batch reference."""

from __future__ import annotations

import functools
from typing import Any

from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import allreduce_hook
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.engine import tamper
from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.training import (
    MOMENTUM,
    accumulation_batches,
    loader_batches,
    make_model,
    make_regression,
    record_training,
    replay_all,
    train_reference,
)


class AllReduceCounter:
    """Counts DDP's gradient all-reduces between optimizer steps, from a comm hook the grader
    registers on every DDP it sees constructed: the count cannot come from the student's code."""

    def __init__(self) -> None:
        self.wraps: list[dict[str, Any]] = []  # one entry per DDP construction
        self.per_step: list[int] = []  # all-reduce passes over the gradients before each optimizer step
        self._passes = 0
        self._counted = 0
        self._handle = register_optimizer_step_pre_hook(self._step)
        original = DistributedDataParallel.__init__
        counter = self

        @functools.wraps(original)
        def init(ddp: DistributedDataParallel, *args: Any, **kwargs: Any) -> None:
            original(ddp, *args, **kwargs)
            counter.wraps.append({})
            ddp.register_comm_hook(ddp.process_group, counter._hook)

        tamper.install(DistributedDataParallel, "__init__", init)

    def _hook(self, group, bucket):  # not annotated: DDP rejects string annotations
        """All-reduce as DDP's default does; bucket 0 starts a pass over all the gradients."""
        self._passes += bucket.index() == 0
        return allreduce_hook(group, bucket)

    def _step(self, *_: Any) -> None:
        self.per_step.append(self._passes - self._counted)
        self._counted = self._passes

    def close(self) -> None:
        self._handle.remove()


def train(
    ctx: RankContext, size: int, batch_size: int, k: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    ctx.init_group()
    model = make_model(seed=model_seed + ctx.rank)  # different on purpose: only DDP's broadcast aligns them
    dataset = make_regression(size, data_seed)
    ctx.facts["parameters"] = sum(p.numel() for p in model.parameters())
    counter = AllReduceCounter()
    ctx.facts["ddp_wraps"] = counter.wraps
    ctx.facts["all_reduces_per_step"] = counter.per_step
    ctx.facts["no_sync_entries"] = ctx.spy(DistributedDataParallel, "no_sync")
    train_accumulate = ctx.student("train_accumulate")
    record_training(
        ctx.facts,
        model,
        lambda: train_accumulate(ctx.rank, ctx.world_size, model, dataset, batch_size, k, lr),
        inputs=dataset.tensors[0],
    )
    counter.close()
    return {}


def _full(batches: list[list[list[int]]], batch_size: int) -> list[list[list[int]]]:
    return [[batch for batch in rank if len(batch) == batch_size] for rank in batches]


def reference(
    ctx: RankContext, world_size: int, size: int, batch_size: int, k: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: one process, rank 0's initial weights, one step per k*b*W samples; the micro-batches
    each rank should draw (full ones only) and those of an unshuffled sampler; per step, the mean loss
    of each of rank 0's k micro-batches at the weights the step starts from."""
    model = make_model(seed=model_seed)
    dataset = make_regression(size, data_seed)
    steps = accumulation_batches(size, world_size, batch_size, k)
    batches = _full(loader_batches(size, world_size, batch_size, epochs=1), batch_size)
    parts = [batches[0][g * k : (g + 1) * k] for g in range(len(steps))]
    facts = train_reference(model, dataset, steps, lr, parts=parts).facts()
    facts["batches"] = batches
    facts["mistaken_batches"] = {
        "unshuffled": _full(loader_batches(size, world_size, batch_size, epochs=1, shuffle=False), batch_size),
        "partial_batch_used": loader_batches(size, world_size, batch_size, epochs=1),
    }
    facts["micro_batches"] = len(facts["batches"][0])
    facts["momentum"] = MOMENTUM
    return facts


def replays(
    ctx: RankContext,
    world_size: int,
    size: int,
    batch_size: int,
    k: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: the judge's hypotheses (hypotheses.toml) replayed from rank 0's initial weights on the same
    samples: each step's k micro-batches of every rank ("correct"), or only the last of them ("last_micro")."""
    dataset = make_regression(size, data_seed)
    steps = accumulation_batches(size, world_size, batch_size, k)
    schedules = {"correct": steps, "last_micro": [step[-batch_size * world_size :] for step in steps]}
    return replay_all(lambda: make_model(seed=model_seed), dataset, schedules, lr, hypotheses)
