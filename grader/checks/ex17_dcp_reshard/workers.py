"""Rank side of exercise 17: the saving run at W ranks gives the student's save_checkpoint an FSDP2 model
and its AdamW optimizer holding the state of the trusted run's first steps; the resuming run at W/2 ranks
calls the student's resume on a fresh model and trains on. Both runs record what the grader's own
instrumentation saw (Watch): every call of dcp.save, dcp.async_save, dcp.load, torch.save and
torch.load, what each rank handed DCP to write or to fill (its DTensor shards, or whole tensors) and
the optimizers built. The trusted workers read the checkpoint folder (files, sizes, DCP's metadata),
train the uninterrupted single-process reference (whose weights at the save also give the judge every
parameter's name and shape) and replay the hypotheses. Nothing a check compares against comes back from
a rank: the state the saving run starts from is built on the ranks from the seeds, as an input only. Sizes, shards
and buffers are read only from objects of the types the contract allows (grader/engine/exact.py): a subclass would
answer its own.
"""

from __future__ import annotations

import os
import threading
from typing import Any, cast

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
import torch.distributed.checkpoint.state_dict_loader as dcp_loader
import torch.distributed.checkpoint.state_dict_saver as dcp_saver
import torch.nn.functional as F
from torch import nn
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner, DefaultSavePlanner
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard
from torch.distributed.fsdp._common_utils import clean_tensor_name
from torch.distributed.tensor import DTensor, distribute_tensor
from torch.utils.data import TensorDataset

from grader.checks.ex17_dcp_reshard.dcp_metadata import METADATA, read_keys
from grader.engine import exact
from grader.engine.facts import ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.patches import Patches
from grader.rank.training import ShardStepRecorder, TinyTransformer, make_regression, replay_all, train_reference

ADAMW = {"optimizer": "adamw"}  # the trusted loop's optimizer: AdamW(params, lr) with its defaults
STATE_KEYS = ("exp_avg", "exp_avg_sq")
ASYNC_THREAD = "AsyncCheckpointExecutor"  # the name of the thread in which dcp.async_save writes (torch 2.13)
DEPTH = 2  # blocks: every DTensor costs DCP and AdamW time per tensor, and two blocks show the units as well as more


def make_transformer(seed: int) -> TinyTransformer:
    torch.manual_seed(seed)
    return TinyTransformer(depth=DEPTH)


def step_samples(step: int, global_batch: int, world_size: int, rank: int) -> list[int]:
    """Rank r's samples at step s: the r-th of W equal slices of step s's global batch, whatever W is."""
    share = global_batch // world_size
    first = step * global_batch + rank * share
    return list(range(first, first + share))


SAVED, STATE = "state dict", "optimizer state"  # where a refused object was found, as the judge says it


def _tensors(value: Any, seen: dict[str, int]) -> None:
    """Count what a state dict holds: DTensors (this rank's shard: local elements), whole tensors of more
    than one element (a gathered copy), and nothing else."""
    if isinstance(value, torch.Tensor):
        if not exact.tensor(value, SAVED, True):
            return
        if isinstance(value, DTensor):
            local = exact.local(value, SAVED)
            seen["dtensors"] += 1
            seen["local"] += 0 if local is None else exact.numel(local)
        elif exact.numel(value) > 1:
            seen["whole"] += 1
            seen["whole_elements"] += exact.numel(value)
    elif isinstance(value, dict):
        for _, item in exact.items(value, SAVED):
            _tensors(item, seen)
    elif isinstance(value, (list, tuple)):
        for item in exact.values(value, SAVED):
            _tensors(item, seen)


def _contents(value: Any) -> dict[str, int]:
    seen = {"dtensors": 0, "local": 0, "whole": 0, "whole_elements": 0}
    _tensors(value, seen)
    return seen


