"""Rank side of exercise 14: the student's tensor-parallel MLP block, by hand and with
parallelize_module, under the grader's own count of collectives; the trusted reference and the replays.

Every rank builds the same full weights, input x and upstream gradient dy from the grading's seed, and
reports only what the student's code made of them. The trusted `reference` worker (one process that never
loads student code) builds them from the same seed and computes what the judge compares against:
- the unsplit block's output, input gradient and weight gradients;
- the judge's hypotheses: every rank's output and gradients when f and g do other things than
  identity/all-reduce (each rank's part computed from its block, all in that one process).

The collectives are counted by the shared dispatch-level observer (grader/rank/dispatched_collectives.py),
which sees the ops that every route reaches: `dist.all_reduce` and the process group (c10d::allreduce_), the
functional collectives and DTensor's redistributions (_c10d_functional::all_reduce). Forward and backward are
counted apart. A collective's elements are measured by the observer with subclasses' overrides off; a returned
tensor's type, shape, dtype and values are read only from tensors of the types the contract allows
(grader/engine/exact.py): a subclass would answer its own.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.tensor import DTensor, Replicate, Shard

from grader.engine import exact
from grader.engine.facts import ReplayRequest
from grader.engine.rank_runtime import RankContext
from grader.rank.dispatched_collectives import Collective, CollectiveObserver

BATCH, DIM, HIDDEN = 5, 8, 24  # x is (BATCH, DIM); Linear(DIM, h) -> GELU -> Linear(h, DIM), h = hidden(W)
MAX_ELEMENTS = 1 << 16  # of a reported tensor
KEYS = ("w1", "b1", "w2", "b2")


class CollectiveCounter:
    """Records every collective op dispatched while active: its kind and the elements this rank put in."""

    def __init__(self) -> None:
        self.calls: list[dict[str, Any]] = []
        self._observer = CollectiveObserver(self._seen)

    def _seen(self, call: Collective) -> None:
        self.calls.append({"kind": call.kind, "op": call.op, "numel": call.numel})

    def __enter__(self) -> CollectiveCounter:
        self._observer.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self._observer.__exit__(*exc)


def hidden(world_size: int) -> int:
    """The hidden width: HIDDEN where W divides it (W = 2, 3, 4, 6, 8...), else the next multiple of W."""
    return -(-HIDDEN // world_size) * world_size


def drawn(seed: int, world_size: int) -> dict[str, torch.Tensor]:
    """The full weights, the input and the upstream gradient, the same on every rank."""
    h = hidden(world_size)
    generator = torch.Generator().manual_seed(seed)

    def draw(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=generator)

    return {
        "w1": draw(h, DIM) / DIM**0.5,
        "b1": draw(h),
        "w2": draw(DIM, h) / h**0.5,
        "b2": draw(DIM),
        "x": draw(BATCH, DIM),
        "dy": draw(BATCH, DIM),
    }


def unsplit(full: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Trusted: the unsplit block's output and gradients (y, dx, and each weight's gradient)."""
    names = ("x", *KEYS)
    leaves = {k: full[k].clone().requires_grad_(True) for k in names}
    y = F.linear(F.gelu(F.linear(leaves["x"], leaves["w1"], leaves["b1"])), leaves["w2"], leaves["b2"])
    grads = torch.autograd.grad(y, [leaves[k] for k in names], full["dy"])
    return {"y": y.detach(), **{f"d{k}": grad for k, grad in zip(names, grads)}}


def reference(ctx: RankContext, data_seed: int, world: int) -> dict[str, Any]:
    """Trusted: the weights the W ranks are given and the unsplit block's numbers, from the ranks' seed in one
    process (`world`: the W of the ranks, which sets the hidden width)."""
    full = drawn(data_seed, world)
    return {"full": {k: full[k] for k in KEYS}, "unsplit": unsplit(full)}


