"""Rank side of exercise 9: the grader trains with DDP, calls the student's save and load around a
fresh model, and continues; a timeline of saves, barriers and loads is recorded.

Rank 0's `torch.save` is made slow on purpose (it sleeps before writing), so a missing barrier
makes the other ranks read before the file exists, every time rather than now and then.
"""

from __future__ import annotations

import functools
import time
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

from grader.checks.training import MOMENTUM, make_model, make_regression, rank_batches, state, train_reference, \
    union_batches
from grader.engine.rank_runtime import RankContext

SAVE_DELAY = 0.2


def _timed(owner: Any, attribute: str, events: list[dict[str, Any]], delay: float = 0.0) -> None:
    """Replace owner.attribute by a version that logs its start and end (and may start late)."""
    original = getattr(owner, attribute)

    @functools.wraps(original)
    def timed(*args: Any, **kwargs: Any) -> Any:
        event: dict[str, Any] = {"call": attribute, "start": time.time()}
        if attribute == "save" and len(args) > 1:
            event["path"] = str(args[1])
        events.append(event)
        time.sleep(delay)
        result = original(*args, **kwargs)
        event["end"] = time.time()
        return result

    setattr(owner, attribute, timed)


def _train(ddp_model: DistributedDataParallel, optimizer: torch.optim.Optimizer, batches: list[list[int]],
           dataset: TensorDataset) -> list[dict[str, torch.Tensor]]:
    """The grader's DDP loop; the plain model's weights after every step."""
    inputs, targets = dataset.tensors
    after = []
    for indices in batches:
        optimizer.zero_grad()
        F.mse_loss(ddp_model(inputs[indices]), targets[indices]).backward()
        optimizer.step()
        after.append(state(ddp_model.module))
    return after


def resume(ctx: RankContext, size: int, batch_size: int, steps_before: int, steps_after: int, lr: float,
           path: str) -> dict[str, Any]:
    ctx.init_group()
    events: list[dict[str, Any]] = []
    ctx.facts["events"] = events
    _timed(torch, "save", events, delay=SAVE_DELAY if ctx.rank == 0 else 0.0)
    _timed(torch, "load", events)
    save_checkpoint, load_checkpoint = ctx.student("save_checkpoint"), ctx.student("load_checkpoint")
    dataset = make_regression(size)
    batches = rank_batches(size, ctx.world_size, ctx.rank, batch_size, epoch=0)[: steps_before + steps_after]

    model = make_model(seed=1000 + ctx.rank)  # only DDP's broadcast makes the ranks agree
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    ddp_model = DistributedDataParallel(model)
    _train(ddp_model, optimizer, batches[:steps_before], dataset)
    ctx.facts["saved_state"] = state(model)
    save_checkpoint(ddp_model, optimizer, steps_before, path)

    fresh = make_model(seed=2000 + ctx.rank)
    fresh_optimizer = torch.optim.SGD(fresh.parameters(), lr=lr, momentum=MOMENTUM)
    returned = load_checkpoint(fresh, fresh_optimizer, path)
    ctx.facts["returned_step"] = returned if isinstance(returned, int) else repr(returned)
    ctx.facts["loaded_state"] = state(fresh)
    ctx.facts["momentum_restored"] = sum("momentum_buffer" in s for s in fresh_optimizer.state.values())
    ctx.facts["resumed"] = _train(DistributedDataParallel(fresh), fresh_optimizer, batches[steps_before:], dataset)
    return {}


def reference(ctx: RankContext, world_size: int, size: int, batch_size: int, steps_before: int, steps_after: int,
              lr: float) -> dict[str, Any]:
    """Trusted, one process on the union batches: the uninterrupted run, and the same run with the
    optimizer restarted (momentum lost) at the checkpoint."""
    dataset = make_regression(size)
    steps = union_batches(size, world_size, batch_size, epochs=1)[: steps_before + steps_after]
    uninterrupted = train_reference(make_model(seed=1000), dataset, steps, lr).facts()["steps"]
    model = make_model(seed=1000)
    train_reference(model, dataset, steps[:steps_before], lr)
    restarted = train_reference(model, dataset, steps[steps_before:], lr).facts()["steps"]
    return {
        "uninterrupted": [step["params"] for step in uninterrupted[steps_before:]],
        "restarted": [step["params"] for step in restarted],
    }


def inspect_checkpoint(ctx: RankContext, path: str) -> dict[str, Any]:
    """Trusted: read the checkpoint with weights_only (no code runs) and describe it."""
    try:
        loaded = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        return {"exists": False}
    except Exception as exc:
        return {"exists": True, "problem": f"torch.load failed: {type(exc).__name__}: {exc}"}
    if not isinstance(loaded, dict):
        return {"exists": True, "problem": f"it holds a {type(loaded).__name__}, not a dict"}
    facts: dict[str, Any] = {"exists": True, "keys": sorted(str(k) for k in loaded)}
    model = loaded.get("model")
    if isinstance(model, dict):
        facts["model"] = {str(k): v for k, v in model.items() if isinstance(v, torch.Tensor)}
    optimizer = loaded.get("optimizer")
    if isinstance(optimizer, dict):
        buffers = optimizer.get("state", {})
        facts["momentum_buffers"] = sum(isinstance(s, dict) and "momentum_buffer" in s for s in buffers.values())
    facts["step"] = loaded.get("step") if isinstance(loaded.get("step"), int) else repr(loaded.get("step"))
    return facts
