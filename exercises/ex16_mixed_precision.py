"""Exercise 16: FSDP2 in mixed precision, with activation checkpointing.

Training a large model is bound by memory and bandwidth. Two tools every large run uses:

**Mixed precision.** Compute in bfloat16, keep the weights in float32. bf16 has float32's 8 exponent
bits (the same range, about 3.4e38) and only 7 mantissa bits (about 3 significant digits): a matmul in
bf16 is fast and takes half the bytes, but an update `w -= lr * g` smaller than half the gap between
neighbouring bf16 numbers (w/512 to w/256, depending on w) is rounded away if `w` itself is bf16. So
the optimizer updates **fp32 master weights**, and only the copies used for compute are cast. FSDP2
does it for you with a policy:

    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(module, mesh=mesh, mp_policy=policy)

* each rank stores its shard of every parameter in float32 (what the optimizer holds and updates);
* before a unit computes, FSDP casts the shards to bf16 and all-gathers them (half the bytes of fp32),
  and it casts the unit's floating-point inputs to bf16 too: every Linear computes in bf16;
* the gradients come out of backward in bf16; FSDP casts them to `reduce_dtype` and reduce-scatters
  them. Summing W ranks' gradients in bf16 loses bits at every addition; in fp32 it does not. Left
  unset, `reduce_dtype` is `param_dtype` (bf16).

Do not cast the model yourself (`model.to(torch.bfloat16)` leaves no fp32 master weights) and do not
add `torch.autocast` on top of the policy: the policy already casts; autocast re-casts every op's
inputs and runs some ops in float32 (the loss; on CUDA also layer norm and softmax). fp16 (5 exponent
bits, largest value 65504) underflows small gradients and needs loss scaling (`torch.amp.GradScaler`);
bf16 does not.

**Activation checkpointing.** backward needs tensors that forward computed (each Linear's input, the
layer norm's statistics, ...): autograd *saves* them, and for a deep model they dominate memory. A
checkpointed block keeps only its input; backward runs the block's forward again (one extra forward
per step, about a third more compute) to get the rest, just before differentiating it. Checkpoint
**each block** on its own: one region over the whole model would be recomputed all at once, holding
every block's activations again at the peak; checkpointing nothing keeps them all.

    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
    model.blocks[i] = checkpoint_wrapper(model.blocks[i])   # before fully_shard

(or `torch.utils.checkpoint.checkpoint(block, x, use_reentrant=False)` inside a module's forward, or
`torch.distributed._composable.checkpoint(block)`: all work with FSDP2 on CPU in torch 2.13.) Always
call the model itself, `model(inputs)`: calling `model.inp` or a block yourself from the training loop
skips the root's forward, which gathers the root's own parameters ("mixed torch.Tensor and DTensor").

The model (TinyTransformer): `model.inp` (Linear 8->16), `model.blocks` (3 blocks: LayerNorm(16),
Linear 16->32, GELU, Linear 32->16, with a residual) and `model.out` (Linear 16->1).

* `wrap_model(model, world_size)`: build the mesh (`init_device_mesh("cpu", (world_size,))`, "cuda"
  under nccl: `dist.get_backend()`), checkpoint each of `model.blocks`, `fully_shard` each block with
  the policy, then `fully_shard(model, ...)` with it. Return the model.
* `train(rank, world_size, model, batches, lr)`: `wrap_model`, then `torch.optim.SGD(model.parameters(),
  lr=lr, momentum=0.9)` (after wrapping: it must hold the sharded fp32 parameters), and one step per
  `(inputs, targets)` in `batches` (this rank's) on `F.mse_loss(model(inputs).float(), targets)`.
  Under nccl, use `torch.device("cuda", rank)`. Return the model.

This exercise is about FSDP2 (`fully_shard`): the grader watches FSDP2's own collectives, so FSDP1
(`FullyShardedDataParallel` with its `MixedPrecision`) does not pass here. The grader watches with its
own instrumentation: what each rank stores of every parameter (dtype, about 1/W of it), the dtypes
every Linear computes in (forward hooks), the dtypes FSDP all-gathers and reduce-scatters, the tensors
kept for backward per block (`torch.autograd.graph.saved_tensors_hooks`) and the layers recomputed in
backward; and it compares the gradients, losses and weights with one process doing the same casts.

API: `torch.distributed.fsdp.fully_shard`, `torch.distributed.fsdp.MixedPrecisionPolicy`,
`torch.distributed.device_mesh.init_device_mesh`, `checkpoint_wrapper`, `torch.utils.checkpoint`.

Run `grader check ex16` to test, `grader hint ex16` when stuck.
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard


def wrap_model(model: nn.Module, world_size: int) -> nn.Module:
    """Checkpoint and shard each block, then the root, with bf16 compute and fp32 reduce."""
    raise NotImplementedError("wrap_model")


def train(
    rank: int,
    world_size: int,
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    lr: float,
) -> nn.Module:
    """Wrap, build the optimizer over the sharded fp32 parameters, one SGD step per batch."""
    raise NotImplementedError("train")
