"""Rank side of exercise 3: run the student's training loop under a step recorder; trusted
workers for the single-process reference and for reading the checkpoint back."""

from __future__ import annotations

import os
from typing import Any

import torch
from torch.nn.parallel import DistributedDataParallel

from grader.checks.training import TinyRegressor, make_model, make_regression, record_training, train_reference, \
    union_batches
from grader.engine.rank_runtime import RankContext


def _describe_save(obj: Any, f: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"path": str(f), "keys": [str(k) for k in obj][:64] if isinstance(obj, dict) else None}


def train(ctx: RankContext, size: int, epochs: int, batch_size: int, lr: float, checkpoint_path: str) -> dict[str, Any]:
    ctx.init_group()
    model = make_model(seed=1000 + ctx.rank)  # different on purpose: only DDP's broadcast aligns them
    dataset = make_regression(size)
    ctx.facts["ddp_wraps"] = ctx.spy(DistributedDataParallel, "__init__")
    ctx.facts["saves"] = ctx.spy(torch, "save", _describe_save)
    train_ddp = ctx.student("train_ddp")
    record_training(ctx.facts, model, lambda: train_ddp(ctx.rank, ctx.world_size, model, dataset, epochs,
                                                        batch_size, lr, checkpoint_path))
    return {}


def reference(ctx: RankContext, world_size: int, size: int, epochs: int, batch_size: int, lr: float) -> dict[str, Any]:
    """Trusted: one process, rank 0's initial weights, the union of the ranks' batches per step."""
    model = make_model(seed=1000)
    steps = union_batches(size, world_size, batch_size, epochs)
    return train_reference(model, make_regression(size), steps, lr).facts()


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
