"""Rank side of exercise 6: run the student's FSDP training, then measure what each rank holds
(units, local shard sizes), gather the trained weights with the grader's own call, and describe
the returned checkpoint; the trusted single-process reference.

Measurements work for FSDP2 (DTensor parameters, FSDPModule units) and FSDP1 (FlatParameters,
FullyShardedDataParallel units) alike. What a rank holds is read only from tensors of the types the contract allows
(grader/engine/exact.py: torch.Tensor, nn.Parameter, FlatParameter, DTensor around a plain local tensor), through
torch's own methods: a subclass would answer its own sizes.
"""

from __future__ import annotations

import functools
import math
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import DeviceMesh
from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel
from torch.distributed.fsdp._common_utils import clean_tensor_name
from torch.distributed.fsdp._flat_param import FlatParameter
from torch.distributed.tensor import DTensor
from torch.optim.optimizer import register_optimizer_step_pre_hook
from torch.utils.data import TensorDataset

from grader.checks.ex06_fsdp import cpu_fsdp1
from grader.engine import exact, tamper
from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.training import (
    MOMENTUM,
    ShardStepRecorder,
    TinyTransformer,
    make_regression,
    make_transformer,
    replay_all,
    state,
    train_reference,
)


def _describe_mesh(_built: DeviceMesh, device_type: Any, mesh: Any = None, **kwargs: Any) -> dict[str, Any]:
    """The device type and the number of ranks of a mesh being built (from its ranks, or from the
    layout init_device_mesh passes)."""
    ranks = mesh if mesh is not None else kwargs.get("_layout")
    size = None
    if ranks is not None:
        size = int(ranks.numel()) if hasattr(ranks, "numel") else int(torch.as_tensor(ranks).numel())
    return {"device_type": str(device_type), "size": size}


def _module_paths(*roots: nn.Module) -> dict[int, str]:
    """id(module) -> its path with FSDP's wrapper prefixes removed, from the first root that has it."""
    paths: dict[int, str] = {}
    for root in roots:
        for path, module in root.named_modules():
            paths.setdefault(id(module), clean_tensor_name(path))
    return paths


HELD = "model"  # where a refused tensor was found, as the judge says it


def _held(name: str, local: int, shape: Any, itemsize: int) -> dict[str, Any]:
    """What this rank holds of one parameter: `local` of its elements; rows: its first dimension."""
    shape = list(shape)
    return {
        "name": name,
        "local": local,
        "full": math.prod(shape),
        "rows": shape[0] if shape else 1,
        "itemsize": itemsize,
    }


def _fsdp1_unit(handle: Any, prefix: str) -> list[dict[str, Any]]:
    """A FlatParameter's share of each parameter it flattens, whatever `use_orig_params` is: the
    parameters FSDP1 exposes with use_orig_params=True are views into this rank's flat shard, not
    whole tensors, so they are counted from the shard's own bookkeeping."""
    flat = handle.flat_param  # FSDP's bookkeeping, read from it only when it is FSDP's own FlatParameter
    if not exact.tensor(handle.flat_param, HELD):
        return []
    return [
        _held(f"{prefix}.{fqn}" if prefix else fqn, info.numel_in_shard or 0, shape, exact.itemsize(flat))
        for fqn, shape, info in zip(flat._fqns, flat._shapes, flat._shard_param_infos)
    ]


def _fsdp2_unit(group: Any, names: dict[int, str]) -> list[dict[str, Any]]:
    """A parameter group's DTensors: this rank's local shard of each."""
    held = []
    for p in group.fsdp_params:
        sharded = p.sharded_param
        local = exact.local(sharded, HELD) if exact.tensor(sharded, HELD, True) else None
        if local is not None:
            held.append(
                _held(names.get(id(sharded), "?"), exact.numel(local), exact.shape(sharded), exact.itemsize(local))
            )
    return held