def replays(ctx: RankContext, data_seed: int, world: int, hypotheses: dict[str, ReplayRequest]) -> dict[str, Any]:
    """Trusted: each hypothesis of hypotheses.toml (knobs of REPLAY_KNOBS) simulated on the W ranks' weights."""
    full = drawn(data_seed, world)
    return {"replays": {name: simulate(full, world, request["mistake"]) for name, request in hypotheses.items()}}


# What a replay may change in the split block (hypotheses.toml), and the correct split's value of each: what f
# (before the first layer) and g (after the second) do in forward and backward, and where the second bias is added
REPLAY_KNOBS: dict[str, str] = {
    "f_forward": "identity",
    "f_backward": "all_reduce",
    "g_forward": "all_reduce",
    "g_backward": "identity",
    # where b2 is added: "after" the reduction; before it on "every_rank", as b2 / W on every rank
    # ("every_rank_over_W"), or on rank 0 only ("rank0"); after it as b2 / W ("after_over_W"), or on rank 0 only
    # ("rank0_after")
    "bias": "after",
}


def _reduce(parts: list[torch.Tensor], rank: int, how: str) -> torch.Tensor:
    """What rank `rank` holds after a collective over every rank's part: its own (identity), the sum, the mean."""
    if how == "identity":
        return parts[rank]
    total = torch.stack(parts).sum(0)
    return total / len(parts) if how == "mean" else total


def _bias_before(bias: str, rank: int, world_size: int) -> float:
    """The multiple of b2 that rank `rank` adds to its partial output before the reduction (0: none)."""
    before = {"every_rank": 1.0, "every_rank_over_W": 1 / world_size, "rank0": float(rank == 0)}
    return before.get(bias, 0.0)


def _bias_after(bias: str, rank: int, world_size: int) -> float:
    """The multiple of b2 that rank `rank` adds to its output after the reduction (0: none)."""
    after = {"after": 1.0, "after_over_W": 1 / world_size, "rank0_after": float(rank == 0)}
    return after.get(bias, 0.0)


def simulate(full: dict[str, torch.Tensor], world_size: int, mistake: dict[str, str]) -> list[dict[str, Any]]:
    """Trusted replay: every rank's output and gradients when the block is split column-then-row over
    `world_size` ranks and f, g and the second bias do what `mistake` changes of REPLAY_KNOBS (f_forward,
    f_backward, g_forward, g_backward: identity, all_reduce or mean; bias: after the reduction, or before it on
    every rank, as b2 / W on every rank or on rank 0 only, or after it as b2 / W or on rank 0 only). Every rank's
    part is computed here, in one process; a shard that gets no gradient has none in the replay."""
    knobs = {**REPLAY_KNOBS, **mistake}
    unknown = set(knobs) - set(REPLAY_KNOBS)
    if unknown:
        raise ValueError(f"unknown replay knobs: {sorted(unknown)}")
    n = full["w1"].shape[0] // world_size
    parts = [slice(k * n, (k + 1) * n) for k in range(world_size)]
    dy = full["dy"]
    xs = [full["x"]] * world_size  # x is the same on every rank
    inputs = [_reduce(xs, k, knobs["f_forward"]).clone().requires_grad_(True) for k in range(world_size)]
    leaves = [
        {
            "w1": full["w1"][p].clone().requires_grad_(True),
            "b1": full["b1"][p].clone().requires_grad_(True),
            "w2": full["w2"][:, p].clone().requires_grad_(True),
            "b2": full["b2"].clone().requires_grad_(True),
        }
        for p in parts
    ]
    before = [_bias_before(knobs["bias"], k, world_size) for k in range(world_size)]
    partials = []
    for a, leaf, share in zip(inputs, leaves, before):
        partial = F.linear(F.gelu(F.linear(a, leaf["w1"], leaf["b1"])), leaf["w2"])
        partials.append(partial + share * leaf["b2"] if share else partial)
    outputs = [p.detach() for p in partials]
    upstream = _reduce([dy] * world_size, 0, knobs["g_backward"])  # dy is the same on every rank
    grads = []
    for a, leaf, partial, share in zip(inputs, leaves, partials, before):
        wanted = [a, leaf["w1"], leaf["b1"], leaf["w2"]] + ([leaf["b2"]] if share else [])
        grads.append(torch.autograd.grad(partial, wanted, upstream))
    replayed = []
    for rank, mine in enumerate(grads):
        after = _bias_after(knobs["bias"], rank, world_size)
        y = _reduce(outputs, rank, knobs["g_forward"])
        dx = _reduce([g[0] for g in grads], rank, knobs["f_backward"])
        shard_grads = {"w1": mine[1], "b1": mine[2], "w2": mine[3]}
        if after or before[rank]:  # b2 takes part in this rank's output: after g, or in its partial
            shard_grads["b2"] = after * dy.sum(0) if after else mine[4]
        replayed.append({"y": y + after * full["b2"] if after else y, "dx": dx, "grads": shard_grads})
    return replayed


