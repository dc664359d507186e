"""Rank-side building blocks shared by the training exercises: a toy model, synthetic data,
recorders of every optimizer step and of every forward pass, and the trusted single-process
reference.

The reference replays exactly the batches the ranks drew (same DistributedSampler permutation),
concatenated per step: DDP's averaged gradient on W batches of b samples is the gradient of the
mean loss over those W*b samples, so the two must agree to fp32 precision.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any, overload

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import DistributedSampler, TensorDataset

from grader.engine import exact, tamper
from grader.engine.facts import ReplayedStep, ReplayRequest, TrainingReplays

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


def make_regression(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size, FEATURES, generator=generator)
    weights = torch.randn(FEATURES, 1, generator=generator)
    targets = torch.tanh(inputs @ weights) + 0.1 * torch.randn(size, 1, generator=generator)
    return TensorDataset(inputs, targets)


def state(module: nn.Module) -> dict[str, torch.Tensor]:
    """A module's state dict, read by dict's own methods and only where its tensors are of an allowed type (exact.py):
    the student may hand back a module of their own."""
    return {
        name: tensor.detach().cpu().clone()
        for name, tensor in exact.items(module.state_dict(), "model")
        if exact.tensor(tensor, "model", True)
    }


class ForwardRecorder:
    """For every forward pass of `model`: the dataset samples it was given (their indices, found by
    their values; -1 for a row that is not in the dataset), whether the model was in training mode
    with autograd on, whether the pass ran inside a DDP forward, and if so whether that DDP was set
    to all-reduce the gradients of the coming backward (False inside no_sync).

    These are evidence for naming a mistake (which batches, how many micro-batches per step),
    never a reason to fail code whose numbers are right."""

    def __init__(self, model: nn.Module, inputs: torch.Tensor) -> None:
        self.calls: list[dict[str, Any]] = []
        self._rows = {row.numpy().tobytes(): index for index, row in enumerate(inputs)}
        self._ddp: list[DistributedDataParallel] = []  # the DDP forwards in progress
        self._handle = model.register_forward_pre_hook(self._before, with_kwargs=True)
        self._original = original = DistributedDataParallel.forward
        recorder = self

        @functools.wraps(original)
        def forward(ddp: DistributedDataParallel, *args: Any, **kwargs: Any) -> Any:
            recorder._ddp.append(ddp)
            try:
                return original(ddp, *args, **kwargs)
            finally:
                recorder._ddp.pop()

        tamper.install(DistributedDataParallel, "forward", forward)

    def _samples(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[int]:
        first = next((a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)), None)
        if first is None or not exact.tensor(first, "model input") or exact.dim(first) != 2:
            return []
        rows = first.detach().to("cpu", torch.float32).contiguous().numpy()
        return [self._rows.get(row.tobytes(), -1) for row in rows]

    def _before(self, module: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        ddp = self._ddp[-1] if self._ddp else None
        self.calls.append(
            {
                "samples": self._samples(args, kwargs),
                "training": module.training,
                "grad": torch.is_grad_enabled(),
                "ddp": ddp is not None,
                "sync": bool(ddp.require_backward_grad_sync) if ddp is not None else None,
            }
        )

    def close(self) -> None:
        self._handle.remove()
        tamper.forget(DistributedDataParallel, "forward")
        setattr(DistributedDataParallel, "forward", self._original)


class LossRecorder:
    """The value of every scalar `.backward()` the process runs, in order: the loss a step's
    gradient came from. Evidence for localizing a mistake (the loss phase), never a reason to fail:
    a correct loop may scale its loss (by 1/k, say) where another scales its gradients."""

    def __init__(self) -> None:
        self.losses: list[float] = []
        self._original = original = torch.Tensor.backward
        recorder = self

        @functools.wraps(original)
        def backward(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if exact.tensor(tensor, "loss", True) and exact.numel(tensor) == 1:
                recorder.losses.append(float(tensor.detach().float().cpu().reshape(())))
            return original(tensor, *args, **kwargs)

        tamper.install(torch.Tensor, "backward", backward)

    def close(self) -> None:
        tamper.forget(torch.Tensor, "backward")
        setattr(torch.Tensor, "backward", self._original)


def optimizer_state(optimizer: torch.optim.Optimizer, named: list[tuple[str, torch.Tensor]]) -> dict[str, Any]:
    """Per parameter, the optimizer's state buffers by name (momentum_buffer, exp_avg...) and the
    norm of each: which buffers exist says which optimizer ran, their norms whether they were kept."""
    summary: dict[str, Any] = {}
    state = {id(p): buffers for p, buffers in exact.items(optimizer.state, "optimizer state")}
    for name, p in named:
        buffers = exact.items(state.get(id(p), {}), "optimizer state")
        summary[name] = {
            key: float(value.detach().float().norm()) if exact.tensor(value, "optimizer state") else float(value)
            for key, value in buffers
            if type(value) in (int, float) or exact.tensor(value, "optimizer state")
        }
    return summary


class StepRecorder:
    """Records, for every optimizer step anywhere in the process, the gradients before the step
    and the parameters after it, named after `model`'s parameters (a tensor that is not one of
    them is named paramN), the parameters that had no gradient at all, the optimizer's state after
    the step (optimizer_state), how many forward passes `forwards` had recorded by then and the
    losses `losses` recorded since the step before."""

    def __init__(
        self, model: nn.Module, forwards: ForwardRecorder | None = None, losses: LossRecorder | None = None
    ) -> None:
        self._names = {id(p): name for name, p in model.named_parameters()}
        self._forwards, self._losses, self._losses_seen = forwards, losses, 0
        self.initial = state(model)
        self.start: dict[str, torch.Tensor] = {}  # the weights the first step started from
        self.steps: list[dict[str, Any]] = []
        self._handles = [
            register_optimizer_step_pre_hook(self._before),
            register_optimizer_step_post_hook(self._after),
        ]

    def _named(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        params = exact.optimizer_parameters(optimizer)
        return [(self._names.get(id(p), f"param{i}"), p) for i, p in enumerate(params)]

    def _before(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        named = self._named(optimizer)
        if not self.steps:
            self.start = {name: p.detach().cpu().clone() for name, p in named}
        grads = {
            name: (p.grad.detach().cpu().clone() if exact.tensor(p.grad, "model") else torch.zeros_like(p).cpu())
            for name, p in named
        }
        step: dict[str, Any] = {"grads": grads, "no_grad": [name for name, p in named if p.grad is None]}
        if self._forwards is not None:
            step["forwards"] = len(self._forwards.calls)
        if self._losses is not None:
            step["losses"] = self._losses.losses[self._losses_seen :]
            self._losses_seen = len(self._losses.losses)
        self.steps.append(step)

    def _after(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        named = self._named(optimizer)
        self.steps[-1]["params"] = {name: p.detach().cpu().clone() for name, p in named}
        self.steps[-1]["state"] = optimizer_state(optimizer, named)

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()

    def facts(self) -> dict[str, Any]:
        return {"initial": self.initial, "start": self.start, "steps": self.steps}


class ShardStepRecorder:
    """For every optimizer step: each parameter's gradient before the step and its value after, as
    the flat piece this rank holds (a DTensor's local shard, an FSDP1 view into the flat shard, or
    the whole tensor), named after `model`'s parameters as they are named at that step. Joined in
    rank order, the pieces of all ranks are the whole tensors: FSDP2 shards along dim 0, FSDP1 in
    contiguous flat ranges (grader.judge.trajectory.gathered_steps)."""

    def __init__(self, model: nn.Module) -> None:
        self._model = model
        self._names = {id(p): name for name, p in model.named_parameters()}
        self.steps: list[dict[str, Any]] = []
        self.layouts: dict[str, list[list[Any]]] = {}  # an FSDP1 flat parameter's [name or None, numel] segments
        self._handles = [register_optimizer_step_pre_hook(self._before), register_optimizer_step_post_hook(self._after)]

    @overload
    @staticmethod
    def _piece(tensor: torch.Tensor) -> torch.Tensor: ...

    @overload
    @staticmethod
    def _piece(tensor: torch.Tensor | None) -> torch.Tensor | None: ...

    @staticmethod
    def _piece(tensor: torch.Tensor | None) -> torch.Tensor | None:
        if not exact.tensor(tensor, "model", True):
            return None
        local = exact.local(tensor, "model")
        return None if local is None else local.detach().cpu().reshape(-1).clone()

    def _named(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        from torch.distributed.fsdp._common_utils import clean_tensor_name

        self._names.update({id(p): clean_tensor_name(name) for name, p in self._model.named_parameters()})
        params = exact.optimizer_parameters(optimizer)
        named = [(self._names.get(id(p), f"param{i}"), p) for i, p in enumerate(params)]
        for name, p in named:
            if hasattr(p, "_numels_with_padding") and name not in self.layouts:
                inner = iter(p._fqns)
                self.layouts[name] = [
                    [None if padding else next(inner), numel]
                    for numel, padding in zip(p._numels_with_padding, p._is_padding_mask)
                ]
        return named

    def _before(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        grads = {}
        for name, p in self._named(optimizer):
            piece = self._piece(p.grad)
            grads[name] = piece if piece is not None else torch.zeros_like(self._piece(p))
        self.steps.append({"grads": grads})

    def _after(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.steps[-1]["params"] = {name: self._piece(p) for name, p in self._named(optimizer)}

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()


def record_training(
    facts: dict[str, Any], model: nn.Module, train: Callable[[], Any], inputs: torch.Tensor | None = None
) -> None:
    """Run `train()` (the student's loop on `model`) under a StepRecorder, and a ForwardRecorder
    over the dataset's `inputs` when given; record every step and forward pass, the type it
    returned and the final weights of the plain model it returned (unwrapping DDP). Steps and
    forward passes are recorded even when `train()` raises: the judge may prove those taken before
    the failure complete (CheckContext.facts_until_failure)."""
    forwards = ForwardRecorder(model, inputs) if inputs is not None else None
    losses = LossRecorder()
    recorder = StepRecorder(model, forwards, losses)
    try:
        trained = train()
    finally:
        recorder.close()
        losses.close()
        if forwards is not None:
            forwards.close()
        facts.update(recorder.facts())
        if forwards is not None:
            facts["forwards"] = forwards.calls
    facts["returned"] = type(trained).__name__
    if isinstance(trained, DistributedDataParallel):
        trained = trained.module
    facts["final"] = state(trained) if isinstance(trained, nn.Module) else {}


def rank_batches(size: int, world_size: int, rank: int, batch_size: int, epoch: int, seed: int = 0) -> list[list[int]]:
    """The index batches a correct loader yields on `rank` in `epoch`."""
    # torch's stubs want a Dataset; DistributedSampler only takes its len()
    sampler: DistributedSampler[int] = DistributedSampler(
        range(size),  # type: ignore[arg-type]
        num_replicas=world_size,
        rank=rank,
        shuffle=True,
        seed=seed,
    )
    sampler.set_epoch(epoch)
    indices = list(sampler)
    return [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]


def loader_batches(
    size: int,
    world_size: int,
    batch_size: int,
    epochs: int,
    shuffle: bool = True,
    set_epoch: bool = True,
    seed: int = 0,
    first_epoch: int = 0,
) -> list[list[list[int]]]:
    """Per rank, every index batch a DataLoader over DistributedSampler yields, epoch after epoch;
    shuffle=False, set_epoch=False or epochs counted from first_epoch=1 give what those mistakes yield."""
    per_rank = []
    for rank in range(world_size):
        # torch's stubs want a Dataset; DistributedSampler only takes its len()
        sampler: DistributedSampler[int] = DistributedSampler(
            range(size),  # type: ignore[arg-type]
            num_replicas=world_size,
            rank=rank,
            shuffle=shuffle,
            seed=seed,
        )
        batches = []
        for epoch in range(epochs):
            sampler.set_epoch(first_epoch + epoch if set_epoch else 0)
            indices = list(sampler)
            batches += [indices[i : i + batch_size] for i in range(0, len(indices), batch_size)]
        per_rank.append(batches)
    return per_rank


def union_batches(size: int, world_size: int, batch_size: int, epochs: int, seed: int = 0) -> list[list[int]]:
    """Per optimizer step, the samples of all ranks together."""
    steps = []
    for epoch in range(epochs):
        per_rank = [rank_batches(size, world_size, r, batch_size, epoch, seed) for r in range(world_size)]
        steps += [sum((batches[i] for batches in per_rank), []) for i in range(len(per_rank[0]))]
    return steps


def train_reference(
    model: nn.Module,
    dataset: TensorDataset,
    steps: list[list[int]],
    lr: float,
    grad_scale: float = 1.0,
    losses: list[float] | None = None,
    mistake: dict[str, Any] | None = None,
    parts: list[list[list[int]]] | None = None,
    shares: list[list[list[int]]] | None = None,
) -> StepRecorder:
    """Plain SGD with momentum on one process, one union batch per step; each step's loss is
    appended to `losses` when given. `mistake` replays a hypothesis of the judge on the same inputs
    (grader.judge.replay): knobs from MISTAKE_KNOBS, each changing one thing of the correct loop.
    `parts`: per step, the batches one rank draws; each step then records their mean losses at the
    weights it starts from ("part_losses"), what that rank's backward() should start from. `shares`: per
    step, each rank's batch; the step's gradient is then theirs averaged, each share's backward on its own as
    under DDP, so that a replay rounds as the run does (a diverging run amplifies any other rounding)."""
    knobs = {**MISTAKE_KNOBS, **(mistake or {})}
    unknown = set(knobs) - set(MISTAKE_KNOBS)
    if unknown:
        raise ValueError(f"unknown mistake knobs: {sorted(unknown)}")
    recorder = StepRecorder(model)
    optimizer = _optimizer(model, lr * knobs["lr_scale"], knobs)
    inputs, targets = dataset.tensors
    for number, indices in enumerate(steps):
        if parts is not None:
            with torch.no_grad():
                part_losses = [F.mse_loss(model(inputs[part]), targets[part]).item() for part in parts[number]]
        if number + 1 == knobs["fresh_optimizer_at"]:
            optimizer = _optimizer(model, lr * knobs["lr_scale"], knobs)  # its state (momentum) lost
        if not knobs["keep_grads"] or number == 0:
            optimizer.zero_grad()
        scale = grad_scale * knobs["loss_scale"] * (len(indices) / knobs["summed_in"] if knobs["summed_in"] else 1)
        if shares is None:
            loss = F.mse_loss(model(inputs[indices]), targets[indices]) * scale
            if losses is not None:
                losses.append(loss.item())
            loss.backward()
        else:  # each rank's share backward on its own, averaged as DDP does: DDP's rounding, bit for bit at W=2
            share_losses = [
                F.mse_loss(model(inputs[share]), targets[share]) * (scale / len(shares[number]))
                for share in shares[number]
            ]
            for share_loss in share_losses:
                share_loss.backward()
            if losses is not None:
                losses.append(sum(share_loss.item() for share_loss in share_losses))
        if knobs["clip_norm"]:
            torch.nn.utils.clip_grad_norm_(model.parameters(), knobs["clip_norm"])
        optimizer.step()
        if parts is not None:
            recorder.steps[-1]["part_losses"] = part_losses
    recorder.close()
    return recorder


# What a replay may change, and the correct loop's value of each (train_reference)
MISTAKE_KNOBS: dict[str, Any] = {
    "loss_scale": 1.0,  # the loss times this (divided by W on top of DDP's mean: 1/W)
    "summed_in": 0,  # the loss summed over each of this many equal shares of a step's samples, not averaged
    "lr_scale": 1.0,  # the learning rate times this
    "optimizer": "sgd",  # or "adam", "adamw" at the same learning rate
    "momentum": MOMENTUM,
    "nesterov": False,
    "weight_decay": 0.0,
    "clip_norm": 0.0,  # clip_grad_norm_ to this norm; 0: no clipping
    "keep_grads": False,  # gradients never cleared: each step's adds to the ones before
    "fresh_optimizer_at": 0,  # a new optimizer from this step (counted from 1) on: its state lost, as on resuming
}


def _optimizer(model: nn.Module, lr: float, knobs: dict[str, Any]) -> torch.optim.Optimizer:
    if knobs["optimizer"] == "adam":
        return torch.optim.Adam(model.parameters(), lr=lr, weight_decay=knobs["weight_decay"])
    if knobs["optimizer"] == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=lr)
    return torch.optim.SGD(
        model.parameters(),
        lr=lr,
        momentum=knobs["momentum"],
        nesterov=knobs["nesterov"],
        weight_decay=knobs["weight_decay"],
    )


def replay_all(
    make: Callable[[], nn.Module],
    dataset: TensorDataset,
    schedules: dict[str, list[list[int]]],
    lr: float,
    hypotheses: dict[str, ReplayRequest],
    shares: dict[str, list[list[list[int]]]] | None = None,
) -> TrainingReplays:
    """Each hypothesis (name -> its schedule, a key of `schedules`, and its knobs) replayed from the same
    initial weights on the same samples: its steps. `shares`: per schedule, each step's batches of every
    rank (train_reference's `shares`)."""
    replays: dict[str, list[ReplayedStep]] = {}
    for name, hypothesis in hypotheses.items():
        schedule = hypothesis["schedule"]
        recorder = train_reference(
            make(), dataset, schedules[schedule], lr, mistake=hypothesis["mistake"], shares=(shares or {}).get(schedule)
        )
        replays[name] = [{"grads": step["grads"], "params": step["params"]} for step in recorder.steps]
    return {"replays": replays}


def steps_per_epoch(size: int, world_size: int, batch_size: int) -> int:
    return math.ceil(math.ceil(size / world_size) / batch_size)


def accumulation_batches(size: int, world_size: int, batch_size: int, k: int, seed: int = 0) -> list[list[int]]:
    """Per optimizer step of gradient accumulation, the samples of all ranks' k micro-batches.

    Micro-batches are full batches only (a loader with drop_last=True), and a trailing group of
    fewer than k micro-batches makes no step, so every step averages exactly k*b*W samples.
    """
    per_rank = [
        [batch for batch in rank_batches(size, world_size, r, batch_size, 0, seed) if len(batch) == batch_size]
        for r in range(world_size)
    ]
    groups = len(per_rank[0]) // k
    return [sum((batches[i] for i in range(g * k, (g + 1) * k) for batches in per_rank), []) for g in range(groups)]


def gradient_on(
    model: nn.Module, dataset: TensorDataset, indices: list[int], grad_scale: float = 1.0
) -> dict[str, torch.Tensor]:
    """The gradient of the mean squared error on `indices` (times grad_scale), leaving `model` untouched."""
    inputs, targets = dataset.tensors
    model.zero_grad()
    (F.mse_loss(model(inputs[indices]), targets[indices]) * grad_scale).backward()
    grads = {}
    for name, p in model.named_parameters():
        assert p.grad is not None  # the loss is a function of every parameter of the course's models
        grads[name] = p.grad.detach().clone()
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
