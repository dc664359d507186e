"""Reference solution for exercise 17: a sharded checkpoint with torch.distributed.checkpoint (DCP),
saved by every rank and resumed at another world size."""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Every rank hands DCP its own shards (DTensors); DCP writes one file per rank plus the metadata."""
    model_state, optimizer_state = get_state_dict(model, optimizer)
    dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=path)


def resume(model: nn.Module, mesh: DeviceMesh, lr: float, path: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Shard first, then build the optimizer, then load: each rank reads only the pieces it now holds."""
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    model_state, optimizer_state = get_state_dict(model, optimizer)  # the layout to load into: this mesh's
    state = {"model": model_state, "optimizer": optimizer_state}
    dcp.load(state, checkpoint_id=path)  # in place, resharded from the saved layout to this one
    set_state_dict(model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"])
    return model, optimizer
