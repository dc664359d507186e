"""Exercise 18: 2D parallelism, FSDP over one mesh dimension and tensor parallelism over the other.

Large runs combine both (torchtitan, Megatron): tensor parallelism (TP, exercise 14) splits each block's
weights across a few ranks that talk on every layer, twice per block per step (all-reduces of the
activations); FSDP (exercises 6 and 16) shards what is left across the data-parallel ranks and talks once
per block (all-gather before, reduce-scatter after). Arrange the W = dp x tp ranks in a 2D DeviceMesh:

    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("dp", "tp"))   # W = 4; "cuda" under nccl

    #            tp=0  tp=1
    #   dp=0  [ rank 0, rank 1 ]   <- a tp group: one copy of the model, split in two
    #   dp=1  [ rank 2, rank 3 ]
    #           ^ a dp group (ranks 0 and 2): FSDP shards and averages over it

`mesh["tp"]` is this rank's row (its tp group), `mesh["dp"]` its column (its dp group). TP goes on the fast,
inner dimension (ranks of one node, NVLink); FSDP on the outer one, which can cross nodes.

The model (TinyTransformer): `model.inp` (Linear 8->16), `model.blocks` (3 blocks: `norm` LayerNorm(16), `up`
Linear 16->32, GELU, `down` Linear 32->16, with a residual) and `model.out` (Linear 16->1).

Apply TP first, then FSDP (torchtitan's order): FSDP then shards the DTensors TP made.

    for block in model.blocks:
        parallelize_module(block, mesh["tp"], {"up": ColwiseParallel(), "down": RowwiseParallel()})
        fully_shard(block, mesh=mesh["dp"])
    fully_shard(model, mesh=mesh["dp"])

Afterwards `blocks.0.up.weight` (32 x 16) is a DTensor on the 2D mesh with placements (Shard(0) on dp,
Shard(0) on tp) and each rank holds 8 x 16 of it, a quarter; `down.weight` (Shard(0), Shard(1));
`down.bias` (Shard(0), Replicate()); the norms, `inp` and `out` are Shard(0) on dp only.

Data: the two ranks of a tp group compute one copy of the model, so they must feed the SAME samples (TP's
input is replicated over tp); the dp groups feed different ones. Every rank is given the same global
batches; take your dp group's share: `inputs.chunk(dp_size)[dp_rank]` with `dp_rank =
mesh["dp"].get_local_rank()` (or `mesh.get_local_rank("dp")`), `dp_size = mesh["dp"].size()`. Not by the
global rank. FSDP averages the gradients over dp, so the mean loss of each share gives the gradient of the
mean over the whole batch: one step equals one process training on the union of the dp groups' batches.

* `build_mesh(world_size)`: the (world_size // 2, 2) mesh named ("dp", "tp"). Return it.
* `parallelize(model, mesh)`: TP on each block over mesh["tp"], FSDP per block and at the root over
  mesh["dp"]. Return the model.
* `train(rank, world_size, model, batches, lr)`: `build_mesh`, `parallelize`, then
  `torch.optim.SGD(model.parameters(), lr=lr)` (after parallelizing), and one step per global `(inputs,
  targets)` in `batches` on `F.mse_loss(model(my_inputs), my_targets)` over this dp group's share. Under nccl
  use `torch.device("cuda", rank)`. Return the model.

The grader runs W = 4 only. It reads every parameter's placements, mesh and local shape, the FSDP units, the
samples each rank fed (a forward hook on the model), and compares the trained weights and every step's loss
with one trusted process (and with replays of mistakes such as a summed loss or a scaled learning rate).

API: `torch.distributed.device_mesh.init_device_mesh`, `torch.distributed.tensor.parallel.parallelize_module`,
`ColwiseParallel`, `RowwiseParallel`, `torch.distributed.fsdp.fully_shard`.

Run `grader check ex18` to test, `grader hint ex18` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module


def build_mesh(world_size: int) -> DeviceMesh:
    """The 2D mesh: dp groups down the columns, tp groups along the rows."""
    raise NotImplementedError("build_mesh")


def parallelize(model: nn.Module, mesh: DeviceMesh) -> nn.Module:
    """TP inside each block on mesh["tp"], then FSDP per block and at the root on mesh["dp"]."""
    raise NotImplementedError("parallelize")


def train(
    rank: int,
    world_size: int,
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
) -> nn.Module:
    """Build, parallelize, then one SGD step per global batch on this dp group's share."""
    raise NotImplementedError("train")
