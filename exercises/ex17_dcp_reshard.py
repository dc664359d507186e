"""Exercise 17: a sharded checkpoint with torch.distributed.checkpoint, resumed at another world size.

Exercise 9 saved a checkpoint the simple way: rank 0 writes one file, every rank reads it. With FSDP
that is the wrong way. No rank holds the whole model: gathering it onto rank 0 costs the whole
model (and its optimizer state, twice its size for AdamW) in rank 0's memory, and one process writes
what W could write in parallel. On a real cluster the job that resumes may also have another number
of GPUs than the job that saved.

`torch.distributed.checkpoint` (DCP) does both right:

* **`dcp.save(state_dict, checkpoint_id=path)`** is a *collective*: every rank calls it with its own
  shards (the DTensors FSDP2 gives), and every rank writes its own file into the folder `path`
  (`__0_0.distcp`, `__1_0.distcp`, ...). The coordinator (rank 0) also writes `.metadata`: for every
  tensor, its global shape and which piece of it lives in which file at which offset. A rank that
  skips the call leaves the others waiting for it.
* **`dcp.load(state_dict, checkpoint_id=path)`** fills the tensors you give it *in place*. You give it
  the state dict of the model as it is sharded *now*: each rank asks for its own pieces, and DCP
  reads them from whichever files hold them. That is how a checkpoint saved at 4 ranks loads at 2
  (resharding at load time). Load into a model that is not yet sharded, and every rank reads the
  whole model.
* **`get_state_dict(model, optimizer)`** and **`set_state_dict(model, optimizer, model_state_dict=...,
  optim_state_dict=...)`** (from `torch.distributed.checkpoint.state_dict`) give and take the
  model's and the optimizer's state dicts keyed by parameter *names* (a plain
  `optimizer.state_dict()` keys them by position, and is empty before the first step). For a fresh
  optimizer `get_state_dict` creates the state tensors for DCP to fill.

`dcp.async_save` does the same with the write in a background thread: it returns a future once the
shards are copied to host memory, and that future must be waited for (`.result()`) before the next save
or the end of the job.

Write two functions:

* `save_checkpoint(model, optimizer, path)`: runs on every rank, with a model sharded by `fully_shard`
  on all W ranks and its AdamW optimizer after some steps. Save both with DCP into the folder `path`.
* `resume(model, mesh, lr, path)`: runs on every rank of a job with **half as many ranks**. `model` is
  a freshly initialised, *unsharded* model (other weights than the saved ones: only a load restores
  them); it has `model.blocks`. Shard it (`fully_shard(block, mesh=mesh)` for each block, then
  `fully_shard(model, mesh=mesh)`), build `torch.optim.AdamW(model.parameters(), lr=lr)` (after
  sharding: fully_shard replaces the parameters), load the checkpoint into both, and return
  `(model, optimizer)`. The grader then trains on.

The grader checks, from two runs in one check (save at W=4, resume at W=2): every rank wrote its own
shard file and DCP's metadata is there (the files and their sizes; the grader also watches dcp.save
and torch.save, and what each rank handed DCP: its shards, or whole tensors); the AdamW state
(exp_avg, exp_avg_sq, step) after the resume equals the state at the save; each rank asked
dcp.load for its own shards; and training after the resume equals uninterrupted training on one
process.

API: `torch.distributed.checkpoint.save`, `.load`, `torch.distributed.checkpoint.state_dict.get_state_dict`,
`.set_state_dict`, `torch.distributed.fsdp.fully_shard`, `torch.optim.AdamW`.

Run `grader check ex17` to test, `grader hint ex17` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import fully_shard


def save_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> None:
    """Save the sharded model and optimizer into the folder `path`: every rank writes its own shards."""
    raise NotImplementedError("save_checkpoint")


def resume(model: nn.Module, mesh: DeviceMesh, lr: float, path: str) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Shard `model` on `mesh`, build AdamW, load the checkpoint into both; return (model, optimizer)."""
    raise NotImplementedError("resume")
