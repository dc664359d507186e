"""Exercise 9: checkpoint and resume a DDP run.

Long runs stop: preemption, a crash, a time limit. A checkpoint lets the run continue as if it had
never stopped, and "as if" is exact: continued training must give the same numbers as
uninterrupted training. That takes three things.

* **What to save.** The weights of the *plain* model, `ddp_model.module.state_dict()`: the DDP
  wrapper's own state dict prefixes every key with `module.`, which a plain model refuses. And the
  optimizer's `state_dict()`: SGD with momentum keeps a momentum buffer per parameter (Adam keeps
  two moments); without it the first steps after resuming differ. Save a dict
  `{"model": ..., "optimizer": ..., "step": step}` with `torch.save`.
* **Who saves.** All ranks hold identical weights, so only rank 0 writes (`dist.get_rank() == 0`).
  W processes writing one file at once can leave it corrupt.
* **When to load.** The other ranks must not read the file before rank 0 has finished writing
  it: after the save, every rank waits at `dist.barrier()`. Without it, a fast rank reads a
  missing, half-written or stale file.

Then every rank loads the file (`torch.load(path, map_location="cpu")`) into its plain model and
its optimizer with `load_state_dict`, and returns the saved step. The grader wraps the restored
model in DDP again and continues training.

The grader forms the group, trains with DDP, calls your `save_checkpoint`, builds a *fresh* model
and optimizer on every rank, calls your `load_checkpoint`, and compares the continued run with an
uninterrupted one, step by step. To expose races, the grader holds rank 0's `torch.save` until every
other rank either waits for it (in a barrier) or goes on without waiting. Any way of writing the
file is fine (a path, an open handle, a temporary file then `os.replace`): the grader judges the
file that lands at `path` and which rank put it there.

Run `grader check ex09` to test, `grader hint ex09` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def save_checkpoint(ddp_model: DistributedDataParallel, optimizer: torch.optim.Optimizer, step: int,
                    path: str) -> None:
    """Save the model's and optimizer's state at `step` to `path`, once; return when it is on disk."""
    raise NotImplementedError("save_checkpoint")


def load_checkpoint(model: nn.Module, optimizer: torch.optim.Optimizer, path: str) -> int:
    """Restore the plain `model` and the `optimizer` from `path` on this rank; return the saved step."""
    raise NotImplementedError("load_checkpoint")
