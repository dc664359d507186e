"""Rank side of exercise 13: run the student's partition on drawn size lists and the student's ZeRO-1
loop under the grader's instrumentation; trusted workers for the one-process AdamW reference and for
the replays of the judge's hypotheses (a simulation of W ranks in one process).

What is recorded on each rank, by the grader's own hooks (never from what the code reports):
- the parameters at every training forward pass (the first is the start, after the initial
  broadcast; the n-th is the weights after step n-1) and when train_zero1 returns;
- at the first optimizer step after each forward pass, the gradient of every parameter;
- after each optimizer step, the parameters that optimizer holds (what the owner computed);
- every optimizer the student's code stepped (found by the global step hooks) and, at the end, the
  numel of its state tensors (exp_avg, exp_avg_sq; scalars such as `step` left out), shared tensors
  counted once;
- the bytes of every collective, with the forward pass it followed, seen by the shared dispatch-level
  observer (grader/rank/dispatched_collectives.py): the process group's ops (c10d::allreduce_, broadcast_,
  allgather_...) that every route reaches, dist.* and ZeroRedundancyOptimizer from Python and DDP's reducer
  from C++, and the functional collectives.
"""

from __future__ import annotations

import operator
import random
import sys
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import TensorDataset

from grader.engine import exact
from grader.engine.facts import ReplayRequest
from grader.engine.rank_runtime import RankContext
from grader.rank.dispatched_collectives import Collective, CollectiveObserver
from grader.rank.training import FEATURES, make_regression, state, train_reference


class ZeroNet(nn.Module):
    """Four Linear layers of unequal sizes (8 parameters: 768 elements down to 1), so that a partition
    by count is unbalanced by size."""

    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(FEATURES, 32)
        self.wide = nn.Linear(32, 24)
        self.narrow = nn.Linear(24, 8)
        self.out = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.tanh(self.inp(x))
        x = torch.tanh(self.wide(x))
        x = torch.tanh(self.narrow(x))
        return self.out(x)


def make_zero_model(seed: int) -> ZeroNet:
    torch.manual_seed(seed)
    return ZeroNet()


def rank_indices(world_size: int, rank: int, steps: int, batch_size: int) -> list[int]:
    """The dataset rows of `rank`'s shard: at step s, rows (s*W + rank)*b .. +b."""
    return [(s * world_size + rank) * batch_size + j for s in range(steps) for j in range(batch_size)]


def union_steps(world_size: int, steps: int, batch_size: int) -> list[list[int]]:
    return [list(range(s * world_size * batch_size, (s + 1) * world_size * batch_size)) for s in range(steps)]


def size_lists(world_size: int, seed: int) -> list[list[int]]:
    """The lists partition_parameters is asked about: the model's own sizes, lists where one large
    parameter is followed by W-1 small ones (a partition by index puts every large one on rank 0),
    and shuffled lists of mixed sizes."""
    draw = random.Random(seed)
    model_sizes = [p.numel() for p in ZeroNet().parameters()]
    lists = [model_sizes]
    for repeats in (3, 4):
        lists.append(
            [
                draw.randint(400, 1000) if i % world_size == 0 else draw.randint(1, 20)
                for i in range(repeats * world_size)
            ]
        )
    for length in (world_size + 3, 3 * world_size + 1):
        lists.append([draw.choice((1, 8, 64, 300, 1024)) * draw.randint(1, 4) for _ in range(length)])
    return lists