def _tensor_facts(value: Any) -> dict[str, Any]:
    """What a returned value is, as plain facts; its values only for a float32 tensor of a sane size."""
    if not exact.tensor(value, "returned tensor", True):  # a subclass is refused, and reported as not a tensor
        return {"type": type(value).__name__}
    facts: dict[str, Any] = {
        "type": type(value).__name__,
        "shape": exact.shape(value),
        "dtype": str(exact.dtype(value)),
        "requires_grad": bool(value.requires_grad),
    }
    if isinstance(value, DTensor):
        facts["placements"] = [_placement(p) for p in value.placements]
    elif exact.dtype(value) == torch.float32 and exact.numel(value) <= MAX_ELEMENTS:
        facts["value"] = torch.Tensor(value.detach().cpu()).clone()  # a plain copy (an AsyncCollectiveTensor waited)
    return facts


def _entries(shards: Any) -> dict[Any, Any] | None:
    """shard_mlp's dict as dict's own methods read it (a dict subclass is refused: no entry); None for no dict."""
    return dict(exact.items(shards, "shard_mlp's dict")) if isinstance(shards, dict) else None


def _shard_facts(shards: Any) -> dict[str, Any]:
    entries = _entries(shards)
    if entries is None:
        return {"type": type(shards).__name__}
    return {
        "type": "dict",
        "keys": [str(k) for k in entries],
        "tensors": {k: _tensor_facts(entries.get(k)) for k in KEYS},
    }


