"""Exercise 14: tensor parallelism, an MLP block split column-then-row across the ranks.

Data parallelism (exercises 3, 5, 12) copies the whole model to every rank. When one layer's weights
no longer fit (or take too long) on one GPU, **tensor parallelism** splits each weight matrix across
the W ranks of a node, so that each rank holds and multiplies 1/W of it. Megatron-LM's recipe for a
transformer's MLP block, `Linear(d, h) -> GELU -> Linear(h, d)` (weights in nn.Linear's layout,
`w1` of shape (h, d), `w2` of shape (d, h)):

1. **Column-parallel first layer.** Rank r keeps rows `r*h/W .. (r+1)*h/W` of `w1` (its output
   features) and the same slice of `b1`. From the *whole* input x it computes its own h/W hidden
   features: `F.gelu(F.linear(x, w1_r, b1_r))`, of shape (b, h/W). GELU works feature by feature, so
   each rank applies it to its own columns: **no communication between the two layers**.
2. **Row-parallel second layer.** Rank r keeps columns `r*h/W .. (r+1)*h/W` of `w2` (its input
   features): exactly the hidden features it holds. `F.linear(hidden_r, w2_r)` is a (b, d) *partial*
   output; the true output is the sum of the W partials, plus `b2` **once**.

Two small autograd functions (`torch.autograd.Function` subclasses) make forward and backward right:

* **g**, after the second layer: all-reduce (sum) in forward; the identity in backward (every rank
  already holds the whole output gradient, and each partial's gradient is that gradient).
* **f**, before the first layer: the identity in forward (every rank has the whole x); all-reduce in
  backward: each rank's x gradient is only the part that flowed through its h/W features, and the
  true gradient is their sum.

They are conjugate: one all-reduce of a (b, d) tensor in forward and one in backward per block, and
nothing else. Add `b2` after g: added before the reduction on every rank it would count W times.
`dist.all_reduce` works in place: all-reduce a copy (`t.clone()`), never a tensor autograd holds.

Write:

* `shard_mlp(rank, world_size, w1, b1, w2, b2)`: this rank's shards, a dict
  `{"w1": (h/W, d) rows, "b1": (h/W,) slice, "w2": (d, h/W) columns, "b2": all of b2}` (contiguous
  blocks in rank order: `torch.chunk`, `tensor_split`, `narrow` or slicing; W divides h here).
* `tp_mlp_forward(x, shards)`: the block's output y, shape (b, d), on this rank, with f and g. The
  grader gives the shards back to you as leaf tensors, calls `y.backward(dy)` with the same dy on
  every rank, and reads x's gradient and each shard's gradient.
* `parallelize_mlp(model, mesh)`: the same split with PyTorch's own API on `model` (submodules
  `fc1`, `act`, `fc2`) and a 1-D `DeviceMesh` of the W ranks (`init_device_mesh("cpu", (W,))`, made
  by the grader): `parallelize_module(model, mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})`.
  The weights become DTensors, `Shard(0)` for fc1, `Shard(1)` for fc2's weight, and DTensor inserts f
  and g itself. Return the module; its forward takes and returns plain tensors.

The grader compares, on every rank, your output, x's gradient and every shard's gradient with the
unsplit block's, checks which slice each rank holds, and counts the collectives of forward and of
backward itself (one all-reduce each). Under nccl the tensors are on `torch.device("cuda", rank)`.

API: `torch.autograd.Function`, `torch.distributed.all_reduce`, `torch.chunk`,
`torch.distributed.tensor.parallel.parallelize_module`, `ColwiseParallel`, `RowwiseParallel`,
`torch.distributed.device_mesh.DeviceMesh`.

Run `grader check ex14` to test, `grader hint ex14` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def shard_mlp(
    rank: int, world_size: int, w1: torch.Tensor, b1: torch.Tensor, w2: torch.Tensor, b2: torch.Tensor
) -> dict[str, torch.Tensor]:
    """This rank's rows of w1 and b1 (column-parallel), its columns of w2 (row-parallel), and all of b2."""
    raise NotImplementedError("shard_mlp")


def tp_mlp_forward(x: torch.Tensor, shards: dict[str, torch.Tensor]) -> torch.Tensor:
    """The block on this rank's shards: f, first layer, GELU, second layer, g, then b2 once."""
    raise NotImplementedError("tp_mlp_forward")


def parallelize_mlp(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """fc1 column-wise and fc2 row-wise on the mesh, with parallelize_module."""
    raise NotImplementedError("parallelize_mlp")
