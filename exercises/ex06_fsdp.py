"""Exercise 6: shard a model with FSDP.

DDP keeps a full copy of the parameters, gradients and optimizer state on every rank. FSDP (Fully
Sharded Data Parallel, the ZeRO-3 idea) keeps only 1/W of each on every rank: a parameter lives as
a *shard*, is all-gathered just before the layer that uses it runs forward or backward, and freed
again right after; gradients are reduce-scattered, so each rank receives the averaged gradient of
its own shard only, and its optimizer updates only that shard.

A *unit* is the group of parameters FSDP gathers and frees together: every module you call
`fully_shard` on becomes one (its parameters, minus those of sub-modules that are units of their
own). Wrap each block, then the root:

* memory: at any moment only the unit being computed is whole. With the root as the only unit,
  forward gathers the entire model at once and the peak memory is that of DDP: nothing saved;
* overlap: with several units FSDP gathers block i+1 while block i computes, and reduce-scatters a
  block's gradients while backward moves on to the previous block.

Why the optimizer must be built after wrapping. `fully_shard` *replaces* every parameter of the
model by a new, sharded one (a DTensor holding this rank's shard). An optimizer built before holds
the old tensors, which no longer take part in forward and never get a gradient: `step()` runs,
raises nothing, and changes nothing.

For this exercise's model (TinyTransformer: Linear 8->16, 3 blocks of LayerNorm(16), Linear 16->32,
GELU, Linear 32->16 with a residual, Linear 16->1): 3473 parameters, 13.6 KiB in fp32. Sharded over
W ranks each rank stores about 3473/W of them (W = 4: about 868, 3.4 KiB), plus as much gradient
and momentum, and holds one block (1104 parameters) unsharded at a time while computing. The
grader reports the parameter memory each rank holds in the same units.

Your functions run on every rank; the grader has formed the process group and passes the same
model on every rank and this rank's batches (a list of `(inputs, targets)`, different per rank).

* `shard_model(model, world_size)`: build a mesh over the ranks,
  `init_device_mesh("cpu", (world_size,))` under gloo or `"cuda"` under nccl
  (`dist.get_backend()`), call `fully_shard(block, mesh=mesh)` on each of `model.blocks`, then
  `fully_shard(model, mesh=mesh)`, and return the model (fully_shard changes it in place).
* `train_fsdp(rank, world_size, model, batches, lr)`: shard the model with `shard_model`, then
  build `torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9)`, and for every batch take one
  step on the mean squared error (`F.mse_loss`). FSDP averages the gradients over ranks, so this
  trains like one process on all ranks' batches together. Finally gather a full state dict for a
  checkpoint with `get_model_state_dict(model, options=StateDictOptions(full_state_dict=True,
  cpu_offload=True))` (every rank must call it: it is a collective) and return it. On rank 0 it
  holds plain, whole CPU tensors that load into an unwrapped model; other ranks get an empty dict.
  `model.state_dict()` would give DTensors, and `.to_local()` on them this rank's shard only.

FSDP1 (`FullyShardedDataParallel` with an auto-wrap policy per block, `device_id=torch.device("cpu")`
on CPU) is accepted too: the checks look at what each rank holds and at the numbers, not at the API.
(torch 2.13 empties the parameters of an FSDP1 full state dict with `offload_to_cpu=True` when they
are already on the CPU; on CPU the grader makes that offload a no-op, so your code is the same
either way.)

API: `torch.distributed.fsdp.fully_shard`, `torch.distributed.device_mesh.init_device_mesh`,
`torch.distributed.checkpoint.state_dict.get_model_state_dict`, `StateDictOptions`.

Run `grader check ex06` to test, `grader hint ex06` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard


def shard_model(model: nn.Module, world_size: int) -> nn.Module:
    """Make each of `model.blocks`, then `model` itself, an FSDP unit on a 1-D mesh of the ranks."""
    raise NotImplementedError("shard_model")


def train_fsdp(
    rank: int,
    world_size: int,
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
) -> dict[str, torch.Tensor]:
    """Shard, build the optimizer, one SGD step per batch; return the full state dict (whole on rank 0)."""
    raise NotImplementedError("train_fsdp")
