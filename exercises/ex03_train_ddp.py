"""Exercise 3: train with DistributedDataParallel.

DDP is data parallelism done right. Each of the W ranks holds a full copy of the model and trains on
its own shard of the data. `DistributedDataParallel(model)`:

* at construction, **broadcasts rank 0's parameters** to every rank, so all copies start equal;
* during `backward()`, **all-reduces the gradients** (averaging them over ranks), in buckets that
  start as soon as their gradients are ready, overlapping communication with the rest of backward.

After the all-reduce every rank holds the same averaged gradient and applies the same optimizer step,
so the copies stay identical without ever sending weights again. The averaged gradient of W batches
of b samples is exactly the gradient of the mean loss over all W*b samples: DDP on W ranks trains
like one process on a W-times larger batch. The grader checks that, number by number.

Your `train_ddp` runs on every rank. The grader has already formed the process group and gives each
rank a model initialised *differently* on purpose (only DDP's broadcast makes them agree), and a
dataset whose items are `(x, y)` pairs: an input row of 8 features and its target, one value. A
DataLoader over it yields batches `(inputs, targets)` of shapes (batch, 8) and (batch, 1). Train:

* data: `DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)`,
  a `DataLoader` with `batch_size` and that sampler, and `sampler.set_epoch(epoch)` every epoch;
* loss: mean squared error, averaged over the batch (`torch.nn.functional.mse_loss`);
* optimizer: `torch.optim.SGD(..., lr=lr, momentum=0.9)`, one step per batch;
* device: CPU under gloo; under nccl, `torch.device("cuda", rank)` (move the model and batches).

After training, rank 0 saves the *plain* model's `state_dict()` to `checkpoint_path` with
`torch.save`, every rank waits at `dist.barrier()`, and `train_ddp` returns the trained plain model
(not the DDP wrapper).

API: `torch.nn.parallel.DistributedDataParallel`, `torch.distributed.get_backend()`,
`torch.distributed.barrier()`, `torch.save`.

Run `grader check ex03` to test, `grader hint ex03` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def train_ddp(
    rank: int,
    world_size: int,
    model: nn.Module,
    dataset: Dataset,
    epochs: int,
    batch_size: int,
    lr: float,
    checkpoint_path: str,
) -> nn.Module:
    """Train `model` with DDP for `epochs` epochs; rank 0 saves a checkpoint; return the plain model."""
    raise NotImplementedError("train_ddp")
