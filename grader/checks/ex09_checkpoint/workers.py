"""Rank side of exercise 9: the grader trains with DDP, calls the student's save and load around a
fresh model, and continues; every step, every write and every load is recorded.

Rank 0's serializations are held until the other ranks wait for it or move on (see
grader.rank.write_recorder), so a missing barrier makes the other ranks read before the file
lands, every time rather than now and then, and code that waits loses no time.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

from grader.engine import exact
from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.training import (
    MOMENTUM,
    StepRecorder,
    TinyRegressor,
    make_model,
    make_regression,
    rank_batches,
    replay_all,
    state,
    train_reference,
    union_batches,
)
from grader.rank.write_recorder import Waypoints, WriteRecorder


def _train(
    ddp_model: DistributedDataParallel,
    optimizer: torch.optim.Optimizer,
    batches: list[list[int]],
    dataset: TensorDataset,
) -> list[dict[str, Any]]:
    """The grader's DDP loop; every step's gradient and the plain model's weights after it."""
    recorder = StepRecorder(ddp_model.module)
    inputs, targets = dataset.tensors
    try:
        for indices in batches:
            optimizer.zero_grad()
            F.mse_loss(ddp_model(inputs[indices]), targets[indices]).backward()
            optimizer.step()
    finally:
        recorder.close()
    return recorder.steps


STATE = "optimizer state"  # where a refused object was found, as the judge says it


def resume(
    ctx: RankContext,
    size: int,
    batch_size: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    path: str,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    ctx.init_group()
    waypoints = Waypoints.for_this_run(os.path.dirname(path))
    writes = WriteRecorder(waypoints, hold_saves=ctx.rank == 0).install()  # before the student's imports
    ctx.facts["writes"] = writes.events
    ctx.facts["host"] = socket.gethostname()
    save_checkpoint, load_checkpoint = ctx.student("save_checkpoint"), ctx.student("load_checkpoint")
    dataset = make_regression(size, data_seed)
    batches = rank_batches(size, ctx.world_size, ctx.rank, batch_size, epoch=0)[: steps_before + steps_after]

    model = make_model(seed=model_seed + ctx.rank)  # only DDP's broadcast makes the ranks agree
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    ddp_model = DistributedDataParallel(model)
    ctx.facts["start"] = state(model)
    before = _train(ddp_model, optimizer, batches[:steps_before], dataset)
    ctx.facts["saved_state"] = state(model)
    save_checkpoint(ddp_model, optimizer, steps_before, path)
    ctx.facts["save_returned_at"] = time.time()  # before this rank says it moved on: see write_recorder
    writes.move_on()

    fresh = make_model(seed=model_seed + 1000 + ctx.rank)  # not the trained weights: only a load restores them
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=lr, momentum=MOMENTUM)
    returned = load_checkpoint(fresh, fresh_optimizer, path)
    writes.stop()
    ctx.facts["returned_step"] = returned if isinstance(returned, int) else repr(returned)
    ctx.facts["loaded_state"] = state(fresh)
    ctx.facts["momentum_restored"] = sum(  # read by dict's own methods: the student's load may set any mapping
        any(key == "momentum_buffer" for key, _ in exact.items(buffers, STATE))
        for _, buffers in exact.items(fresh_optimizer.state, STATE)
    )
    after = _train(DistributedDataParallel(fresh), fresh_optimizer, batches[steps_before:], dataset)
    ctx.facts["steps"] = before + after
    return {}


def reference(
    ctx: RankContext,
    world_size: int,
    size: int,
    batch_size: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    """Trusted, one process on the union batches: the uninterrupted run, every step."""
    dataset = make_regression(size, data_seed)
    steps = union_batches(size, world_size, batch_size, epochs=1)[: steps_before + steps_after]
    facts = train_reference(make_model(seed=model_seed), dataset, steps, lr).facts()
    facts["momentum"] = MOMENTUM
    return facts


def replays(
    ctx: RankContext,
    world_size: int,
    size: int,
    batch_size: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: the judge's hypotheses (hypotheses.toml) replayed on the uninterrupted run's samples."""
    dataset = make_regression(size, data_seed)
    schedules = {"correct": union_batches(size, world_size, batch_size, epochs=1)[: steps_before + steps_after]}
    return replay_all(lambda: make_model(seed=model_seed), dataset, schedules, lr, hypotheses)


def _as_step(value: Any) -> int | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, torch.Tensor) and value.numel() == 1 and not value.is_floating_point():
        return int(value.item())
    return None


def _model_state(value: Any, names: set[str]) -> dict[str, torch.Tensor] | None:
    """`value` if it is a state dict of the model (its keys, with or without DDP's `module.`)."""
    if not isinstance(value, dict) or not value or not all(isinstance(v, torch.Tensor) for v in value.values()):
        return None
    keys = {str(k).removeprefix("module.") for k in value}
    return {str(k): v for k, v in value.items()} if keys == names else None


def inspect_checkpoint(ctx: RankContext, path: str) -> dict[str, Any]:
    """Trusted: read the checkpoint with weights_only (no code runs) and describe it by content:
    which entry is the model's state dict, which the optimizer's, and the integers it holds."""
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return {"exists": False}
    except Exception as exc:
        return {"exists": True, "problem": f"torch.load failed: {type(exc).__name__}: {exc}"}
    names = set(TinyRegressor().state_dict())
    if _model_state(loaded, names) is not None:
        return {
            "exists": True,
            "keys": [],
            "model": _model_state(loaded, names),
            "model_key": "",
            "integers": {},
            "only_model": True,
        }
    if not isinstance(loaded, dict):
        return {"exists": True, "problem": f"it holds a {type(loaded).__name__}, not a dict"}
    facts: dict[str, Any] = {"exists": True, "keys": sorted(str(k) for k in loaded), "integers": {}}
    for key, value in loaded.items():
        model = _model_state(value, names)
        if model is not None and "model" not in facts:
            facts["model"], facts["model_key"] = model, str(key)
        elif isinstance(value, dict) and {"state", "param_groups"} <= set(value) and "optimizer_key" not in facts:
            buffers = value["state"] if isinstance(value["state"], dict) else {}
            facts["optimizer_key"] = str(key)
            facts["momentum_buffers"] = sum(isinstance(s, dict) and "momentum_buffer" in s for s in buffers.values())
        elif (step := _as_step(value)) is not None:
            facts["integers"][str(key)] = step
    return facts
