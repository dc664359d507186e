"""Rank side of exercise 11: train the student's prepared model (BatchNorm, and an auxiliary head
used on even steps only) with the grader's loop; record layer types, per-step weights and the
BatchNorm running statistics. The trusted reference trains one process on the union batches."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import TensorDataset

from grader.checks.ex11_syncbn_unused import cpu_sync_batchnorm
from grader.engine.rank_runtime import RankContext
from grader.rank.training import FEATURES, HIDDEN, MOMENTUM, make_regression, rank_batches, state, union_batches


class BranchyNet(nn.Module):
    """BatchNorm in the trunk; `aux` only contributes when asked to (so it is sometimes unused)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Linear(FEATURES, HIDDEN)
        self.norm = nn.BatchNorm1d(HIDDEN)
        self.head = nn.Linear(HIDDEN, 1)
        self.aux = nn.Linear(HIDDEN, 1)

    def forward(self, x: torch.Tensor, use_aux: bool) -> torch.Tensor:
        hidden = torch.tanh(self.norm(self.stem(x)))
        out = self.head(hidden)
        return out + self.aux(hidden) if use_aux else out


# Normalization layers of every kind, so that a BatchNorm replaced by another norm shows as such.
NORM_LAYERS = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)


def _model(seed: int) -> BranchyNet:
    torch.manual_seed(seed)
    return BranchyNet()


def _train(model: nn.Module, batches: list[list[int]], dataset: TensorDataset, lr: float, record: Any) -> None:
    inputs, targets = dataset.tensors
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    for step, indices in enumerate(batches):
        optimizer.zero_grad()
        F.mse_loss(model(inputs[indices], use_aux=step % 2 == 0), targets[indices]).backward()
        optimizer.step()
        record(step)


def train(
    ctx: RankContext, size: int, batch_size: int, steps: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    ctx.init_group()
    cpu_sync_batchnorm.install()
    prepare_model = ctx.student("prepare_model")
    model = _model(seed=model_seed + ctx.rank)  # only DDP's broadcast makes the ranks agree
    prepared = prepare_model(model)
    ctx.facts["returned"] = type(prepared).__name__
    ctx.facts["norm_layers"] = {
        name: type(m).__name__ for name, m in prepared.named_modules() if isinstance(m, NORM_LAYERS)
    }
    if not isinstance(prepared, DistributedDataParallel):
        return {}
    ctx.facts["find_unused_parameters"] = bool(prepared.find_unused_parameters)
    ctx.facts["static_graph"] = bool(prepared.static_graph)
    ctx.facts["steps"] = []
    plain = prepared.module
    batches = rank_batches(size, ctx.world_size, ctx.rank, batch_size, epoch=0)[:steps]
    dataset = make_regression(size, data_seed)
    _train(prepared, batches, dataset, lr, lambda step: ctx.facts["steps"].append(state(plain)))
    return {}


def reference(
    ctx: RankContext,
    world_size: int,
    size: int,
    batch_size: int,
    steps: int,
    lr: float,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    """Trusted: one process, plain BatchNorm, rank 0's initial weights, the union batch per step; and
    the running statistics each rank's own first batch alone would give (what unsynchronized
    BatchNorm keeps), for the diagnosis."""
    model = _model(seed=model_seed)
    dataset = make_regression(size, data_seed)
    after: list[dict[str, torch.Tensor]] = []
    _train(
        model,
        union_batches(size, world_size, batch_size, epochs=1)[:steps],
        dataset,
        lr,
        lambda step: after.append(state(model)),
    )
    inputs = dataset.tensors[0]
    local = []
    for rank in range(world_size):
        alone = _model(seed=model_seed)
        alone(inputs[rank_batches(size, world_size, rank, batch_size, epoch=0)[0]], use_aux=True)
        local.append({name: value for name, value in state(alone).items() if name.startswith("norm.running")})
    return {"steps": after, "local": local}
