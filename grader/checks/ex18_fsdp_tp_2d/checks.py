"""Judging exercise 18 from what the grader's own instrumentation saw on the ranks (workers.py): every
parameter as each rank holds it (its mesh, the ranks of that mesh, the placement on each dimension, its local
shape), the FSDP units, the samples each rank fed at each step, and the numbers against one trusted process
training on the union of the dp groups' batches (and replays of the mistakes that change that loop). Every
parameter's name and whole shape, what a rank's shard is measured against, comes from that trusted process."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from grader.checks.ex18_fsdp_tp_2d.facts import REFERENCE, REPLAYS, TP, TRAIN, WORKLOAD, Reference, Replayed, Train
from grader.engine.facts import ReplayRequest
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.tolerance import relative_difference
from grader.judge.wording import article

# BATCH: the global batch of a step, 6 per dp group: a loss summed over 6 samples is not the lr scaled by W = 4
STEPS, BATCH, LR = WORKLOAD.steps, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
TOLERANCE = 1e-5  # fp32: the same sums in another order (measured: about 6e-8 of the scale)
PLAN = {"up.weight": "Shard(dim=0)", "up.bias": "Shard(dim=0)", "down.weight": "Shard(dim=1)"}
FSDP = "Shard(dim=0)"  # FSDP2's placement on the mesh it is given
# on tp, the other style's placement: RowwiseParallel on up (weight Shard(1), bias Replicate), Colwise on down
SWAPPED = {
    "up.weight": "Shard(dim=1)",
    "up.bias": "Replicate()",
    "down.weight": "Shard(dim=0)",
    "down.bias": "Shard(dim=0)",
}
_HYPOTHESES = replay.load(__package__ or "")  # hypotheses.toml: the causes matches_reference can name


# What every check but the final weights' reads: complete once every rank took every step, even where train failed
# after them (a full state dict gathered on rank 0 alone, say) — that failure costs matches_reference alone.
TRAINING_FACTS: Final = ("rows", "losses", "steps", "parameters", "units")


def _every_step(ranks: list[Train]) -> str | None:
    if all(f["steps"] == STEPS and len(f["rows"]) >= STEPS for f in ranks):
        return f"the {STEPS} optimizer steps every rank took"
    return None


def _arguments(ctx: CheckContext) -> dict[str, Any]:
    return {**WORKLOAD.arguments(), **ctx.seeds("data", "model")}


def _ranks(ctx: CheckContext) -> list[Train]:
    return ctx.facts_until_failure(TRAIN, TRAINING_FACTS, _every_step, **_arguments(ctx))


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(REFERENCE, dp=ctx.world_size // TP, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    return facts


def _complete(ctx: CheckContext, rank: int, facts: Train, shapes: dict[str, list[int]]) -> None:
    """Fail unless the rank reported every parameter of the model (by the trusted names) once."""
    names = sorted(p["name"] for p in facts["parameters"])
    if names != sorted(shapes):
        missing = sorted(set(shapes) - set(names))
        raise ctx.fail(
            f"rank {rank} holds {len(names)} parameters, not the model's {len(shapes)}"
            + (f" ({', '.join(missing[:3])} missing)" if missing else "")
            + ": parallelize the model given, keeping its parameters",
            hint=HintName("fsdp"),
        )


def _tp_placement(name: str) -> str:
    """The placement tensor parallelism gives a block's parameter on "tp" ("" for one it leaves alone)."""
    if not name.startswith("blocks."):
        return ""
    local = ".".join(name.split(".")[2:])
    return PLAN.get(local, "Replicate()" if local == "down.bias" else "")


def _groups(mesh: list[Any], dim: int) -> list[list[int]]:
    """The groups of ranks that communicate along one dimension of a 2D mesh (its rows or its columns)."""
    return [list(row) for row in (mesh if dim == 1 else list(map(list, zip(*mesh))))]


