"""Reference solution for exercise 9: checkpoint and resume under DDP."""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def save_checkpoint(ddp_model: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int,
                    path: str) -> None:
    """Rank 0 writes the plain model's and the optimizer's state; everyone waits until it is on disk."""
    if dist.get_rank() == 0:
        checkpoint = {
            "model": ddp_model.module.state_dict(),
            "optimizer": optimizer.state_dict(),
            "step": step,
        }
        torch.save(checkpoint, path)
    dist.barrier()


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> int:
    """Every rank restores the plain model and the optimizer (momentum included); returns the step."""
    checkpoint = torch.load(path, map_location="cpu")
    model.load_state_dict(checkpoint["model"])
    optimizer.load_state_dict(checkpoint["optimizer"])
    return checkpoint["step"]
