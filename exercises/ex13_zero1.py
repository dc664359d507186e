"""Exercise 13: a ZeRO-1 sharded optimizer.

DDP keeps a full copy of everything on every rank: the weights, the gradients and the optimizer's
state. For Adam that state is the largest part. In mixed precision each parameter costs 16 bytes:
2 for its fp16 weight, 2 for its fp16 gradient and 12 for the optimizer (an fp32 master copy and
Adam's two fp32 moments, `exp_avg` and `exp_avg_sq`). ZeRO stage 1 (Rajbhandari et al., 2020)
shards only those 12 bytes: each of the W ranks keeps the optimizer state of 1/W of the parameters,
steps only those, and sends their new values to the others. Per rank: 2 + 2 + 12/W bytes a
parameter, 4 + 12/64 = 4.19 instead of 16 at W = 64. In this exercise's fp32 model, AdamW keeps
2 fp32 tensors per parameter (8 bytes), and each rank should hold about 1/W of them.

Write two functions.

`partition_parameters(sizes, world_size)` decides who owns what. `sizes[i]` is the number of
elements of parameter i; return `shards`, a list of W lists where `shards[r]` holds the indices of
the parameters rank r owns. Every index appears exactly once, and the shares must be balanced by
size, not by count: a 768-element weight weighs as much as 768 biases. Greedy placement works:
take the parameters from the largest to the smallest and give each to the rank with the least
load so far. The grader accepts any partition whose largest load is at most `sum(sizes) / W +
max(sizes)` (what greedy placement guarantees) and that is the same on every rank: the function
must depend on its arguments only (no rank, no unseeded randomness).

`train_zero1(rank, world_size, model, dataset, steps, batch_size, lr)` trains on every rank:

* the grader gives each rank a model initialised *differently* on purpose: first, broadcast rank 0's
  parameters to every rank (`dist.broadcast(p.data, src=0)` for each parameter);
* `dataset` is this rank's own shard, of `(x, y)` pairs: step s trains on its items
  s*batch_size .. (s+1)*batch_size - 1, in order (`DataLoader(dataset, batch_size=batch_size)`, no
  shuffle), for `steps` steps; the loss is the mean squared error (`F.mse_loss`);
* after `backward()`, average every gradient over the ranks (`dist.all_reduce(p.grad)` then divide
  by world_size, or `op=dist.ReduceOp.AVG`), so each rank holds the gradient of the union batch (a
  reduce-scatter that brings each rank the averaged gradients of its own share only is right too);
* own only your share: `owned = [params[i] for i in shards[rank]]` with `params =
  list(model.parameters())`, and `torch.optim.AdamW(owned, lr=lr)` with its default betas, eps and
  weight_decay (0.01). Build it once, before the loop, and only over the owned parameters: that is
  the whole memory saving. A rank that owns nothing builds no optimizer;
* step it, then send the updated parameters to every rank: `dist.broadcast(p.data,
  src=owner_of_p)` for each parameter (or an all-gather of the flattened shards);
* clear every gradient before the next step (`model.zero_grad()`: the optimizer only knows the
  parameters it owns, so `optimizer.zero_grad()` leaves the others' gradients to pile up);
* return the model.

The grader compares every step, on every rank, with one process running AdamW on the full model
and the union of the ranks' batches; measures each rank's optimizer state from its tensors; draws
size lists for `partition_parameters`; checks that the non-owners receive the updated values; and
counts the bytes of every collective per step. Gradients' all-reduce (M elements) plus the
parameters' broadcast (M) move 2M elements per step. Real ZeRO replaces the all-reduce by a
reduce-scatter (each rank needs only its shard's gradients) and broadcasts by an all-gather: the
same ring volume as DDP's all-reduce, 2(W-1)/W x M, for 1/W of the optimizer memory.

API: `torch.distributed.broadcast`, `torch.distributed.all_reduce`, `torch.distributed.all_gather`,
`torch.optim.AdamW`; the ready-made version is `torch.distributed.optim.ZeroRedundancyOptimizer`.

Run `grader check ex13` to test, `grader hint ex13` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, Dataset


def partition_parameters(sizes: list[int], world_size: int) -> list[list[int]]:
    """Per rank, the indices of the parameters it owns; balanced by size, the same on every rank."""
    raise NotImplementedError("partition_parameters")


def train_zero1(
    rank: int,
    world_size: int,
    model: nn.Module,
    dataset: Dataset,
    steps: int,
    batch_size: int,
    lr: float,
) -> nn.Module:
    """Train with AdamW whose state is sharded across the ranks (ZeRO-1); return the model."""
    raise NotImplementedError("train_zero1")
