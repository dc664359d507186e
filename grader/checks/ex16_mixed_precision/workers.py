"""Rank side of exercise 16: run the student's FSDP2 training under the grader's own instrumentation,
installed before the student's code runs, and report what it saw; the trusted single-process reference and its
replays of hypotheses.toml.

What the grader watches (Watch):
* every nn.Linear's forward pre-hook: the dtypes of its input and weight, whether autocast was on, and
  whether backward was running (a forward inside backward is a recomputation: activation checkpointing);
* FSDP2's collectives, `dist.all_gather_single` and `dist.reduce_scatter_single` (FSDP2 calls them
  through the module attribute): the dtype and size of what each sends;
* `torch.autograd.graph.saved_tensors_hooks` around the whole call of `train`: the outermost hooks, so
  they see the tensors autograd keeps for backward outside any checkpointed region (a checkpoint's own
  hooks are pushed inside ours and take what its region saves), counted per region (inp, each block, out)
  during the first forward;
* the optimizer's first step: the parameters it holds (the model's current ones? their dtypes) and this
  rank's shard of every gradient;
* the model's output at every forward, for the losses.
After training: what each rank stores of every parameter (DTensor or not, local elements, dtype), the
FSDP units, and the whole trained weights gathered by the grader's own call.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.fsdp._common_utils import clean_tensor_name
from torch.distributed.tensor import DTensor
from torch.optim.optimizer import register_optimizer_step_pre_hook

from grader.engine import exact
from grader.engine.facts import ReplayRequest
from grader.engine.rank_runtime import RankContext
from grader.rank.fsdp_units import OriginalNames, fsdp_units
from grader.rank.training import MOMENTUM, make_regression, make_transformer

REGIONS = ("inp", "blocks.0", "blocks.1", "blocks.2", "out")


def _dtype(tensor: Any, where: str) -> str:
    """A tensor's dtype as torch reads it (a tensor of a type the contract does not allow is refused: exact.py)."""
    if exact.tensor(tensor, where, True):
        return str(exact.dtype(tensor)).removeprefix("torch.")
    return type(tensor).__name__


def _in_backward() -> bool:
    return torch._C._current_graph_task_id() != -1