def _holdings(root: nn.Module, model: nn.Module) -> dict[str, Any]:
    """The FSDP units (the parameters gathered and freed together) and, per parameter, the elements
    this rank holds; parameters in no unit are held whole. FSDP1 and FSDP2 alike, found from the
    module the student returned and from the model the grader passed in."""
    paths = _module_paths(root, model)
    names = {id(p): clean_tensor_name(n) for module in (root, model) for n, p in module.named_parameters()}
    units: list[dict[str, Any]] = []
    seen: set[int] = set()
    for module in (*root.modules(), *model.modules()):
        if isinstance(module, FullyShardedDataParallel) and module._handle is not None:
            key, name = id(module._handle), paths[id(module)]
            params = _fsdp1_unit(module._handle, name)
        elif isinstance(module, FSDPModule) and module._get_fsdp_state()._fsdp_param_group is not None:
            state = module._get_fsdp_state()
            key = id(state._fsdp_param_group)
            name = "+".join(paths.get(id(m), "?") or "(root)" for m in state._modules)
            params = _fsdp2_unit(state._fsdp_param_group, names)
        else:
            continue
        if key not in seen:
            seen.add(key)
            units.append({"name": name or "(root)", "params": params})
    in_units = {p["name"] for unit in units for p in unit["params"]}
    loose = {}
    for module in (root, model):
        for name, p in module.named_parameters():
            name = clean_tensor_name(name)
            if not isinstance(p, FlatParameter) and name not in in_units and name not in loose:
                local = exact.local(p, HELD) if exact.tensor(p, HELD, True) else None
                if local is not None:
                    loose[name] = _held(name, exact.numel(local), exact.shape(p), exact.itemsize(local))
    return {"units": units, "loose": list(loose.values())}


def _describe_checkpoint(saved: Any) -> dict[str, Any]:
    """What the student's returned state dict holds: key, kind and shape of each value, the plain
    tensors themselves, and whether it loads into an unwrapped model."""
    if not isinstance(saved, dict):
        return {"type": type(saved).__name__}
    entries: list[dict[str, Any]] = []
    tensors: dict[str, torch.Tensor] = {}
    for key, value in saved.items():
        if isinstance(value, DTensor):
            entries.append({"key": str(key), "kind": "DTensor", "shape": list(value.to_local().shape)})
        elif type(value) in (torch.Tensor, nn.Parameter):
            entries.append({"key": str(key), "kind": "Tensor", "shape": list(value.shape)})
            tensors[str(key)] = value.detach().cpu().clone()
        elif isinstance(value, torch.Tensor):  # a ShardedTensor, say: this rank's shards, never sent whole
            entries.append({"key": str(key), "kind": type(value).__name__, "shape": list(value.shape)})
        else:
            entries.append({"key": str(key), "kind": type(value).__name__, "shape": None})
    facts: dict[str, Any] = {"type": "dict", "entries": entries, "tensors": tensors, "loads_plain": ""}
    try:
        TinyTransformer().load_state_dict(tensors)
    except RuntimeError as exc:
        facts["loads_plain"] = str(exc).splitlines()[0]
    return facts