def _chunk(shape: list[int], placement: str, parts: int, index: int) -> list[int]:
    """The shape of the index-th of `parts` pieces of `shape` under a placement, cut as torch.chunk (and so FSDP2
    and DTensor) cut it: ceil-sized pieces, the last ones short or empty."""
    if not placement.startswith("Shard(dim="):
        return list(shape)
    dim = int(placement[len("Shard(dim=") : -1])
    size = -(-shape[dim] // parts)
    return [max(0, min(size, n - index * size)) if d == dim else n for d, n in enumerate(shape)]


def _local(mesh: list[Any], placements: list[str], full: list[int], rank: int) -> list[int]:
    """The local shape a rank holds of a parameter of this mesh and these placements: TP's placement on the
    mesh's last dimension first, then FSDP's on the first (FSDP2 shards TP's local piece)."""
    grid = np.asarray(mesh)
    where = [int(i) for i in np.argwhere(grid == rank)[0]]
    shape = list(full)
    for dim in reversed(range(grid.ndim)):
        shape = _chunk(shape, placements[dim], grid.shape[dim], where[dim])
    return shape


# a parameter as a mistake builds it: each rank's mesh, and the placements
Layout = tuple[Callable[[int], list[Any]], list[str]]


def _held(ranks: list[Train], names: list[str]) -> dict[str, list[dict[str, Any] | None]]:
    """What every rank holds of these parameters: its mesh, placements and local shape, by name, in rank order."""
    held: dict[str, list[dict[str, Any] | None]] = {}
    for name in names:
        found = [next((p for p in facts["parameters"] if p["name"] == name), None) for facts in ranks]
        held[name] = [None if p is None else {k: p.get(k) for k in ("mesh", "placements", "local")} for p in found]
    return held


def _built(layouts: dict[str, Layout], shapes: dict[str, list[int]], world: int) -> dict[str, list[dict[str, Any]]]:
    """What a mistake builds of these parameters, as `_held` reads a run: by name, in rank order."""
    return {
        name: [
            {"mesh": mesh(rank), "placements": placements, "local": _local(mesh(rank), placements, shapes[name], rank)}
            for rank in range(world)
        ]
        for name, (mesh, placements) in layouts.items()
    }


def _tp_group(rank: int) -> list[int]:
    return list(range(rank - rank % TP, rank - rank % TP + TP))


def _one(proofs: list[Proven | None]) -> Proven | None:
    """The hypothesis proven, when exactly one is (at W=2 the world is a tp group: two that build the same
    structure cannot be told apart, and neither is named)."""
    proven = [proof for proof in proofs if proof is not None]
    return proven[0] if len(proven) == 1 else None


def _root_sharded_over(ranks: list[Train], shapes: dict[str, list[int]], world: int) -> Proven | None:
    """FSDP of the root given the whole world as one 1D mesh, or the rank's tp group: each built from the
    model's root parameters (those of no block) and compared, mesh, placements and local shape, on every rank."""
    root = [name for name in shapes if not name.startswith("blocks.")]
    observed = _held(ranks, root)

    def over(mesh: Callable[[int], list[Any]]) -> dict[str, list[dict[str, Any]]]:
        return _built({name: (mesh, [FSDP]) for name in root}, shapes, world)

    return _one(
        [
            structural(Cause("fsdp_over_world"), over(lambda rank: list(range(world))), observed),
            structural(Cause("fsdp_on_tp"), over(_tp_group), observed),
        ]
    )


def _dims_swapped(ranks: list[Train], shapes: dict[str, list[int]], world: int) -> Proven | None:
    """The mesh's dimensions swapped, built from the reference's plan: every block's TP parameter on the
    transposed (dp, tp) mesh (FSDP over a tp group, TP over a dp group), every other parameter sharded by FSDP
    over the rank's tp group; compared, mesh, placements and local shape, for every parameter on every rank."""
    swapped = np.arange(world).reshape(world // TP, TP).T.tolist()
    layouts: dict[str, Layout] = {
        name: ((lambda rank: swapped), [FSDP, _tp_placement(name)]) if _tp_placement(name) else (_tp_group, [FSDP])
        for name in shapes
    }
    return structural(Cause("mesh_dims_swapped"), _built(layouts, shapes, world), _held(ranks, list(shapes)))


def _plan_swapped(ranks: list[Train], shapes: dict[str, list[int]], world: int) -> Proven | None:
    """ColwiseParallel and RowwiseParallel swapped, built from the reference: every block's TP parameter on the
    (dp, tp) mesh with the other style's placement on tp, every other parameter sharded by FSDP over the rank's
    dp group as the reference shards it; compared, mesh, placements and local shape, for every parameter on every
    rank. (In torch 2.13 that plan fails in forward first: a unit test holds this replay to its structure.)"""
    mesh = np.arange(world).reshape(world // TP, TP).tolist()
    layouts: dict[str, Layout] = {
        name: (
            ((lambda rank: mesh), [FSDP, SWAPPED[".".join(name.split(".")[2:])]])
            if _tp_placement(name)
            else ((lambda rank: list(range(rank % TP, world, TP))), [FSDP])
        )
        for name in shapes
    }
    return structural(Cause("colwise_rowwise_swapped"), _built(layouts, shapes, world), _held(ranks, list(shapes)))


@check("placements_2d")
def placements_2d(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    shapes = _reference(ctx)["shapes"]
    world = ctx.world_size
    for rank, facts in enumerate(ranks):
        _complete(ctx, rank, facts, shapes)
        held = facts["parameters"]
        plain = [p["name"] for p in held if not p["dtensor"]]
        if plain:
            root = {n.split(".")[0] for n in plain} <= {"inp", "out"}
            raise ctx.fail(
                f"rank {rank} holds {', '.join(plain[:4])}{' ...' if len(plain) > 4 else ''} as plain tensors, whole"
                + (
                    ": the root was never sharded (fully_shard(model, mesh=mesh['dp']) after the blocks)"
                    if root
                    else ""
                )
                + "; every parameter is a DTensor, sharded over dp by FSDP",
                hint=HintName("fsdp"),
            )
        dp_group = sorted(range(rank % TP, world, TP))
        for p in sorted(held, key=lambda p: not _tp_placement(p["name"])):  # the blocks' TP weights first
            want_tp = _tp_placement(p["name"])
            dims, placements, mesh = p.get("dims"), p.get("placements"), p.get("mesh")
            if dims is None or placements is None or mesh is None:
                raise ctx.fail(f"rank {rank} reported {p['name']} as a DTensor without its mesh and placements")
            named = f" named {tuple(dims)}" if any(dims) else ""  # a mesh made without names has none to show
            said = (
                f"{p['name']} on rank {rank} is a DTensor on a mesh of ranks {mesh}{named}, placements "
                f"({', '.join(placements)})"
            )
            if not want_tp:
                if placements != [FSDP] or sorted(np.ravel(mesh).tolist()) != dp_group:
                    root = not p["name"].startswith("blocks.")  # the proof is over the root's parameters
                    proven = _root_sharded_over(ranks, shapes, world) if root else None
                    named_cause = {
                        "fsdp_over_world": f": FSDP shards it over all {world} ranks, as one 1D mesh",
                        "fsdp_on_tp": f": FSDP shards it over its tp group {_tp_group(rank)}: fully_shard got the tp "
                        "dimension",
                    }
                    raise ctx.fail(
                        f"{said}"
                        + (named_cause[proven.cause] if proven else "")
                        + f"; it should be Shard(dim=0) over its dp group {dp_group} only "
                        "(fully_shard(..., mesh=mesh['dp']))",
                        hint=HintName("fsdp"),
                        proven=proven,
                    )
                continue
            if len(placements) != 2:
                kind = (
                    "only sharded by FSDP, never split by TP"
                    if placements == ["Shard(dim=0)"]
                    else f"on {article(str(len(placements)))}D mesh"
                )
                raise ctx.fail(
                    f"{said}: {kind}. A block's Linear weights live on the 2D (dp, tp) mesh: TP on mesh['tp'] "
                    "(parallelize_module on each block), then FSDP on mesh['dp']",
                    hint=HintName("tp_plan"),
                )
            if np.shape(mesh) != (world // TP, TP):
                raise ctx.fail(
                    f"{said}: its mesh has shape {np.shape(mesh)}, not (dp, tp) = ({world // TP}, {TP}): "
                    f"init_device_mesh(device_type, (world_size // {TP}, {TP}), mesh_dim_names=('dp', 'tp'))",
                    hint=HintName("mesh"),
                )
            fsdp_groups, tp_groups = _groups(mesh, 0), _groups(mesh, 1)
            if placements[0] != "Shard(dim=0)" or rank not in [r for g in fsdp_groups for r in g]:
                raise ctx.fail(f"{said}: the first dimension should be FSDP's Shard(dim=0)", hint=HintName("fsdp"))
            mine = next(g for g in fsdp_groups if rank in g)
            if sorted(mine) != dp_group:
                proven = _dims_swapped(ranks, shapes, world)
                raise ctx.fail(
                    f"{said}: FSDP shards it over ranks {mine} (mesh dimension {dims[0]!r}) and TP splits it over "
                    f"{next(g for g in tp_groups if rank in g)}"
                    + (": the mesh dimensions are swapped" if proven else f", where its dp group is {dp_group}")
                    + f". FSDP goes on mesh['dp'] (rank {rank}'s dp group is {dp_group}), TP on mesh['tp'] "
                    "(ranks 2d and 2d+1)",
                    hint=HintName("mesh"),
                    proven=proven,
                )
            if placements[1] != want_tp:
                proven = _plan_swapped(ranks, shapes, world)
                raise ctx.fail(
                    f"{said}: on tp it is {placements[1]}, where {want_tp} was wanted"
                    + (
                        ": ColwiseParallel and RowwiseParallel are swapped (up is column-wise, its output features "
                        "split; down row-wise, its input features)"
                        if proven
                        else ""
                    )
                    + ". The plan: {'up': ColwiseParallel(), 'down': RowwiseParallel()}",
                    hint=HintName("tp_plan"),
                    proven=proven,
                )
            full = shapes[p["name"]]
            if p["name"].endswith("weight") and math.prod(p["local"]) * world != math.prod(full):
                raise ctx.fail(f"{said}: it holds {p['local']} of {full}, not 1/{world} of it", hint=HintName("fsdp"))


@check("fsdp_units")
def fsdp_units(ctx: CheckContext) -> None:
    facts = _ranks(ctx)[0]
    units = facts["units"]
    names = list(_reference(ctx)["shapes"])
    for block in sorted({".".join(n.split(".")[:2]) for n in names if n.startswith("blocks.")}):
        own = {n for n in names if n.startswith(block + ".")}
        if not any(set(unit["params"]) == own for unit in units.values()):
            holder: list[str] = next((u["params"] for u in units.values() if own & set(u["params"])), [])
            raise ctx.fail(
                f"{block} is not an FSDP unit of its own: "
                + (
                    f"one unit gathers {len(holder)} parameters, {', '.join(holder[:3])} ..."
                    if holder
                    else "no unit holds it"
                )
                + "; call fully_shard(block, mesh=mesh['dp']) on each block, then on the model",
                hint=HintName("fsdp"),
            )
    if "" not in units:
        raise ctx.fail(
            "the model itself is not an FSDP unit: fully_shard(model, mesh=mesh['dp']) last", hint=HintName("fsdp")
        )


def _share(parts: int, index: int) -> list[int]:
    """The samples of the index-th of `parts` equal chunks of a global batch."""
    size = BATCH // parts
    return list(range(index * size, (index + 1) * size))


def _split(fed: list[list[int]], dp_size: int) -> bool:
    """Whether one step's samples, per rank, split the batch as the contract asks: the ranks of a tp group
    (one dp coordinate) feed the same samples, and the dp groups' shares are equal, disjoint and cover the
    batch: then FSDP's average over dp is the mean over the whole batch, whichever samples each share holds
    (a chunk, or a DistributedSampler's stride)."""
    groups = [fed[d * TP : (d + 1) * TP] for d in range(dp_size)]
    if any(any(got != group[0] for got in group) for group in groups):
        return False
    shares = [group[0] for group in groups]
    return all(len(share) == BATCH // dp_size for share in shares) and sorted(
        sample for share in shares for sample in share
    ) == list(range(BATCH))


@check("data_by_dp_coordinate")
def data_by_dp_coordinate(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    dp_size = ctx.world_size // TP
    for rank, facts in enumerate(ranks):
        if len(facts["rows"]) < STEPS:
            raise ctx.fail(
                f"rank {rank} ran {len(facts['rows'])} forward passes of the model for {STEPS} batches",
                hint=HintName("data"),
            )
    for step in range(STEPS):
        if _split([sorted(facts["rows"][step]) for facts in ranks], dp_size):
            continue
        for rank, facts in enumerate(ranks):
            got = facts["rows"][step]
            dp = rank // TP
            want = _share(dp_size, dp)
            if sorted(got) == want:
                continue
            said = f"step {step + 1}: rank {rank} (dp coordinate {dp}, tp {rank % TP}) fed samples {got} of the batch"
            if -1 in got or not got:
                raise ctx.fail(f"{said} (-1: not a sample of that step's batch)", hint=HintName("data"))
            fed = [[sorted(f["rows"][s]) for f in ranks] for s in range(STEPS)]
            # what each mistake feeds every rank at every step, by the judge's arithmetic
            by_rank = [_share(ctx.world_size, r) for r in range(len(ranks))]
            by_tp = [_share(dp_size, r % TP) for r in range(len(ranks))]
            proven = _one(
                [
                    structural(Cause("data_by_global_rank"), {"rows": [by_rank] * STEPS}, {"rows": fed}),
                    structural(Cause("dp_from_tp"), {"rows": [by_tp] * STEPS}, {"rows": fed}),
                ]
            )
            reasons = {
                "data_by_global_rank": "a quarter indexed by the global rank: the two ranks of a tp group must feed "
                "the same samples (TP splits one copy of the model), so index by the dp coordinate",
                "dp_from_tp": f"the share of dp group {rank % TP}: the index came from the tp coordinate",
            }
            if proven is not None:
                reason = reasons[proven.cause]
            elif sorted(got) == list(range(BATCH)):
                reason = "the whole batch: the dp groups must each train on their own half"
            else:
                reason = (
                    "the shares do not split the batch (the same samples on the ranks of a tp group, equal and "
                    "disjoint shares across the dp groups, all of the batch)"
                )
            raise ctx.fail(
                f"{said}, where its dp group's share is {want}: {reason}"
                + ". Take inputs.chunk(dp_size)[dp_rank] with dp_rank = mesh['dp'].get_local_rank()",
                hint=HintName("data"),
                proven=proven,
            )


def _off(final: dict[str, Any], want: dict[str, Any]) -> tuple[str, float]:
    """The tensor furthest from the reference, and how far: as a fraction of its own scale, but of no less than 1%
    of the model's largest, so a near-zero one-element bias (out.bias) is not judged on its rounding alone."""
    scale = max((float(np.max(np.abs(w))) for w in map(np.asarray, want.values()) if w.size), default=0.0)

    def off(name: str, w: Any) -> float:
        expected = np.asarray(w)
        own = float(np.max(np.abs(expected))) if expected.size else 0.0
        return relative_difference(final.get(name), w) * max(own, 1e-12) / max(own, 0.01 * scale, 1e-12)

    return max(((name, off(name, w)) for name, w in want.items()), key=lambda item: item[1])


@check("matches_reference")
def matches_reference(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    trusted = _reference(ctx)
    counts = [f["steps"] for f in ranks]
    if any(c != STEPS for c in counts):
        raise ctx.fail(
            f"optimizer steps per rank {counts} for {STEPS} batches: one step per batch", hint=HintName("optimizer")
        )
    final = ranks[0].get("final")  # the run's failure where rank 0 failed
    if final is None:
        ctx.require(ctx.run(TRAIN.name, **_arguments(ctx)))  # where another rank failed, the grader made no gather
        error = ranks[0].get("gather_error", "no weights were reported")
        raise ctx.fail(f"the grader could not gather the trained weights: {error}", hint=HintName("fsdp"))
    correct = trusted["correct"]
    name, off = _off(final, correct["final"])
    if off <= TOLERANCE:
        return
    first = None
    for step in range(STEPS):
        for rank, facts in enumerate(ranks):
            losses = facts["losses"]  # one per forward the watch saw: fewer when the hook saw fewer
            loss = losses[step] if step < len(losses) else None
            want = correct["losses"][step][rank // TP]
            if loss is not None and abs(loss - want) > TOLERANCE * max(abs(want), 1e-3) * 10:
                first = first or (step, rank, loss, want)
    where = (
        f"; the first loss off is step {first[0] + 1}'s on rank {first[1]}: {first[2]:.6g}, the reference's "
        f"{first[3]:.6g}"
        if first
        else ""
    )
    dp = ctx.world_size // TP

    def replays(requests: dict[str, ReplayRequest]) -> dict[str, Replayed]:
        asked = {"steps": STEPS, "batch_size": BATCH, "lr": LR, "hypotheses": requests}
        return ctx.reference(REPLAYS, dp=dp, **asked, **ctx.seeds("data", "model"))["replays"]

    numbers = {"W": float(ctx.world_size), "dp": float(dp)}
    proof = replay.prove(
        _HYPOTHESES, numbers, {}, replays, lambda replayed: _off(final, replayed["final"])[1] <= TOLERANCE
    )
    named = proof.named
    raise ctx.fail(
        f"after {STEPS} steps {name} differs from one process training on the union of the dp groups' batches by up to "
        f"{off:.2g} of its scale (at least 1% of the largest weight's){where}"
        + (f". It equals, within {TOLERANCE:g}, a replay with {named[1]}" if named else ""),
        hint=named[0].hint or HintName("optimizer") if named else HintName("optimizer"),
        proven=proof.cause,
    )
