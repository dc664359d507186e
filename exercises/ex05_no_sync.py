"""Exercise 5: gradient accumulation with DDP's `no_sync`.

When the batch you want does not fit in memory, split it: run k *micro-batches* forward and backward,
let their gradients add up in `.grad`, and step once. With DDP on W ranks, one optimizer step then
sees k micro-batches of b samples on each of W ranks: an effective batch of k*b*W samples.

Why `no_sync` exists. DDP all-reduces the gradients during *every* backward. While accumulating,
the first k-1 all-reduces are wasted: only the sum after the last micro-batch matters, and
averaging is linear, so averaging once at the end gives the very same gradient. Inside
`with ddp_model.no_sync():` DDP skips the all-reduce and just lets `.grad` accumulate locally; the
backward of the last micro-batch, outside the context, all-reduces the accumulated sum once.

The traffic it saves, for this exercise's model (TinyRegressor: 8*16 + 16 + 16*1 + 1 = 161
parameters, fp32): one all-reduce carries 161 * 4 = 644 bytes (a ring all-reduce sends about
2(W-1)/W times that per rank). Per optimizer step that is 644 bytes with `no_sync`, and k * 644
bytes without it (2576 bytes for k = 4). The ratio is what matters: for a 1-billion-parameter model
in fp32 one all-reduce is 4 GB, so accumulating over k = 4 without `no_sync` moves 16 GB per step
instead of 4 GB, and the gradients come out exactly the same. The grader counts your all-reduces.

Why divide the loss by k. The large-batch loss is the mean over all k*b*W samples. Each micro-batch
loss is a mean over b samples, and DDP averages over W ranks; summing k micro-batch gradients gives
k times the large-batch gradient unless each micro-batch loss is divided by k.

Your `train_accumulate` runs on every rank; the grader has formed the process group and passes a
plain model (the same on every rank), a dataset and the sizes. Train for one epoch:

* data: `DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0)` and a
  `DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=True)`, so that every
  micro-batch has exactly `batch_size` samples;
* groups of `accumulation_steps` (k) consecutive micro-batches make one optimizer step: the first
  k-1 backward passes under `ddp_model.no_sync()`, the k-th outside it, each loss
  (`F.mse_loss`, mean) divided by k, then `optimizer.step()` and `optimizer.zero_grad()`;
* a dataset size that is not a multiple of k*b*W: the sampler pads the dataset to a multiple of
  W, the loader drops the last incomplete micro-batch, and a trailing group of fewer than k
  micro-batches is dropped without a step (a step on it would weigh its samples differently).
  So there are exactly (number of full micro-batches per rank) // k optimizer steps;
* optimizer: `torch.optim.SGD(ddp_model.parameters(), lr=lr, momentum=0.9)`;
* device: CPU under gloo; under nccl, `torch.device("cuda", rank)` (move the model and batches).

Return the trained plain model (not the DDP wrapper).

API: `torch.nn.parallel.DistributedDataParallel`, `DistributedDataParallel.no_sync()`,
`contextlib.nullcontext()`.

Run `grader check ex05` to test, `grader hint ex05` when stuck.
"""

from __future__ import annotations

import contextlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


def train_accumulate(
    rank: int,
    world_size: int,
    model: nn.Module,
    dataset: Dataset,
    batch_size: int,
    accumulation_steps: int,
    lr: float,
) -> nn.Module:
    """One epoch of DDP training, one optimizer step per `accumulation_steps` micro-batches; return the plain model."""
    raise NotImplementedError("train_accumulate")