def _rank_batches(
    size: int, world_size: int, rank: int, batch_size: int, data_seed: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Step i: rank r takes samples [i*b*W + r*b, i*b*W + (r+1)*b)."""
    inputs, targets = make_regression(size, data_seed).tensors
    starts = range(rank * batch_size, size, batch_size * world_size)
    return [(inputs[s : s + batch_size].clone(), targets[s : s + batch_size].clone()) for s in starts]


def train(ctx: RankContext, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int) -> dict[str, Any]:
    ctx.init_group()
    ctx.watch_functional_collectives()  # FSDP2's full state dict gathers through them
    cpu_fsdp1.install()
    model = make_transformer(seed=model_seed)
    batches = _rank_batches(steps * batch_size * ctx.world_size, ctx.world_size, ctx.rank, batch_size, data_seed)
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

    tamper.install(module, "shard_model", recorded_shard_model)  # train_fsdp finds it through the module's globals
    ctx.facts["optimizer_steps"] = optimizer_steps = []

    def stepping(optimizer: torch.optim.Optimizer, *_: Any) -> None:
        """Each step: the share of the optimizer's parameters that are the model's, and what this rank holds (kept
        where train_fsdp then fails: in the checkpoint's gather, say)."""
        optimizer_steps.append(_owned_share(optimizer, roots[-1] if roots else model))
        ctx.facts.update(_held_by(roots, model))

    handle = register_optimizer_step_pre_hook(stepping)
    shard_steps = ShardStepRecorder(model)  # every step's pieces, for matches_reference
    ctx.facts.update(shard_steps=shard_steps.steps, flat_layouts=shard_steps.layouts)
    train_fsdp = ctx.student("train_fsdp")
    saved = train_fsdp(ctx.rank, ctx.world_size, model, batches, lr)
    handle.remove()
    shard_steps.close()
    together = ctx.returned_from("train_fsdp")  # before any collective of the grader's
    root = roots[-1] if roots and isinstance(roots[-1], nn.Module) else model
    ctx.facts["losses"] = [F.mse_loss(out, target).item() for out, (_, target) in zip(outputs, batches)]
    ctx.facts.update(_held_by(roots, model))
    ctx.facts["checkpoint"] = _describe_checkpoint(saved) if ctx.rank == 0 else {}
    if not together:  # a peer still waits in, or failed in, train_fsdp's collectives: the run failed there
        return {}
    try:
        gathered = _gather(root)
        ctx.facts["final"] = gathered if ctx.rank == 0 else {}
    except Exception as exc:  # a fact: the grader's own gather failed on this wrapping
        ctx.facts["gather_error"] = f"{type(exc).__name__}: {exc}"
    return {}


def _held_by(roots: list[Any], model: TinyTransformer) -> dict[str, Any]:
    """What this rank holds (_holdings) of the module shard_model returned, if it returned one, and the model's
    number of blocks."""
    root = roots[-1] if roots and isinstance(roots[-1], nn.Module) else model
    return {"blocks": len(model.blocks), **_holdings(root, model)}


def _gather(root: nn.Module) -> dict[str, torch.Tensor]:
    """The whole trained weights, by plain names (a collective: every rank calls it). FSDP1 is
    gathered with summon_full_params, which reads the parameters whatever state-dict type the
    student configured on the model; FSDP2 through the distributed checkpoint API."""
    if isinstance(root, FullyShardedDataParallel):
        with FullyShardedDataParallel.summon_full_params(root, writeback=False):
            return {clean_tensor_name(name): p.detach().cpu().clone() for name, p in root.named_parameters()}
    gathered = get_model_state_dict(root, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    # typed as any state dict's values (ints, lists, ...); a model's full state dict holds tensors only
    return {name: tensor.detach().clone() for name, tensor in cast(dict[str, torch.Tensor], gathered).items()}


def _owned_share(optimizer: torch.optim.Optimizer, model: nn.Module) -> float:
    """The share of the optimizer's parameters that are the model's current parameters."""
    current = {id(p) for p in model.parameters()}
    held = exact.optimizer_parameters(optimizer)
    return sum(id(p) in current for p in held) / len(held) if held else 0.0


def reference(
    ctx: RankContext, world_size: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: one process, SGD with momentum, step i on all ranks' batches of step i together."""
    model = make_transformer(seed=model_seed)
    union = batch_size * world_size
    dataset: TensorDataset = make_regression(steps * union, data_seed)
    losses: list[float] = []
    initial = state(model)
    recorder = train_reference(
        model, dataset, [list(range(i * union, (i + 1) * union)) for i in range(steps)], lr, losses=losses
    )
    every = recorder.facts()  # every step, for the trajectory diagnosis of matches_reference
    return {
        "losses": losses,
        "initial": initial,
        "final": state(model),
        "steps": every["steps"],
        "start": every["start"],
        "momentum": MOMENTUM,
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
) -> TrainingReplays:
    """Trusted: the judge's hypotheses (hypotheses.toml) replayed from the reference's initial weights on
    each step's batches of every rank together."""
    union = batch_size * world_size
    dataset: TensorDataset = make_regression(steps * union, data_seed)
    schedules = {"correct": [list(range(i * union, (i + 1) * union)) for i in range(steps)]}
    return replay_all(lambda: make_transformer(seed=model_seed), dataset, schedules, lr, hypotheses)