def _leaf(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    return value.detach().to(device).clone().requires_grad_(True)


def _usable(y: Any) -> bool:
    """Whether the grader can go on to backward from this output (the judge says why not otherwise)."""
    return (
        exact.tensor(y, "returned tensor", True)
        and not isinstance(y, DTensor)
        and exact.shape(y) == [BATCH, DIM]
        and bool(y.requires_grad)
    )


def by_hand(ctx: RankContext, data_seed: int) -> dict[str, Any]:
    """The hand-written split: shard_mlp's shards, tp_mlp_forward's output, the input gradient and the
    shards' gradients after y.backward(dy), and the collectives of forward and of backward."""
    ctx.init_group()
    full = drawn(data_seed, ctx.world_size)
    shard_mlp, tp_mlp_forward = ctx.student("shard_mlp"), ctx.student("tp_mlp_forward")
    device = ctx.device
    given = {k: full[k].to(device).clone() for k in KEYS}
    shards = shard_mlp(ctx.rank, ctx.world_size, given["w1"], given["b1"], given["w2"], given["b2"])
    ctx.facts["shards"] = _shard_facts(shards)
    entries = _entries(shards)
    if entries is None or not all(exact.tensor(entries.get(k), "returned tensor") for k in KEYS):
        return {}
    leaves = {k: _leaf(entries[k], device) for k in KEYS}  # the grader's own leaves: their .grad is what backward gave
    if _forward_and_backward(ctx, lambda x: tp_mlp_forward(x, dict(leaves)), full):
        ctx.facts["grads"] = {k: _tensor_facts(leaves[k].grad) for k in KEYS}
    return {}


def _forward_and_backward(
    ctx: RankContext, forward: Callable[[torch.Tensor], Any], full: dict[str, torch.Tensor]
) -> bool:
    """Run `forward` on the drawn input, then backward from the drawn output gradient, recording the output,
    the input gradient and the collectives of each pass; False where the output cannot be differentiated."""
    x = _leaf(full["x"], ctx.device)
    counter = CollectiveCounter()
    with counter:
        y = forward(x)
    ctx.facts["forward"] = counter.calls
    ctx.facts["y"] = _tensor_facts(y)
    if not _usable(y):
        return False
    counter = CollectiveCounter()
    with counter:
        y.backward(full["dy"].to(ctx.device))
    ctx.facts["backward"] = counter.calls
    ctx.facts["dx"] = _tensor_facts(x.grad)
    return True


class MLP(nn.Module):
    """The block parallelize_mlp splits: fc1 = Linear(DIM, h), GELU, fc2 = Linear(h, DIM)."""

    def __init__(self, full: dict[str, torch.Tensor]) -> None:
        super().__init__()
        h = full["w1"].shape[0]
        self.fc1 = nn.Linear(DIM, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, DIM)
        with torch.no_grad():
            for name, value in (("fc1.weight", "w1"), ("fc1.bias", "b1"), ("fc2.weight", "w2"), ("fc2.bias", "b2")):
                self.get_parameter(name).copy_(full[value])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.act(self.fc1(x)))


PARAMETERS = {"fc1.weight": "w1", "fc1.bias": "b1", "fc2.weight": "w2", "fc2.bias": "b2"}


def _placement(placement: Any) -> str:
    """Shard(dim=0), Replicate(), Partial(): one spelling whatever str() gives in this torch."""
    if isinstance(placement, Shard):
        return f"Shard(dim={placement.dim})"
    if isinstance(placement, Replicate):
        return "Replicate()"
    return type(placement).__name__ + "()"


def _parameter_facts(value: Any) -> dict[str, Any]:
    """A parameter (or its gradient) after parallelize_mlp: plain or DTensor, placements, local shard."""
    if exact.tensor(value, "returned tensor", True) and isinstance(value, DTensor):
        return {
            "dtensor": True,
            "placements": [_placement(p) for p in value.placements],
            "local": _tensor_facts(exact.local(value, "returned tensor")),
        }
    return {"dtensor": False, "local": _tensor_facts(value)}


def parallelized(ctx: RankContext, data_seed: int) -> dict[str, Any]:
    """parallelize_mlp on the grader's block and a 1-D CPU mesh of the W ranks: each parameter's
    placements and local shard, the output, the input gradient, the local weight gradients, and the
    collectives of forward and of backward."""
    from torch.distributed.device_mesh import init_device_mesh

    ctx.init_group()
    full = drawn(data_seed, ctx.world_size)
    parallelize_mlp = ctx.student("parallelize_mlp")
    device = ctx.device
    mesh = init_device_mesh(device.type, (ctx.world_size,))
    model = MLP(full).to(device)
    returned = parallelize_mlp(model, mesh)
    ctx.facts["returned"] = type(returned).__name__
    if not isinstance(returned, nn.Module):
        return {}
    found = dict(returned.named_parameters())
    ctx.facts["parameters"] = {name: _parameter_facts(found[name]) for name in PARAMETERS if name in found}
    ctx.facts["names"] = sorted(found)
    if _forward_and_backward(ctx, returned, full):
        ctx.facts["grads"] = {
            name: _parameter_facts(found[name].grad)
            for name in PARAMETERS
            if name in found and found[name].grad is not None
        }
    return {}
