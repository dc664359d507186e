"""Rank side of exercise 3: run the student's training loop under a step recorder, a forward
recorder and a write recorder; trusted workers for the single-process reference and for reading
the checkpoint back."""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.training import (
    MOMENTUM,
    TinyRegressor,
    loader_batches,
    make_model,
    make_regression,
    record_training,
    replay_all,
    train_reference,
    union_batches,
)
from grader.rank.write_recorder import Waypoints, WriteRecorder


def train(
    ctx: RankContext,
    size: int,
    epochs: int,
    batch_size: int,
    lr: float,
    checkpoint_path: str,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    ctx.init_group()
    model = make_model(seed=model_seed + ctx.rank)  # different on purpose: only DDP's broadcast aligns them
    dataset = make_regression(size, data_seed)
    ctx.facts["ddp_wraps"] = ctx.spy(DistributedDataParallel, "__init__")
    waypoints = Waypoints.for_this_run(os.path.dirname(checkpoint_path))
    writes = WriteRecorder(waypoints, hold_saves=ctx.rank == 0).install()  # before the student's imports
    ctx.facts["writes"] = writes.events
    ctx.facts["host"] = socket.gethostname()
    train_ddp = ctx.student("train_ddp")

    def run() -> Any:
        trained = train_ddp(ctx.rank, ctx.world_size, model, dataset, epochs, batch_size, lr, checkpoint_path)
        ctx.facts["returned_at"] = time.time()  # before this rank says it moved on: see write_recorder
        writes.move_on()
        return trained

    try:
        record_training(ctx.facts, model, run, inputs=dataset.tensors[0])
    finally:
        writes.stop()
    return {}


def reference(
    ctx: RankContext,
    world_size: int,
    size: int,
    epochs: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    """Trusted: one process, rank 0's initial weights, the union of the ranks' batches per step;
    the batches each rank should draw and those of known data mistakes; per step, the mean loss of
    rank 0's batch at the weights it starts from."""
    model = make_model(seed=model_seed)
    dataset = make_regression(size, data_seed)
    expected = loader_batches(size, world_size, batch_size, epochs)
    steps = union_batches(size, world_size, batch_size, epochs)
    facts = train_reference(model, dataset, steps, lr, parts=[[batch] for batch in expected[0]]).facts()
    facts["batches"] = expected
    facts["mistaken_batches"] = {
        "no_set_epoch": loader_batches(size, world_size, batch_size, epochs, set_epoch=False),
        "unshuffled": loader_batches(size, world_size, batch_size, epochs, shuffle=False),
        "epochs_from_one": loader_batches(size, world_size, batch_size, epochs, first_epoch=1),
        "dropped_partial_batch": [[batch for batch in rank if len(batch) == batch_size] for rank in expected],
    }
    facts["momentum"] = MOMENTUM
    return facts


def replays(
    ctx: RankContext,
    world_size: int,
    size: int,
    epochs: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: each of the judge's hypotheses (hypotheses.toml) replayed from rank 0's initial weights on
    the same samples: the correct steps' union batches, each rank's share on its own as under DDP (so that a
    diverging run's replay rounds as the run does), or rank 0's own batches alone ("rank0_own")."""
    dataset = make_regression(size, data_seed)
    per_rank = loader_batches(size, world_size, batch_size, epochs)
    schedules = {"correct": union_batches(size, world_size, batch_size, epochs), "rank0_own": per_rank[0]}
    shares = {"correct": [list(batches) for batches in zip(*per_rank)]}
    return replay_all(lambda: make_model(seed=model_seed), dataset, schedules, lr, hypotheses, shares)


def inspect_checkpoint(ctx: RankContext, path: str) -> dict[str, Any]:
    """Trusted: load the checkpoint with weights_only (no code runs) and try a plain model."""
    if not os.path.exists(path):
        return {"exists": False}
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:
        return {"exists": True, "problem": f"torch.load failed: {type(exc).__name__}: {exc}"}
    if not isinstance(loaded, dict) or not all(isinstance(v, torch.Tensor) for v in loaded.values()):
        return {"exists": True, "problem": f"it holds a {type(loaded).__name__}, not a state_dict of tensors"}
    facts: dict[str, Any] = {"exists": True, "keys": [str(k) for k in loaded], "tensors": loaded}
    try:
        TinyRegressor().load_state_dict(loaded)
        facts["loads_plain"] = ""
    except RuntimeError as exc:
        facts["loads_plain"] = str(exc).splitlines()[0]
    return facts
