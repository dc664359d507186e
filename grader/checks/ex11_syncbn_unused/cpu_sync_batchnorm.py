"""A CPU stand-in for SyncBatchNorm's forward pass, for graders without a GPU.

torch 2.13's `SyncBatchNorm.forward` refuses CPU tensors in training ("SyncBatchNorm expected
input tensor to be on GPU"), its kernels (`batch_norm_stats`...) exist only for GPUs, and DDP
refuses to wrap a CPU module holding one ("SyncBatchNorm layers only work with GPU modules"). The
stand-in computes what SyncBatchNorm computes: per-channel sum, sum of squares and count,
all-reduced over the group with a differentiable all-reduce (so the backward pass also sums the
gradients of the statistics across ranks), then normalizes with the global mean and biased
variance and updates the running statistics with the unbiased one. Anything else (GPU tensors,
eval mode, no process group) goes to the original forward, and DDP's refusal is lifted for CPU
modules only.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.nn.functional as distributed_autograd
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from grader.engine import tamper


def _needs_stand_in(module: nn.SyncBatchNorm, input: torch.Tensor) -> bool:
    """A CPU training forward in a process group: what torch 2.13 refuses on CPU. (A group of one
    rank is included: on a GPU, SyncBatchNorm falls back to plain batch norm there, which the
    stand-in's all-reduce over one rank also gives.)"""
    return input.device.type == "cpu" and module.training and dist.is_initialized()


def _update_running(module: nn.SyncBatchNorm, mean: torch.Tensor, var: torch.Tensor, count: torch.Tensor) -> None:
    if not module.track_running_stats:
        return
    tracked, running_mean, running_var = module.num_batches_tracked, module.running_mean, module.running_var
    # typed Optional; a module that tracks running statistics has all three buffers
    assert tracked is not None and running_mean is not None and running_var is not None
    tracked.add_(1)
    factor = module.momentum if module.momentum is not None else 1.0 / float(tracked)
    unbiased = var * count / (count - 1)
    with torch.no_grad():
        running_mean.mul_(1 - factor).add_(factor * mean)
        running_var.mul_(1 - factor).add_(factor * unbiased)


def install() -> None:
    """Route CPU training forwards of every SyncBatchNorm in this process through the stand-in, and
    let DDP wrap CPU modules that hold SyncBatchNorm layers."""
    original = nn.SyncBatchNorm.forward

    def forward(self: nn.SyncBatchNorm, input: torch.Tensor) -> Any:
        if not _needs_stand_in(self, input):
            return original(self, input)
        channels = input.size(1)
        dims = [0, *range(2, input.dim())]
        count = torch.full((1,), input.numel() / channels, dtype=input.dtype)
        local = torch.cat([input.sum(dims), (input * input).sum(dims), count])
        total = distributed_autograd.all_reduce(local, group=self.process_group or dist.group.WORLD)
        n = total[-1]
        mean = total[:channels] / n
        var = total[channels : 2 * channels] / n - mean * mean
        _update_running(self, mean.detach(), var.detach(), n.detach())
        shape = [1, channels] + [1] * (input.dim() - 2)
        normalized = (input - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            normalized = normalized * self.weight.view(shape) + self.bias.view(shape)
        return normalized

    tamper.install(nn.SyncBatchNorm, "forward", forward)
    refuse_cpu = DistributedDataParallel._passing_sync_batchnorm_handle

    def accept_cpu(self: DistributedDataParallel, module: nn.Module) -> None:
        if self.device_type != "cpu":
            refuse_cpu(self, module)

    tamper.install(DistributedDataParallel, "_passing_sync_batchnorm_handle", accept_cpu)
