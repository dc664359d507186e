"""Rank side of exercise 1: call the student's setup/cleanup and record what they did."""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
import torch.distributed as dist

from grader.engine import tamper
from grader.engine.rank_runtime import RankContext
from grader.rank.simulated_gpu import SimulatedGpuNode

# The collectives a setup_ddp might issue itself; the first one fixes the GPU NCCL would use.
COLLECTIVES = (
    "barrier",
    "all_reduce",
    "broadcast",
    "all_gather",
    "all_gather_object",
    "broadcast_object_list",
    "monitored_barrier",
    "reduce",
    "gather",
    "scatter",
    "all_to_all",
)
DEVICE_BINDERS = (
    (torch.cuda, "set_device"),
    (torch.accelerator, "set_device_index"),
    (torch.accelerator, "set_device_idx"),
)


def gpus_per_node(world_size: int) -> int:
    """The simulated layout: one node of two GPUs at W=2, two nodes from W=3 on (W=4: 2 x 2), so
    that a rank that binds no GPU, and one that binds its global rank, both show."""
    return world_size if world_size <= 2 else (world_size + 1) // 2


def _init_arguments(original: Any, args: tuple, kwargs: dict) -> dict[str, Any]:
    arguments = inspect.signature(original).bind_partial(*args, **kwargs).arguments
    return {
        "backend": str(arguments.get("backend")) if arguments.get("backend") is not None else None,
        "init_method": arguments.get("init_method"),
        "rank": arguments.get("rank"),
        "world_size": arguments.get("world_size"),
        "store_port": getattr(arguments.get("store"), "port", None),  # a TCPStore's
        "master_addr": os.environ.get("MASTER_ADDR"),
        "master_port": os.environ.get("MASTER_PORT"),
    }


def _spy_init(ctx: RankContext) -> list[dict[str, Any]]:
    real_init = dist.init_process_group
    return ctx.spy(dist, "init_process_group", lambda *a, **k: _init_arguments(real_init, a, k))


def _spy_binding(ctx: RankContext, owner: Any, name: str) -> list[dict[str, Any]]:
    """Record every GPU binding. Without GPUs (gloo) only record it, so that the code goes on to
    show what it does next (ask for nccl, say), as it would on the GPU node it took this for."""
    if ctx.backend != "gloo":
        return ctx.spy(owner, name)
    calls: list[dict[str, Any]] = []
    tamper.install(owner, name, lambda *args, **kwargs: calls.append({}))
    return calls


def join_and_leave(ctx: RankContext, summands: list[int], broadcast: list[int]) -> dict[str, Any]:
    """setup_ddp, two collectives, cleanup_ddp; every step recorded as it happens. Rank r
    all-reduces summands[r] and offers broadcast[r]: values only the judge knows in advance."""
    ctx.facts["grader_port"] = os.environ["MASTER_PORT"]
    ctx.facts["init_calls"] = _spy_init(ctx)
    ctx.facts["device_bindings"] = {
        f"{owner.__name__}.{name}": _spy_binding(ctx, owner, name) for owner, name in DEVICE_BINDERS
    }
    setup, cleanup = ctx.student("setup_ddp"), ctx.student("cleanup_ddp")
    setup(ctx.rank, ctx.world_size, "nccl" if ctx.backend == "nccl" else None)
    ctx.facts["initialized"] = dist.is_initialized()
    if dist.is_initialized():
        ctx.facts["group"] = {
            "rank": dist.get_rank(),
            "world_size": dist.get_world_size(),
            "backend": str(dist.get_backend()),
            "backend_config": str(dist.get_backend_config()),
        }
        total = torch.tensor([float(summands[ctx.rank])], device=ctx.device)
        dist.all_reduce(total)
        ctx.facts["all_reduce"] = total
        source = ctx.world_size - 1
        value = torch.tensor([float(broadcast[ctx.rank])], device=ctx.device)
        dist.broadcast(value, src=source)
        ctx.facts["broadcast"] = value
    cleanup()
    ctx.facts["initialized_after_cleanup"] = dist.is_initialized()
    return {}


def simulated_gpu_node(ctx: RankContext) -> dict[str, Any]:
    """setup_ddp on a CPU process that believes it sits on a node of GPUs, LOCAL_RANK set as a
    launcher sets it, two nodes where the world allows (a global rank is then no GPU index).

    Device queries are answered by the simulated node and the NCCL group is formed with Gloo
    underneath, so that which GPU each rank binds, and whether it binds it before its first
    collective, can be checked on any laptop. Events are recorded in order; a rank that fails
    still reports them.
    """
    gpus = gpus_per_node(ctx.world_size)
    os.environ.update(LOCAL_RANK=str(ctx.rank % gpus), LOCAL_WORLD_SIZE=str(gpus))
    events: list[dict[str, Any]] = []
    ctx.facts.update(events=events, gpus_per_node=gpus, local_rank=ctx.rank % gpus)
    node = SimulatedGpuNode(gpus, events.append)
    node.install()
    real_init = dist.init_process_group
    keep = ("init_method", "rank", "world_size", "timeout", "store")

    def init_process_group(*args: Any, **kwargs: Any) -> None:
        bound = inspect.signature(real_init).bind_partial(*args, **kwargs).arguments
        device_id = bound.get("device_id")
        events.append(
            {
                "call": "init_process_group",
                **_init_arguments(real_init, args, kwargs),
                "device_id_index": node.index(device_id) if device_id is not None else None,
                "device": node.current,
            }
        )
        real_init("gloo", **{k: v for k, v in bound.items() if k in keep})

    tamper.install(dist, "init_process_group", init_process_group)
    for name in COLLECTIVES:
        _record_collective(name, node, events)
    setup, cleanup = ctx.student("setup_ddp"), ctx.student("cleanup_ddp")
    setup(ctx.rank, ctx.world_size)
    events.append({"call": "setup_ddp returned", "device": node.current})
    if dist.is_initialized():
        # The group's first use, if setup_ddp made none; and every rank must have finished
        # connecting before any leaves (a rank that exits at once can break a slower peer's gloo).
        dist.barrier()
    cleanup()
    return {}


def _record_collective(name: str, node: SimulatedGpuNode, events: list[dict[str, Any]]) -> None:
    original = getattr(dist, name)

    def collective(*args: Any, **kwargs: Any) -> Any:
        events.append({"call": name, "device": node.current})
        return original(*args, **kwargs)

    tamper.install(dist, name, collective)
