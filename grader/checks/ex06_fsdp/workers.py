"""Rank side of exercise 6: run the student's FSDP training, then measure what each rank holds
(units, local shard sizes), gather the trained weights with the grader's own call, and describe
the returned checkpoint; the trusted single-process reference.

Measurements work for FSDP2 (DTensor parameters, FSDPModule units) and FSDP1 (FlatParameters,
FullyShardedDataParallel units) alike.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.distributed.fsdp._common_utils import clean_tensor_name
from torch.distributed.tensor import DTensor
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import TensorDataset

from grader.checks.training import MOMENTUM, ShardStepRecorder, TinyTransformer, make_regression, make_transformer, \
    state, train_reference
from grader.engine.rank_runtime import RankContext

UNIT_TYPES = (FSDPModule, FullyShardedDataParallel)


def _describe_mesh(mesh: DeviceMesh, device_type: Any, *args: Any, **kwargs: Any) -> dict[str, Any]:
    return {"device_type": str(device_type)}


def _shard_sizes(root: nn.Module) -> list[dict[str, Any]]:
    """Per parameter: elements held by this rank, elements of the whole, and the first dimension
    (FSDP2 splits along it; an FSDP1 FlatParameter is one flat dimension)."""
    sizes = []
    for name, p in root.named_parameters():
        if isinstance(p, DTensor):
            local, full, rows = p.to_local().numel(), p.numel(), p.shape[0] if p.dim() else 1
        elif hasattr(p, "_unpadded_unsharded_size"):
            local, full = p.numel(), p._unpadded_unsharded_size.numel()
            rows = full
        else:
            local, full, rows = p.numel(), p.numel(), p.shape[0] if p.dim() else 1
        sizes.append({"name": name, "local": local, "full": full, "rows": rows})
    return sizes


def _describe_checkpoint(saved: Any) -> dict[str, Any]:
    """What the student's returned state dict holds: key, kind and shape of each value, the plain
    tensors themselves, and whether it loads into an unwrapped model."""
    if not isinstance(saved, dict):
        return {"type": type(saved).__name__}
    entries, tensors = [], {}
    for key, value in saved.items():
        if isinstance(value, DTensor):
            entries.append({"key": str(key), "kind": "DTensor", "shape": list(value.to_local().shape)})
        elif isinstance(value, torch.Tensor):
            entries.append({"key": str(key), "kind": "Tensor", "shape": list(value.shape)})
            tensors[str(key)] = value.detach().cpu().clone()
        else:
            entries.append({"key": str(key), "kind": type(value).__name__, "shape": []})
    facts: dict[str, Any] = {"type": "dict", "entries": entries, "tensors": tensors, "loads_plain": ""}
    try:
        TinyTransformer().load_state_dict(tensors)
    except RuntimeError as exc:
        facts["loads_plain"] = str(exc).splitlines()[0]
    return facts


def _rank_batches(size: int, world_size: int, rank: int, batch_size: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Step i: rank r takes samples [i*b*W + r*b, i*b*W + (r+1)*b)."""
    inputs, targets = make_regression(size).tensors
    starts = range(rank * batch_size, size, batch_size * world_size)
    return [(inputs[s : s + batch_size].clone(), targets[s : s + batch_size].clone()) for s in starts]


def train(ctx: RankContext, steps: int, batch_size: int, lr: float) -> dict[str, Any]:
    ctx.init_group()
    model = make_transformer(seed=2000)
    batches = _rank_batches(steps * batch_size * ctx.world_size, ctx.world_size, ctx.rank, batch_size)
    ctx.facts["meshes"] = ctx.spy(DeviceMesh, "__init__", _describe_mesh)
    outputs: list[torch.Tensor] = []
    model.register_forward_hook(lambda _module, _args, output: outputs.append(output.detach().cpu().clone()))
    roots: list[nn.Module] = []
    module = ctx.student_module()
    shard_model = ctx.student("shard_model")

    @functools.wraps(shard_model)
    def recorded_shard_model(*args: Any, **kwargs: Any) -> nn.Module:
        roots.append(shard_model(*args, **kwargs))
        return roots[-1]

    module.shard_model = recorded_shard_model  # train_fsdp finds it through the module's globals
    ctx.facts["optimizer_steps"] = optimizer_steps = []
    handle = register_optimizer_step_pre_hook(
        lambda optimizer, *_: optimizer_steps.append(_owned_share(optimizer, roots[-1] if roots else model)))
    shard_steps = ShardStepRecorder(model)  # every step's pieces, for matches_reference
    ctx.facts.update(shard_steps=shard_steps.steps, flat_layouts=shard_steps.layouts)
    train_fsdp = ctx.student("train_fsdp")
    saved = train_fsdp(ctx.rank, ctx.world_size, model, batches, lr)
    handle.remove()
    shard_steps.close()
    root = roots[-1] if roots and isinstance(roots[-1], nn.Module) else model
    ctx.facts["losses"] = [F.mse_loss(out, target).item() for out, (_, target) in zip(outputs, batches)]
    ctx.facts["units"] = [name or "(root)" for name, m in root.named_modules() if isinstance(m, UNIT_TYPES)]
    ctx.facts["block_units"] = sum(isinstance(block, UNIT_TYPES) for block in model.blocks)
    ctx.facts["blocks"] = len(model.blocks)
    ctx.facts["shards"] = _shard_sizes(root)
    ctx.facts["checkpoint"] = _describe_checkpoint(saved) if ctx.rank == 0 else {}
    try:
        gathered = _gather(root)
        ctx.facts["final"] = gathered if ctx.rank == 0 else {}
    except Exception as exc:  # a fact: the grader's own gather failed on this wrapping
        ctx.facts["gather_error"] = f"{type(exc).__name__}: {exc}"
    return {}


def _gather(root: nn.Module) -> dict[str, torch.Tensor]:
    """The whole trained weights, by plain names (a collective: every rank calls it). FSDP1's full
    state dict fails on CPU in torch 2.13 (setStorage ... out of bounds), so FSDP1 is gathered
    with summon_full_params."""
    if isinstance(root, FullyShardedDataParallel):
        with FullyShardedDataParallel.summon_full_params(root, writeback=False):
            return {clean_tensor_name(name): p.detach().cpu().clone() for name, p in root.named_parameters()}
    gathered = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return {name: tensor.detach().clone() for name, tensor in gathered.items()}


def _owned_share(optimizer: torch.optim.Optimizer, model: nn.Module) -> float:
    """The share of the optimizer's parameters that are the model's current parameters."""
    current = {id(p) for p in model.parameters()}
    held = [p for group in optimizer.param_groups for p in group["params"]]
    return sum(id(p) in current for p in held) / len(held) if held else 0.0


def reference(ctx: RankContext, world_size: int, steps: int, batch_size: int, lr: float) -> dict[str, Any]:
    """Trusted: one process, SGD with momentum, step i on all ranks' batches of step i together."""
    model = make_transformer(seed=2000)
    union = batch_size * world_size
    dataset: TensorDataset = make_regression(steps * union)
    losses: list[float] = []
    initial = state(model)
    recorder = train_reference(model, dataset, [list(range(i * union, (i + 1) * union)) for i in range(steps)], lr,
                               losses=losses)
    every = recorder.facts()  # every step, for the trajectory diagnosis of matches_reference
    return {"losses": losses, "initial": initial, "final": state(model), "steps": every["steps"],
            "start": every["start"], "momentum": MOMENTUM}