class Watch:
    """The grader's own view of a rank's checkpoint calls: DCP's save and load (every alias a student may
    import), what its planners were given (after Stateful objects gave their state dicts), and
    torch.save / torch.load to or from a file."""

    def __init__(self, facts: dict[str, Any], model: nn.Module | None = None) -> None:
        self.events: list[dict[str, Any]] = []
        facts["events"] = self.events
        self._model = model  # the model resume was given: whether it was sharded when dcp.load ran
        self._patches = Patches()
        # dcp.async_save writes in a background thread; the grader holds that write until the student's code
        # touches the future it returned (to wait for it), or has returned without: the same on every run
        self.released = threading.Event()
        self.futures: list[Any] = []

    def install(self) -> Watch:
        for name in ("save", "async_save"):
            original = getattr(dcp_saver, name)
            self._patch([dcp, dcp_saver], name, self._called(original, f"dcp.{name}"))
        self._patch([dcp, dcp_loader], "load", self._called(dcp_loader.load, "dcp.load"))
        self._patch([DefaultSavePlanner], "set_up_planner", self._planned(DefaultSavePlanner.set_up_planner, "write"))
        self._patch([DefaultLoadPlanner], "set_up_planner", self._planned(DefaultLoadPlanner.set_up_planner, "fill"))
        self._patch([torch], "save", self._file(torch.save, "torch.save"))
        self._patch([torch], "load", self._file(torch.load, "torch.load"))
        self._patch([torch.optim.Optimizer], "__init__", self._optimizer(torch.optim.Optimizer.__init__))
        return self

    def _sharded(self) -> bool | None:
        return None if self._model is None else any(isinstance(p, DTensor) for p in self._model.parameters())

    def _optimizer(self, original: Any) -> Any:
        watch = self

        def __init__(optimizer: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> None:
            original(optimizer, *args, **kwargs)
            params = exact.optimizer_parameters(optimizer)
            watch.events.append(
                {"op": "optimizer", "dtensors": sum(isinstance(p, DTensor) for p in params), "params": len(params)}
            )

        return __init__

    def close(self) -> None:
        self._patches.restore()

    def _patch(self, owners: list[Any], name: str, replacement: Any) -> None:
        for owner in owners:
            self._patches.replace(owner, name, replacement)

    def _called(self, original: Any, what: str) -> Any:
        watch, events = self, self.events

        def call(*args: Any, **kwargs: Any) -> Any:
            if threading.current_thread().name.startswith(ASYNC_THREAD):  # async_save's write, held
                watch.released.wait()
                return original(*args, **kwargs)
            where = kwargs.get("checkpoint_id")
            writer = kwargs.get("storage_writer") or kwargs.get("storage_reader")
            if where is None and writer is not None:
                where = getattr(writer, "path", None) or getattr(writer, "checkpoint_id", None)
            event = {"op": what, "path": "" if where is None else str(where), "returned": False}
            if what == "dcp.load":
                event["model_sharded"] = watch._sharded()
            events.append(event)
            result = original(*args, **kwargs)
            event["returned"] = True
            if what == "dcp.async_save":
                watch.futures.append(result)
                return _Touched(result, watch.released)
            return result

        return call

    def unwaited(self) -> int:
        """How many async saves the student's code returned from without touching their future; then every
        held write goes on, and the grader waits for them all, so that the checkpoint is whole either way."""
        count = 0 if self.released.is_set() else len(self.futures)
        self.released.set()
        for future in self.futures:
            future.result()
        return count

    def _planned(self, original: Any, what: str) -> Any:
        events = self.events

        def set_up_planner(planner: Any, state_dict: Any, *args: Any, **kwargs: Any) -> Any:
            events.append({"op": what, **_contents(state_dict)})
            return original(planner, state_dict, *args, **kwargs)

        return set_up_planner

    def _file(self, original: Any, what: str) -> Any:
        events = self.events

        def call(*args: Any, **kwargs: Any) -> Any:
            saving = what == "torch.save"
            f = kwargs.get("f", args[1] if saving and len(args) > 1 else args[0] if not saving and args else None)
            if not isinstance(f, (str, os.PathLike)):  # DCP itself serializes small objects into BytesIO
                return original(*args, **kwargs)
            event: dict[str, Any] = {"op": what, "path": str(f), **_contents(None)}
            events.append(event)
            if saving:
                event.update(_contents(kwargs.get("obj", args[0] if args else None)))
                return original(*args, **kwargs)
            loaded = original(*args, **kwargs)
            event.update(_contents(loaded))  # a checkpoint's tensors, or metadata of none (Lightning's meta.pt)
            return loaded

        return call


class _Touched:
    """dcp.async_save's future, as the student's code gets it: any use of it (result, done, ...) lets the
    write the grader holds go on."""

    def __init__(self, future: Any, released: threading.Event) -> None:
        self._future, self._released = future, released

    def __getattr__(self, name: str) -> Any:
        self._released.set()
        return getattr(self._future, name)


def _mesh(ctx: RankContext) -> Any:
    return init_device_mesh("cuda" if ctx.backend == "nccl" else "cpu", (ctx.world_size,))


def _train(
    model: nn.Module, optimizer: torch.optim.Optimizer, dataset: TensorDataset, batches: list[list[int]], device: Any
) -> None:
    inputs, targets = dataset.tensors
    for indices in batches:
        optimizer.zero_grad()
        F.mse_loss(model(inputs[indices].to(device)), targets[indices].to(device)).backward()
        optimizer.step()


def _union(global_batch: int, steps: int) -> list[list[int]]:
    return [list(range(s * global_batch, (s + 1) * global_batch)) for s in range(steps)]


def _piece(tensor: Any, where: str) -> torch.Tensor:
    """This rank's elements of a tensor or DTensor (none, refused, of any other type)."""
    local = exact.local(tensor, where) if exact.tensor(tensor, where, True) else None
    return torch.zeros(0) if local is None else local.detach().cpu().reshape(-1).clone()


def _trained(
    global_batch: int, steps_before: int, steps_after: int, lr: float, data_seed: int, model_seed: int
) -> tuple[nn.Module, torch.optim.Optimizer]:
    """Trusted: the uninterrupted single-process AdamW run up to the save, `steps_before` global batches."""
    model = make_transformer(model_seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    dataset = make_regression(global_batch * (steps_before + steps_after), data_seed)
    _train(model, optimizer, dataset, _union(global_batch, steps_before), torch.device("cpu"))
    return model, optimizer


def save(
    ctx: RankContext,
    global_batch: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    path: str,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    """An FSDP2 model (fully_shard per block, then the root) on W ranks and its AdamW optimizer, holding the
    weights and the optimizer state of `steps_before` steps of training, then the student's save.

    The steps are the trusted single-process run's, taken on every rank alike and then sharded: W ranks
    training with FSDP2 reach the same state (to fp32 rounding), at a second of collectives on a small
    machine, and the checkpoint of exactly the reference's state leaves nothing to tolerate."""
    ctx.init_group()
    mesh = _mesh(ctx)
    trained, trained_optimizer = _trained(global_batch, steps_before, steps_after, lr, data_seed, model_seed)
    model = make_transformer(model_seed + 2000).to(ctx.device)
    for block in model.blocks:
        fully_shard(block, mesh=mesh)
    fully_shard(model, mesh=mesh)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr)
    whole = dict(trained.named_parameters())
    with torch.no_grad():
        for name, p in model.named_parameters():
            full = whole[clean_tensor_name(name)]
            cast(DTensor, p).to_local().copy_(_shard_of(full, p))
            buffers = trained_optimizer.state[full]
            optimizer.state[p] = {
                "step": buffers["step"].clone(),
                **{key: _sharded_like(buffers[key], p) for key in STATE_KEYS},
            }
    watch = Watch(ctx.facts).install()  # before the student's imports
    save_checkpoint = ctx.student("save_checkpoint")
    try:
        save_checkpoint(model, optimizer, path)
    finally:
        ctx.facts["async_unwaited"] = watch.unwaited()
        watch.close()
    ctx.facts["save_returned"] = True
    dist.barrier()  # the grader's: a rank left alone in a collective save meets it here, and is told at once
    return {}


def _shard_of(full: torch.Tensor, like: Any) -> torch.Tensor:
    """This rank's piece of `full` as the DTensor `like` holds it (Shard(0) on the mesh), with no message."""
    return distribute_tensor(
        full.detach().to(like.device), like.device_mesh, like.placements, src_data_rank=None
    ).to_local()


def _sharded_like(full: torch.Tensor, like: Any) -> DTensor:
    return distribute_tensor(full.detach().to(like.device), like.device_mesh, like.placements, src_data_rank=None)


def _state(optimizer: torch.optim.Optimizer, names: dict[int, str]) -> dict[str, Any]:
    """This rank's piece of each AdamW buffer, and the step, per parameter name."""
    held: dict[str, Any] = {}
    state = {id(p): dict(exact.items(buffers, STATE)) for p, buffers in exact.items(optimizer.state, STATE)}
    for group in exact.values(optimizer.param_groups, "optimizer"):
        entries = dict(exact.items(group, "optimizer"))
        for p in exact.values(entries.get("params", []), "optimizer"):
            name = names.get(id(p), "?")
            buffers = state.get(id(p), {})
            entry: dict[str, Any] = {key: _piece(buffers[key], STATE) for key in STATE_KEYS if key in buffers}
            step: Any = buffers.get("step")
            if type(step) in (int, float) or exact.tensor(step, STATE, True):
                entry["step"] = float(step)
            entry["lr"] = float(entries.get("lr", 0.0))
            held[name] = entry
    return held


def resume(
    ctx: RankContext,
    global_batch: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    path: str,
    data_seed: int,
    fresh_seed: int,
) -> dict[str, Any]:
    """The student's resume at this run's W (half the saving run's) on a fresh model, then the grader's
    training for `steps_after` steps, every step recorded as this rank's pieces. This run never gets the
    saving run's model seed: the weights saved cannot be rebuilt here, only loaded from the checkpoint."""
    ctx.init_group()
    mesh = _mesh(ctx)
    model = make_transformer(fresh_seed).to(ctx.device)  # not the trained weights: only a load restores
    watch = Watch(ctx.facts, model).install()  # before the student's imports
    resume_ = ctx.student("resume")
    try:
        returned = resume_(model, mesh, lr, path)
    finally:
        watch.close()
        ctx.facts["sharded_at_end"] = watch._sharded()
    if not (
        isinstance(returned, tuple)
        and len(returned) == 2
        and isinstance(returned[0], nn.Module)
        and isinstance(returned[1], torch.optim.Optimizer)
    ):
        ctx.facts["returned"] = repr(returned)[:200]
        return {}
    model, optimizer = returned
    names = {id(p): clean_tensor_name(name) for name, p in model.named_parameters()}
    ctx.facts["sharded"] = sorted(name for name, p in model.named_parameters() if isinstance(p, DTensor))
    ctx.facts["loaded"] = {names[id(p)]: _piece(p, "model") for p in model.parameters()}
    held = {id(p) for p in exact.optimizer_parameters(optimizer)}
    ctx.facts["stale_optimizer"] = sorted(name for name, p in model.named_parameters() if id(p) not in held)
    ctx.facts["state"] = _state(optimizer, names)
    dataset = make_regression(global_batch * (steps_before + steps_after), data_seed)
    batches = [
        step_samples(s, global_batch, ctx.world_size, ctx.rank) for s in range(steps_before, steps_before + steps_after)
    ]
    recorder = ShardStepRecorder(model)
    try:
        _train(model, optimizer, dataset, batches, ctx.device)
    finally:
        recorder.close()
    ctx.facts["steps"] = recorder.steps
    return {}


def inspect_checkpoint(ctx: RankContext, path: str) -> dict[str, Any]:
    """Trusted: the files in the checkpoint folder with their sizes, and what DCP's metadata lists."""
    if not os.path.exists(path):
        return {"exists": False}
    if not os.path.isdir(path):
        return {"exists": True, "folder": False, "size": os.path.getsize(path)}
    files = {}
    for folder, _, names in os.walk(path):
        for name in names:
            full = os.path.join(folder, name)
            files[os.path.relpath(full, path)] = os.lstat(full).st_size  # a link's own size: never followed
    facts: dict[str, Any] = {"exists": True, "folder": True, "files": files, "keys": []}
    if METADATA in files:  # read without DCP's reader, which unpickles whatever the file names (dcp_metadata.py)
        facts["keys"], problem = read_keys(path)
        if problem:
            facts["problem"] = problem
    return facts


def reference(
    ctx: RankContext, global_batch: int, steps_before: int, steps_after: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted, one process: uninterrupted AdamW training on every step's global batch; the weights and
    the AdamW state at the save (after `steps_before` steps), and every step."""
    steps = steps_before + steps_after
    dataset = make_regression(global_batch * steps, data_seed)
    facts = train_reference(
        make_transformer(model_seed), dataset, _union(global_batch, steps), lr, mistake=ADAMW
    ).facts()
    model, optimizer = _trained(global_batch, steps_before, steps_after, lr, data_seed, model_seed)
    names = {id(p): name for name, p in model.named_parameters()}
    facts["saved"] = {name: p.detach().clone() for name, p in model.named_parameters()}
    facts["saved_state"] = {
        names[id(p)]: {
            **{key: buffers[key].detach().clone() for key in STATE_KEYS},
            "step": float(buffers["step"]),
        }
        for p, buffers in optimizer.state.items()
    }
    return facts


def replays(
    ctx: RankContext,
    global_batch: int,
    steps_before: int,
    steps_after: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: the judge's hypotheses (hypotheses.toml) replayed on the uninterrupted run's samples, with
    AdamW as the reference's optimizer."""
    steps = steps_before + steps_after
    dataset = make_regression(global_batch * steps, data_seed)
    with_adamw: dict[str, ReplayRequest] = {
        name: {"schedule": hypothesis["schedule"], "mistake": {**ADAMW, **hypothesis["mistake"]}}
        for name, hypothesis in hypotheses.items()
    }
    schedules = {"correct": _union(global_batch, steps)}
    return replay_all(lambda: make_transformer(model_seed), dataset, schedules, lr, with_adamw)