def rank_batches(
    steps: int, world_size: int, rank: int, batch_size: int, data_seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Step i: rank r takes samples [i*b*W + r*b, i*b*W + (r+1)*b)."""
    inputs, targets = make_regression(steps * batch_size * world_size, data_seed).tensors
    starts = range(rank * batch_size, len(inputs), batch_size * world_size)
    return [(inputs[s : s + batch_size].clone(), targets[s : s + batch_size].clone()) for s in starts]


class SavedByRegion:
    """The tensors autograd saves for backward during forward, counted per region of the model (the
    region whose forward is running: inp, a block, out; "loss" outside them), with their bytes."""

    def __init__(self, model: nn.Module) -> None:
        self.counts: dict[str, list[int]] = {}
        self.active = True
        self._stack: list[str] = []
        for name in REGIONS:
            module = model.get_submodule(name)
            module.register_forward_pre_hook(lambda _m, _a, name=name: self._enter(name))
            module.register_forward_hook(lambda _m, _a, _o: self._leave())

    def _enter(self, name: str) -> None:
        if not _in_backward():
            self._stack.append(name)

    def _leave(self) -> None:
        if not _in_backward() and self._stack:
            self._stack.pop()

    def pack(self, tensor: torch.Tensor) -> torch.Tensor:
        if self.active and not _in_backward():
            count = self.counts.setdefault(self._stack[-1] if self._stack else "loss", [0, 0])
            count[0] += 1
            count[1] += exact.nbytes(tensor) if exact.tensor(tensor, "autograd graph", True) else 0
        return tensor

    @contextmanager
    def hooks(self) -> Iterator[None]:
        with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda tensor: tensor):
            yield


class Watch:
    """The grader's instrumentation of one rank's training (module docstring)."""

    def __init__(self, ctx: RankContext, model: nn.Module, batches: list[tuple[torch.Tensor, torch.Tensor]]) -> None:
        self.model = model
        self.batches = batches
        self.steps = 0
        self.linears: list[dict[str, Any]] = []  # the first step's Linear calls
        self.losses: list[float] = []
        self.optimizer: dict[str, Any] = {}
        self.grads: dict[str, torch.Tensor] = {}
        self.saved = SavedByRegion(model)
        self.device_type = ctx.device.type
        self.names = OriginalNames(model)
        for path, module in model.named_modules():
            if isinstance(module, nn.Linear):
                module.register_forward_pre_hook(functools.partial(self._linear, path))
        model.register_forward_hook(self._output)
        self.collectives: list[dict[str, Any]] = []
        ctx.spy(dist, "all_gather_single", self._collective("all-gather", 1, "input_tensor"))
        ctx.spy(dist, "reduce_scatter_single", self._collective("reduce-scatter", 1, "input"))
        self._handle = register_optimizer_step_pre_hook(self._step)

    def _collective(self, kind: str, position: int, keyword: str) -> Callable[..., dict[str, Any]]:
        def describe(*args: Any, **kwargs: Any) -> dict[str, Any]:
            sent = kwargs.get(keyword, args[position] if len(args) > position else None)
            numel = exact.numel(sent) if exact.tensor(sent, "collective call") else 0
            self.collectives.append(
                {"kind": kind, "dtype": _dtype(sent, "collective call"), "numel": numel, "step": self.steps}
            )
            return {}

        return describe

    def _linear(self, name: str, module: nn.Module, args: tuple[Any, ...]) -> None:
        if self.steps == 0:
            self.linears.append(
                {
                    "name": name,
                    "input": _dtype(args[0], "model") if args else "none",
                    "weight": _dtype(getattr(module, "weight", None), "model"),
                    "autocast": torch.is_autocast_enabled(self.device_type),
                    "backward": _in_backward(),
                }
            )

    def _output(self, _module: nn.Module, _args: Any, output: Any) -> None:
        if _in_backward() or not exact.tensor(output, "model") or len(self.losses) >= len(self.batches):
            return
        target = self.batches[len(self.losses)][1].to(output.device)
        if output.shape == target.shape:
            self.losses.append(F.mse_loss(output.detach().float(), target).item())

    def _step(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.steps += 1
        self.saved.active = False
        if self.steps > 1:
            return
        original = self.names.parameters(self.model)
        current = {id(p): original[n] for n, p in self.model.named_parameters()}
        held = exact.optimizer_parameters(optimizer)
        self.optimizer = {
            "held": len(held),
            "current": sum(id(p) in current for p in held),
            "dtypes": sorted({_dtype(exact.local(p, "optimizer"), "optimizer") for p in held}),
        }
        for p in held:
            if id(p) in current and exact.tensor(p.grad, "model", True):
                grad = exact.local(p.grad, "model")
                if grad is not None:
                    self.grads[current[id(p)]] = grad.detach().float().cpu().clone()

    def close(self) -> None:
        self._handle.remove()


def _storage(model: nn.Module, names: OriginalNames) -> list[dict[str, Any]]:
    """What this rank stores of every parameter (the whole sizes come from the trusted reference)."""
    stored = []
    original = names.parameters(model)
    for name, p in model.named_parameters():
        local = exact.local(p, "model") if exact.tensor(p, "model", True) else None
        stored.append(
            {
                "name": original[name],
                "dtensor": isinstance(p, DTensor),
                "local": exact.numel(local) if local is not None else 0,
                "dtype": _dtype(local, "model"),
            }
        )
    return stored


def train(ctx: RankContext, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int) -> dict[str, Any]:
    ctx.init_group()
    ctx.watch_functional_collectives()  # a full state dict the student gathers on some ranks only is named
    model = make_transformer(seed=model_seed)
    batches = rank_batches(steps, ctx.world_size, ctx.rank, batch_size, data_seed)
    watch = Watch(ctx, model, batches)
    student_train = ctx.student("train")
    ctx.facts.update(linears=watch.linears, collectives=watch.collectives)  # live: kept if train raises
    try:
        with watch.saved.hooks():
            returned = student_train(ctx.rank, ctx.world_size, model, batches, lr)
    finally:
        watch.close()
        ctx.facts.update(  # kept where train raises after its steps: the checks may prove them complete
            storage=_storage(model, watch.names),
            units=fsdp_units(model, watch.names),
            steps=watch.steps,
            saved=dict(watch.saved.counts),
            optimizer=watch.optimizer,
            grads=watch.grads,
            losses=watch.losses,
        )
    ctx.facts["returned"] = type(returned).__name__
    if not ctx.returned_from("train"):  # a peer still makes, or failed in, train's collectives: the run's failure
        return {}
    root = returned if isinstance(returned, nn.Module) else model
    try:
        options = StateDictOptions(full_state_dict=True, cpu_offload=True)
        # typed as any state dict's values; a model's full state dict holds tensors only
        gathered = cast(dict[str, torch.Tensor], get_model_state_dict(root, options=options))
        original = {clean_tensor_name(k): v for k, v in watch.names.parameters(root).items()}
        final = {original.get(clean_tensor_name(k), k): v.detach().float().cpu().clone() for k, v in gathered.items()}
        ctx.facts["final"] = final if ctx.rank == 0 else {}
    except Exception as exc:  # a fact: the grader's own gather failed on this wrapping
        ctx.facts["gather_error"] = f"{type(exc).__name__}: {exc}"
    return {}


# What a replay may change in the trusted training (hypotheses.toml), and the correct training's value of each
REPLAY_KNOBS: dict[str, Any] = {
    "loss_dtype": "float32",  # the dtype the loss is computed in: "float32" (the bf16 output cast up) or "bfloat16"
}
LOSS_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def _low_precision_step(
    model: nn.Module,
    batches: list[tuple[torch.Tensor, torch.Tensor]],
    compute: torch.dtype,
    reduce: torch.dtype,
    loss_dtype: torch.dtype = torch.float32,
) -> tuple[dict[str, torch.Tensor], list[float]]:
    """What FSDP2 with MixedPrecisionPolicy(param_dtype=compute, reduce_dtype=reduce) computes at one step, in
    one process: each rank's gradient from a copy of the weights cast to `compute` (inputs cast too), of the loss
    computed in `loss_dtype` (the output and the targets cast to it), then their average in `reduce`, returned in
    fp32; and each rank's loss as the grader's watch measures it (the output cast to fp32)."""
    total: dict[str, torch.Tensor] = {}
    losses = []
    for inputs, targets in batches:
        low = copy.deepcopy(model).to(compute)
        output = low(inputs.to(compute))
        F.mse_loss(output.to(loss_dtype), targets.to(loss_dtype)).backward()
        losses.append(F.mse_loss(output.detach().float(), targets).item())
        for name, p in low.named_parameters():
            assert p.grad is not None  # every parameter takes part in the loss
            grad = p.grad.to(reduce)
            total[name] = total[name] + grad if name in total else grad
    return {name: (g / len(batches)).float() for name, g in total.items()}, losses


def _train(
    world_size: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int, mistake: dict[str, Any]
) -> dict[str, Any]:
    """Trusted: one process doing what FSDP2 with bf16 compute, fp32 reduce and fp32 master weights does, SGD with
    momentum on the fp32 weights; `mistake` (knobs of REPLAY_KNOBS) changes the dtype the loss is computed in.
    The first step's gradient, every step's loss per rank, the weights at the end."""
    knobs = {**REPLAY_KNOBS, **mistake}
    unknown = set(knobs) - set(REPLAY_KNOBS)
    if unknown:
        raise ValueError(f"unknown replay knobs: {sorted(unknown)}")
    loss_dtype = LOSS_DTYPES[knobs["loss_dtype"]]
    model = make_transformer(seed=model_seed)
    per_rank = [rank_batches(steps, world_size, r, batch_size, data_seed) for r in range(world_size)]
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    losses: list[list[float]] = []
    first: dict[str, torch.Tensor] = {}
    for step in range(steps):
        batches = [per_rank[r][step] for r in range(world_size)]
        grads, step_losses = _low_precision_step(model, batches, torch.bfloat16, torch.float32, loss_dtype)
        first = first or grads
        losses.append(step_losses)
        for name, p in model.named_parameters():
            p.grad = grads[name]
        optimizer.step()
        optimizer.zero_grad()
    final = {name: p.detach().clone() for name, p in model.named_parameters()}
    return {"first_grads": first, "losses": losses, "final": final}


def reference(
    ctx: RankContext, world_size: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: the correct training (`_train`); plus the first step's gradient with a bf16 reduce, with fp32
    compute and with fp16 compute, the tensors one plain block keeps for backward, and every parameter's
    elements and rows (what the ranks' shards must make up)."""
    model = make_transformer(seed=model_seed)
    parameters = {name: [p.numel(), p.shape[0] if p.dim() else 1] for name, p in model.named_parameters()}
    per_rank = [rank_batches(steps, world_size, r, batch_size, data_seed) for r in range(world_size)]
    batches = [per_rank[r][0] for r in range(world_size)]
    correct = _train(world_size, steps, batch_size, lr, data_seed, model_seed, {})
    first: dict[str, dict[str, torch.Tensor]] = {"correct": correct["first_grads"]}
    for label, compute, reduce in (
        ("bf16_reduce", torch.bfloat16, torch.bfloat16),
        ("fp32_compute", torch.float32, torch.float32),
        ("fp16_compute", torch.float16, torch.float32),
    ):
        first[label] = _low_precision_step(model, batches, compute, reduce)[0]
    plain = make_transformer(seed=model_seed).to(torch.bfloat16)
    saved = SavedByRegion(plain)
    with saved.hooks():
        plain(per_rank[0][0][0].to(torch.bfloat16))
    return {
        "losses": correct["losses"],
        "final": correct["final"],
        "first_grads": first,
        "saved": saved.counts,
        "parameters": parameters,
    }


def replays(
    ctx: RankContext,
    world_size: int,
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
            name: _train(world_size, steps, batch_size, lr, data_seed, model_seed, request["mistake"])
            for name, request in hypotheses.items()
        }
    }
