"""Rank-side building blocks shared by the training exercises: a toy model, synthetic data,
a recorder of every optimizer step, and the trusted single-process reference.

The reference replays exactly the batches the ranks drew (same DistributedSampler permutation),
concatenated per step: DDP's averaged gradient on W batches of b samples is the gradient of the
mean loss over those W*b samples, so the two must agree to fp32 precision.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DistributedSampler, TensorDataset

FEATURES, HIDDEN = 8, 16
MOMENTUM = 0.9


class TinyRegressor(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(FEATURES, HIDDEN)
        self.out = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(torch.tanh(self.hidden(x)))


def make_model(seed: int) -> TinyRegressor:
    torch.manual_seed(seed)
    return TinyRegressor()


def make_regression(size: int, seed: int = 7) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.tanh(inputs @ weights) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(inputs, targets)


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor.detach().cpu().clone() for name, tensor in module.state_dict().items()}


class StepRecorder:
    """Records, for every optimizer step anywhere in the process, the gradients before the step
    and the parameters after it, named after `model`'s parameters."""

    def __init__(self, model: nn.Module) -> None:
        self._names = {id(p): name for name, p in model.named_parameters()}
        self.initial = state(model)
        self.start: dict[str, torch.Tensor] = {}  # the weights the first step started from
        self.steps: list[dict[str, Any]] = []
        self._handles = [
            register_optimizer_step_pre_hook(self._before),
            register_optimizer_step_post_hook(self._after),
        ]

    def _named(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        params = [p for group in optimizer.param_groups for p in group["params"]]
        return [(self._names.get(id(p), f"param{i}"), p) for i, p in enumerate(params)]

    def _before(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if not self.steps:
            self.start = {name: p.detach().cpu().clone() for name, p in self._named(optimizer)}
        grads = {name: (p.grad.detach().cpu().clone() if p.grad is not None else torch.zeros_like(p).cpu())
                 for name, p in self._named(optimizer)}
        self.steps.append({"grads": grads})

    def _after(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.steps[-1]["params"] = {name: p.detach().cpu().clone() for name, p in self._named(optimizer)}

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    def facts(self) -> dict[str, Any]:
        return {"initial": self.initial, "start": self.start, "steps": self.steps}


def record_training(facts: dict[str, Any], model: nn.Module, train: Callable[[], Any]) -> None:
    """Run `train()` (the student's loop on `model`) under a StepRecorder; record every step, the
    type it returned and the final weights of the plain model it returned (unwrapping DDP)."""
    recorder = StepRecorder(model)
    try:
        trained = train()
    finally:
        recorder.close()
    facts.update(recorder.facts())
    facts["returned"] = type(trained).__name__
    if isinstance(trained, DistributedDataParallel):
        trained = trained.module
    facts["final"] = state(trained) if isinstance(trained, nn.Module) else {}


def rank_batches(size: int, world_size: int, rank: int, batch_size: int, epoch: int, seed: int = 0) -> list[list[int]]:
    """The index batches a correct loader yields on `rank` in `epoch`."""
    sampler = DistributedSampler(range(size), num_replicas=world_size, rank=rank, shuffle=True, seed=seed)
    sampler.set_epoch(epoch)
    indices = list(sampler)
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def union_batches(size: int, world_size: int, batch_size: int, epochs: int, seed: int = 0) -> list[list[int]]:
    """Per optimizer step, the samples of all ranks together."""
    steps = []
    for epoch in range(epochs):
        per_rank = [rank_batches(size, world_size, r, batch_size, epoch, seed) for r in range(world_size)]
        steps += [sum((batches[i] for batches in per_rank), []) for i in range(len(per_rank[0]))]
    return steps


def train_reference(model: nn.Module, dataset: TensorDataset, steps: list[list[int]], lr: float,
                    grad_scale: float = 1.0, losses: list[float] | None = None) -> StepRecorder:
    """Plain SGD with momentum on one process, one union batch per step; each step's loss is
    appended to `losses` when given."""
    recorder = StepRecorder(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    inputs, targets = dataset.tensors
    for indices in steps:
        optimizer.zero_grad()
        loss = F.mse_loss(model(inputs[indices]), targets[indices]) * grad_scale
        if losses is not None:
            losses.append(loss.item())
        loss.backward()
        optimizer.step()
    recorder.close()
    return recorder


def steps_per_epoch(size: int, world_size: int, batch_size: int) -> int:
    return math.ceil(math.ceil(size / world_size) / batch_size)


def accumulation_batches(size: int, world_size: int, batch_size: int, k: int, seed: int = 0) -> list[list[int]]:
    """Per optimizer step of gradient accumulation, the samples of all ranks' k micro-batches.

    Micro-batches are full batches only (a loader with drop_last=True), and a trailing group of
    fewer than k micro-batches makes no step, so every step averages exactly k*b*W samples.
    """
    per_rank = [[batch for batch in rank_batches(size, world_size, r, batch_size, 0, seed) if len(batch) == batch_size]
                for r in range(world_size)]
    groups = len(per_rank[0]) // k
    return [sum((batches[i] for i in range(g * k, (g + 1) * k) for batches in per_rank), []) for g in range(groups)]


def gradient_on(model: nn.Module, dataset: TensorDataset, indices: list[int], grad_scale: float = 1.0) -> dict[str, torch.Tensor]:
    """The gradient of the mean squared error on `indices` (times grad_scale), leaving `model` untouched."""
    inputs, targets = dataset.tensors
    model.zero_grad()
    (F.mse_loss(model(inputs[indices]), targets[indices]) * grad_scale).backward()
    grads = {name: p.grad.detach().clone() for name, p in model.named_parameters()}
    model.zero_grad()
    return grads


class Block(nn.Module):
    """A transformer-like block without attention: pre-norm MLP with a residual connection."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 2 * width)
        self.down = nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x))))


class TinyTransformer(nn.Module):
    """Linear in, a stack of Blocks, Linear out: small, but with the unit structure FSDP wraps."""

    def __init__(self, width: int = HIDDEN, depth: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(FEATURES, width)
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.out = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.inp(x)
        for block in self.blocks:
            x = block(x)
        return self.out(x)


def make_transformer(seed: int) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer()
