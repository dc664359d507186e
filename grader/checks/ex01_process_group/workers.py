"""Rank side of exercise 1: call the student's setup/cleanup and record what they did."""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
import torch.distributed as dist

from grader.engine.rank_runtime import RankContext


def _init_arguments(original: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    arguments = inspect.signature(original).bind_partial(*args, **kwargs).arguments
    return {
        "backend": str(arguments.get("backend")) if arguments.get("backend") is not None else None,
        "init_method": arguments.get("init_method"),
        "rank": arguments.get("rank"),
        "world_size": arguments.get("world_size"),
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": os.environ.get("MASTER_PORT"),
    }


def join_and_leave(ctx: RankContext) -> dict[str, Any]:
    """setup_ddp, two collectives, cleanup_ddp; every step recorded as it happens."""
    real_init = dist.init_process_group
    ctx.facts["grader_port"] = os.environ["MASTER_PORT"]
    ctx.facts["init_calls"] = ctx.spy(dist, "init_process_group",
                                      lambda *a, **k: _init_arguments(real_init, a, k))
    ctx.facts["set_device_calls"] = ctx.spy(torch.cuda, "set_device")
    setup, cleanup = ctx.student("setup_ddp"), ctx.student("cleanup_ddp")
    setup(ctx.rank, ctx.world_size, "nccl" if ctx.backend == "nccl" else None)
    ctx.facts["initialized"] = dist.is_initialized()
    if dist.is_initialized():
        ctx.facts["group"] = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "backend": str(dist.get_backend()),
        }
        total = torch.tensor([float(ctx.rank + 1)], device=ctx.device)
        dist.all_reduce(total)
        ctx.facts["all_reduce"] = total
        source = ctx.world_size - 1
        value = torch.tensor([100.0 + ctx.rank], device=ctx.device)
        dist.broadcast(value, src=source)
        ctx.facts["broadcast"] = value
    cleanup()
    ctx.facts["initialized_after_cleanup"] = dist.is_initialized()
    return {}


def _device_index(device: Any) -> int | None:
    if isinstance(device, int):
        return device
    try:
        return torch.device(device).index
    except (RuntimeError, TypeError):
        return None


def simulated_gpu_node(ctx: RankContext) -> dict[str, Any]:
    """setup_ddp on a CPU process that believes it has one GPU per rank.

    CUDA queries are faked and the NCCL group is formed with Gloo underneath, so the order of
    `set_device` and `init_process_group` can be checked on any laptop.
    """
    events: list[dict[str, Any]] = []
    ctx.facts["events"] = events
    real_init = dist.init_process_group
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: ctx.world_size
    torch.cuda.set_device = lambda device: events.append(
        {"call": "set_device", "device": _device_index(device)}
    )

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        call = _init_arguments(real_init, args, kwargs)
        events.append({"call": "init_process_group", **call})
        bound = inspect.signature(real_init).bind_partial(*args, **kwargs).arguments
        keep = {k: v for k, v in bound.items() if k in ("init_method", "rank", "world_size", "timeout", "store")}
        real_init("gloo", **keep)

    dist.init_process_group = init_process_group
    setup, cleanup = ctx.student("setup_ddp"), ctx.student("cleanup_ddp")
    setup(ctx.rank, ctx.world_size)
    if dist.is_initialized():
        # Every rank must have finished connecting before any leaves: a rank that exits right
        # after its own init can break a slower peer's gloo connection ("closed by peer").
        dist.barrier()
    cleanup()
    return {}
