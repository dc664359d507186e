"""Reference solution for exercise 1: form a process group."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist


def setup_ddp(rank: int, world_size: int, backend: str | None = None) -> None:
    """Join the default process group; the rendezvous comes from MASTER_ADDR/MASTER_PORT."""
    if backend is None:
        backend = "nccl" if torch.cuda.is_available() else "gloo"
    if backend == "nccl":
        local_rank = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(local_rank)
    dist.init_process_group(backend, rank=rank, world_size=world_size)


def cleanup_ddp() -> None:
    """Leave and destroy the default process group."""
    if dist.is_initialized():
        dist.destroy_process_group()
