"""Rank side of exercise 18: the student's 2D-parallel training (FSDP2 on "dp", tensor parallelism on "tp")
under the grader's own instrumentation; the trusted single-process reference and its replays.

Every rank is given the same global batches; the student's train takes its dp group's share of each. The
grader watches:
* the model's forward pre-hook: which samples of the step's global batch this rank fed (matched row by
  row with the grader's own batch), and the loss of its output on those samples;
* optimizer.step() (a global step pre-hook): how many steps;
* after training: every parameter as this rank holds it (DTensor or not, the mesh it lives on with the
  ranks of that mesh and its dimension names, the placement on each dimension, its local shape; the whole
  shapes come from the trusted reference),
  the FSDP units, and the whole trained weights gathered by the grader's own call.
Shapes and values are read only from tensors of the types the contract allows (grader/engine/exact.py).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.engine import exact
from grader.engine.facts import ReplayRequest
from grader.engine.rank_runtime import RankContext
from grader.rank.fsdp_units import OriginalNames, fsdp_units
from grader.rank.training import make_regression, make_transformer

# What a replay may change in the trusted loop (hypotheses.toml), and the correct loop's value of each
REPLAY_KNOBS: dict[str, Any] = {
    "reduction": "mean",  # the loss's reduction: "mean" or "sum"
    "lr_scale": 1.0,  # the learning rate times this
    "accumulate": False,  # gradients never cleared: each step's adds to the ones before
    "loss_scale": 1.0,  # the loss times this before backward (a loss divided by the dp size: 1/dp)
}


def global_batches(steps: int, batch_size: int, data_seed: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The steps' global batches, the same on every rank: dp group g's share is the g-th chunk of each."""
    inputs, targets = make_regression(steps * batch_size, data_seed).tensors
    return [
        (inputs[s : s + batch_size].clone(), targets[s : s + batch_size].clone())
        for s in range(0, len(inputs), batch_size)
    ]


def _placement(placement: Any) -> str:
    """Shard(dim=0), Replicate(), Partial(): one spelling. FSDP's shard of a row-split TP shard is a
    _StridedShard (its rows interleaved over tp): a Shard of that dim for the judge."""
    if isinstance(placement, Shard) or type(placement).__name__ == "_StridedShard":
        return f"Shard(dim={placement.dim})"
    if isinstance(placement, Replicate):
        return "Replicate()"
    return type(placement).__name__ + "()"


def _parameters(model: nn.Module, names: OriginalNames) -> list[dict[str, Any]]:
    """What this rank holds of every parameter."""
    original = names.parameters(model)
    held = []
    for name, p in model.named_parameters():
        facts: dict[str, Any] = {"name": original[name], "dtensor": isinstance(p, DTensor)}
        local = exact.local(p, "model") if exact.tensor(p, "model", True) else None
        if local is None:
            facts["local"] = []
        elif isinstance(p, DTensor):
            facts.update(
                local=exact.shape(local),
                mesh=p.device_mesh.mesh.tolist(),
                dims=list(p.device_mesh.mesh_dim_names or ()),
                placements=[_placement(q) for q in p.placements],
            )
        else:
            facts["local"] = exact.shape(p)
        held.append(facts)
    return held