def _index(value: Any) -> int | None:
    """An integer index (an int, a numpy integer, an integer tensor of one element), else None."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)
    except (TypeError, ValueError, RuntimeError):
        return None


def _plain(value: Any) -> dict[str, Any]:
    """A partition as facts the judge can always read: a list of lists of ints, else a short repr."""
    if isinstance(value, (list, tuple)) and all(
        isinstance(shard, (list, tuple)) and all(_index(i) is not None for i in shard) for shard in value
    ):
        return {"shards": [[_index(i) for i in shard] for shard in value]}
    text = repr(value) if type(value) in (list, tuple, dict, int, str, type(None)) else f"a {type(value).__name__}"
    return {"other": f"{type(value).__name__}: {text[:200]}"}


def _is_zero_wrapper(optimizer: torch.optim.Optimizer) -> bool:
    """A ZeroRedundancyOptimizer, whose module is only imported (1 s of imports) if the student's code did."""
    module = sys.modules.get("torch.distributed.optim.zero_redundancy_optimizer")
    return module is not None and isinstance(optimizer, module.ZeroRedundancyOptimizer)


class ZeroRecorder:
    def __init__(self, model: nn.Module) -> None:
        self.model = model
        self.names = {id(p): name for name, p in model.named_parameters()}
        self.snapshots: list[dict[str, torch.Tensor]] = []  # at each training forward
        self.grads: dict[int, dict[str, torch.Tensor]] = {}  # forward number -> grads at its first step
        self.no_grad: dict[int, list[str]] = {}
        self.owned: dict[int, dict[str, torch.Tensor]] = {}  # forward number -> after-step values of stepped params
        self.optimizers: dict[int, torch.optim.Optimizer] = {}
        self.steps = 0
        self.comm: list[dict[str, Any]] = []
        self._handles = [
            model.register_forward_pre_hook(self._forward),
            register_optimizer_step_pre_hook(self._before),
            register_optimizer_step_post_hook(self._after),
        ]
        self._collectives = CollectiveObserver(self._collective)
        self._collectives.__enter__()

    def _collective(self, call: Collective) -> None:
        """Its name as the process group's method spells it (allreduce), its whole buffer, the forward it followed."""
        self.comm.append({"op": call.name, "bytes": call.largest_bytes, "after": len(self.snapshots)})

    def _forward(self, module: nn.Module, _: Any) -> None:
        if torch.is_grad_enabled():
            self.snapshots.append(state_of(self.model))

    def _before(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if _is_zero_wrapper(optimizer):
            return  # a wrapper: its local optimizer (`.optim`) is stepped, and seen, inside its step
        self.optimizers.setdefault(id(optimizer), optimizer)
        self.steps += 1
        at = len(self.snapshots)
        if at not in self.grads:
            named = [(n, p) for n, p in self.model.named_parameters() if exact.tensor(p, "model")]
            self.grads[at] = {
                n: (p.grad.detach().clone() if exact.tensor(p.grad, "model") else torch.zeros_like(p.detach()))
                for n, p in named
            }
            self.no_grad[at] = [n for n, p in named if p.grad is None]

    def _after(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        if _is_zero_wrapper(optimizer):
            return
        values = self.owned.setdefault(len(self.snapshots), {})
        for p in exact.optimizer_parameters(optimizer):
            values[self.names.get(id(p), "another tensor")] = p.detach().clone()

    def close(self) -> None:
        self._collectives.__exit__(None, None, None)
        for handle in self._handles:
            handle.remove()

    def optimizer_facts(self) -> list[dict[str, Any]]:
        """Each optimizer stepped: its class, the parameters it holds state for (by name) and its state's numel.
        A wrapper that lists every parameter and steps an optimizer of its shard inside its own step (fairscale's
        OSS) holds the state of none: what a rank holds is where the state lives, not what a param group lists."""
        facts, seen = [], set()
        for optimizer in self.optimizers.values():
            state = {id(p): exact.items(buffers, STATE) for p, buffers in exact.items(optimizer.state, STATE)}
            held = [
                self.names.get(id(p), "another tensor")
                for p in exact.optimizer_parameters(optimizer)
                if any(exact.tensor(v, STATE) for _, v in state.get(id(p), []))
            ]
            numel = 0
            for buffers in state.values():
                for _, value in buffers:
                    if exact.tensor(value, STATE) and exact.dim(value) > 0:
                        key = (value.untyped_storage().data_ptr(), value.storage_offset(), exact.numel(value))
                        if key not in seen:
                            seen.add(key)
                            numel += exact.numel(value)
            facts.append({"type": type(optimizer).__name__, "params": held, "state_numel": numel})
        return facts


STATE = "optimizer state"


def state_of(model: nn.Module) -> dict[str, torch.Tensor]:
    return {name: p.detach().clone() for name, p in model.named_parameters() if exact.tensor(p, "model")}


def train(
    ctx: RankContext,
    steps: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    sizes_seed: int,
) -> dict[str, Any]:
    ctx.init_group()
    partition = ctx.student("partition_parameters")
    ctx.facts["partitions"] = []
    for sizes in size_lists(ctx.world_size, sizes_seed):
        ctx.facts["partitions"].append({"sizes": sizes, **_plain(partition(list(sizes), ctx.world_size))})
    ctx.facts["partitions_done"] = True
    # Ranks that disagree on the owners call mismatched collectives (broadcasts from different sources),
    # which wait until the deadline: compare the partitions first, by the grader's own collective.
    everyone: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(everyone, ctx.facts["partitions"])
    if any(other != everyone[0] for other in everyone):
        ctx.facts["partitions_differ"] = True
        return {}
    train_zero1 = ctx.student("train_zero1")
    model = make_zero_model(seed=model_seed + ctx.rank)  # different on purpose: the initial broadcast aligns them
    initial = state(model)
    data = make_regression(ctx.world_size * steps * batch_size, data_seed)
    rows = rank_indices(ctx.world_size, ctx.rank, steps, batch_size)
    dataset = TensorDataset(data.tensors[0][rows], data.tensors[1][rows])
    recorder = ZeroRecorder(model)
    try:
        train_zero1(ctx.rank, ctx.world_size, model, dataset, steps, batch_size, lr)
    finally:
        recorder.close()
    ctx.facts["training"] = {
        "initial": initial,
        "snapshots": [*recorder.snapshots, state_of(model)],
        "grads": {str(k): v for k, v in recorder.grads.items()},
        "no_grad": {str(k): v for k, v in recorder.no_grad.items()},
        "owned": {str(k): v for k, v in recorder.owned.items()},
        "optimizers": recorder.optimizer_facts(),
        "optimizer_steps": recorder.steps,
        "comm": recorder.comm,
        "sizes": {name: p.numel() for name, p in model.named_parameters()},
    }
    return {}


def reference(
    ctx: RankContext, world_size: int, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int
) -> dict[str, Any]:
    """Trusted: one process, AdamW (default betas, eps, weight_decay 0.01) on the full model from rank 0's
    initial weights, the union of the ranks' batches per step; the weights after every step, and the
    smallest element of the first step's gradient."""
    model = make_zero_model(seed=model_seed)
    data = make_regression(world_size * steps * batch_size, data_seed)
    recorder = train_reference(
        model, data, union_steps(world_size, steps, batch_size), lr, mistake={"optimizer": "adamw"}
    )
    return {
        "start": recorder.start,
        "steps": [{"grads": s["grads"], "params": s["params"]} for s in recorder.steps],
        "smallest_gradient": min(float(g.abs().min()) for g in recorder.steps[0]["grads"].values()),
    }


# What a replay may change in the simulated ZeRO-1 loop, and the correct loop's value of each
REPLAY_KNOBS: dict[str, Any] = {
    "reduce": "avg",  # "avg", "sum" (the sum over ranks) or "none" (each rank's own gradient at the step)
    "optimizer": "adamw",  # or "adam" (no weight decay)
    "lr_scale": 1.0,
    "zero": "all",  # which gradients are cleared before each step: "all", "owned" (optimizer.zero_grad()), "none"
    "send": "owner",  # where each parameter's new value comes from: "owner", "rank0", "none" (not sent)
    "beta1": 0.9,  # the optimizer's betas and weight decay: AdamW's defaults, which the exercise asks for
    "beta2": 0.999,
    "weight_decay": 0.01,  # AdamW's default (Adam's is 0, which the "adam" optimizer knob keeps)
}


def _grad(p: torch.Tensor) -> torch.Tensor:
    assert p.grad is not None  # every parameter of ZeroNet takes part in the loss
    return p.grad.detach()


def simulate(
    world_size: int,
    steps: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    owned: list[list[str]],
    knobs: dict[str, Any],
) -> list[list[dict[str, Any]]]:
    """W ranks' ZeRO-1 loop in one process, from rank 0's initial weights, each rank owning `owned[r]`
    (names); per rank, per step, the gradient the step used and the weights after the exchange."""
    knobs = {**REPLAY_KNOBS, **knobs}
    unknown = set(knobs) - set(REPLAY_KNOBS)
    if unknown:
        raise ValueError(f"unknown replay knobs: {sorted(unknown)}")
    data = make_regression(world_size * steps * batch_size, data_seed)
    inputs, targets = data.tensors
    models = [make_zero_model(seed=model_seed) for _ in range(world_size)]
    named = [dict(m.named_parameters()) for m in models]
    names = list(named[0])
    owner: dict[str, int] = {}
    for r in range(world_size):
        for name in owned[r]:
            owner.setdefault(name, r)
    make = torch.optim.AdamW if knobs["optimizer"] == "adamw" else torch.optim.Adam
    optimizers = [
        make(
            [named[r][n] for n in names if n in owned[r]],
            lr=lr * knobs["lr_scale"],
            betas=(knobs["beta1"], knobs["beta2"]),
            **({"weight_decay": knobs["weight_decay"]} if knobs["optimizer"] == "adamw" else {}),
        )
        if owned[r]
        else None
        for r in range(world_size)
    ]
    trajectory: list[list[dict[str, Any]]] = [[] for _ in range(world_size)]
    for s in range(steps):
        for r in range(world_size):
            for n in names:
                if knobs["zero"] == "all" or (knobs["zero"] == "owned" and n in owned[r]):
                    named[r][n].grad = None
            rows = [(s * world_size + r) * batch_size + j for j in range(batch_size)]
            F.mse_loss(models[r](inputs[rows]), targets[rows]).backward()
        local = [{n: _grad(named[r][n]) for n in names} for r in range(world_size)]
        if knobs["reduce"] != "none":
            for n in names:
                total = torch.stack([local[r][n] for r in range(world_size)]).sum(dim=0)
                for r in range(world_size):
                    named[r][n].grad = total / world_size if knobs["reduce"] == "avg" else total.clone()
        grads = [{n: _grad(named[r][n]).clone() for n in names} for r in range(world_size)]
        for optimizer in optimizers:
            if optimizer is not None:
                optimizer.step()
        with torch.no_grad():
            for n in names:
                source = owner.get(n) if knobs["send"] == "owner" else 0 if knobs["send"] == "rank0" else None
                if source is None:
                    continue
                for r in range(world_size):
                    if r != source:
                        named[r][n].copy_(named[source][n])
        for r in range(world_size):
            trajectory[r].append({"grads": grads[r], "params": state_of(models[r])})
    return trajectory


def replays(
    ctx: RankContext,
    world_size: int,
    steps: int,
    batch_size: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    owned: list[list[str]],
    hypotheses: dict[str, ReplayRequest],
) -> dict[str, Any]:
    """Trusted: each hypothesis of hypotheses.toml (knobs of REPLAY_KNOBS) simulated from rank 0's initial
    weights on the same samples, with the ownership the run showed."""
    return {
        "replays": {
            name: simulate(world_size, steps, batch_size, lr, data_seed, model_seed, owned, request["mistake"])
            for name, request in hypotheses.items()
        }
    }
