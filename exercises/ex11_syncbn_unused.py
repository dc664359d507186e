"""Exercise 11: SyncBatchNorm and parameters that receive no gradient.

Two things break when a single-GPU model goes data parallel.

**BatchNorm sees only the local batch.** Under DDP each rank normalizes with the mean and
variance of its own batch of b samples, and its running statistics track those. With small
per-GPU batches (detection, segmentation, large inputs) those statistics are noisy, and they are
not what one process training on the W x b samples would compute. `SyncBatchNorm` all-reduces
the per-channel sums across the ranks in every forward pass, so every rank normalizes with, and
keeps running statistics of, the *global* batch. `nn.SyncBatchNorm.convert_sync_batchnorm(model)`
replaces every BatchNorm layer (weights and buffers kept). Convert before wrapping in DDP, the usual
order; converting the wrapped model works the same (the new layers keep the very parameters and
buffers DDP already holds), and the checks judge the statistics and the training, not the order.

**Branches that skip parameters.** DDP all-reduces gradients in buckets, each launched when all of
its gradients are ready. If a forward pass does not use some parameters (an auxiliary head used
every other step, a mixture-of-experts layer, an early exit), their gradients never become
ready, the bucket is never reduced, and the *next* iteration fails: "Expected to have finished
reduction in the prior iteration ... your module has parameters that were not used in producing
loss". `DistributedDataParallel(model, find_unused_parameters=True)` makes DDP walk the autograd
graph after each forward and mark the unused parameters ready (at some cost per step).
(`static_graph=True` is an alternative only when the set of unused parameters never changes.)

Your `prepare_model` receives the grader's model, which has a BatchNorm layer and an auxiliary
head used on even steps only. Convert, wrap, and return the DDP model (add `device_ids=[rank]`
under nccl). The grader trains it and compares with one process on the W ranks' batches together.

On CPU: torch 2.13's SyncBatchNorm only runs on GPU ("SyncBatchNorm expected input tensor to be
on GPU"); on CPU the grader stands in for its forward pass with the same computation over gloo
(a differentiable all-reduce of per-channel sums). Your code is the same either way.

Run `grader check ex11` to test, `grader hint ex11` when stuck.
"""

from __future__ import annotations

import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def prepare_model(model: nn.Module) -> DistributedDataParallel:
    """Return `model` with synchronized BatchNorm, wrapped in DDP that tolerates unused parameters."""
    raise NotImplementedError("prepare_model")