class Watch:
    """The samples and loss of every forward (outside backward), and the optimizer steps."""

    def __init__(self, model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.batches = batches
        self.rows: list[list[int]] = []
        self.losses: list[float | None] = []
        self.steps = 0
        self._targets: torch.Tensor | None = None
        model.register_forward_pre_hook(self._inputs)
        model.register_forward_hook(self._output)
        self._handle = register_optimizer_step_pre_hook(self._step)

    def _inputs(self, _module: nn.Module, args: tuple[Any, ...]) -> None:
        if torch._C._current_graph_task_id() != -1 or len(self.rows) >= len(self.batches):
            return
        inputs, targets = self.batches[len(self.rows)]
        given = args[0] if args and exact.tensor(args[0], "model input", True) else None
        if given is None or exact.dim(given) != 2 or exact.shape(given)[1] != inputs.shape[1]:
            self.rows.append([])
            self._targets = None
            return
        same = (given.detach().cpu().float()[:, None, :] == inputs[None]).all(-1)
        found = [int(row.nonzero()[0]) if row.any() else -1 for row in same]
        self.rows.append(found)
        self._targets = targets[found] if -1 not in found else None

    def _output(self, _module: nn.Module, _args: Any, output: Any) -> None:
        if torch._C._current_graph_task_id() != -1 or len(self.losses) >= len(self.rows):
            return
        targets = self._targets
        if exact.tensor(output, "model", True) and targets is not None and exact.shape(output) == list(targets.shape):
            value = output.full_tensor() if isinstance(output, DTensor) else output
            self.losses.append(F.mse_loss(value.detach().cpu().float(), targets).item())
        else:
            self.losses.append(None)

    def _step(self, *_: Any) -> None:
        self.steps += 1

    def close(self) -> None:
        self._handle.remove()


def train(ctx: RankContext, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int) -> dict[str, Any]:
    ctx.init_group()
    ctx.watch_functional_collectives()  # a full state dict the student gathers on some ranks only is named
    model = make_transformer(seed=model_seed)
    batches = global_batches(steps, batch_size, data_seed)
    names = OriginalNames(model)
    watch = Watch(model, batches)
    ctx.facts.update(rows=watch.rows, losses=watch.losses)  # live: kept if train raises
    try:
        returned = ctx.student("train")(ctx.rank, ctx.world_size, model, batches, lr)
    finally:
        watch.close()
        ctx.facts.update(steps=watch.steps, parameters=_parameters(model, names), units=fsdp_units(model, names))
    ctx.facts["returned"] = type(returned).__name__
    if not ctx.returned_from("train"):  # a peer still makes, or failed in, train's collectives: the run's failure
        return {}
    try:  # every rank takes part in each full_tensor, in the same order
        original = names.parameters(model)
        final = {}
        for name, p in model.named_parameters():
            if not exact.tensor(p, "model", True):
                continue
            whole = p.full_tensor() if isinstance(p, DTensor) else p
            final[original[name]] = whole.detach().float().cpu().clone()
        ctx.facts["final"] = final if ctx.rank == 0 else {}
    except Exception as exc:  # a fact: the grader's own gather failed on this wrapping
        ctx.facts["gather_error"] = f"{type(exc).__name__}: {exc}"
    return {}


def _replay(
    dp: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int, mistake: dict[str, Any]
) -> dict[str, Any]:
    """Trusted: one process, each step the average over the dp groups of the gradient of each group's loss on its
    chunk of the global batch (what FSDP's reduce-scatter averages), then plain SGD; `mistake` (knobs of
    REPLAY_KNOBS) changes the loss's reduction, scales the loss or the learning rate or never clears the gradients.
    The losses are each group's mean loss."""
    knobs = {**REPLAY_KNOBS, **mistake}
    unknown = set(knobs) - set(REPLAY_KNOBS)
    if unknown:
        raise ValueError(f"unknown replay knobs: {sorted(unknown)}")
    model = make_transformer(seed=model_seed)
    losses = []
    grads = {name: torch.zeros_like(p) for name, p in model.named_parameters()}
    for inputs, targets in global_batches(steps, batch_size, data_seed):
        if not knobs["accumulate"]:
            grads = {name: torch.zeros_like(g) for name, g in grads.items()}
        step_losses = []
        for x, y in zip(inputs.chunk(dp), targets.chunk(dp)):
            model.zero_grad()
            output = model(x)
            (knobs["loss_scale"] * F.mse_loss(output, y, reduction=knobs["reduction"])).backward()
            step_losses.append(F.mse_loss(output.detach(), y).item())
            for name, p in model.named_parameters():
                assert p.grad is not None  # every parameter takes part in the loss
                grads[name] += p.grad / dp
        losses.append(step_losses)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.sub_(lr * knobs["lr_scale"] * grads[name])
    return {"losses": losses, "final": {name: p.detach().clone() for name, p in model.named_parameters()}}


def reference(
    ctx: RankContext, dp: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: the correct training with `dp` data-parallel groups, and every parameter's whole shape (what the
    ranks' shards are measured against)."""
    return {
        "correct": _replay(dp, steps, batch_size, lr, data_seed, model_seed, {}),
        "shapes": {name: list(p.shape) for name, p in make_transformer(seed=model_seed).named_parameters()},
    }


def replays(
    ctx: RankContext,
    dp: int,
    steps: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> dict[str, Any]:
    """Trusted: each hypothesis of hypotheses.toml replayed on the same batches from the same weights."""
    return {
        "replays": {
            name: _replay(dp, steps, batch_size, lr, data_seed, model_seed, request["mistake"])
            for name, request in hypotheses.items()
        }
    }
