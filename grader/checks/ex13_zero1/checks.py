"""Judging exercise 13: the ZeRO-1 loop against one process's AdamW, the optimizer state each rank
holds, the partition, the exchange of updated parameters and the bytes communicated per step.

Every check reads one shared run per world size (the `train` worker). A cause is named only where a
structural replay proves it (what the mistake builds from the reference equals, field by field, what the run
built: every rank's optimizers, the partitions of every list on every rank) or where a replay of it
(hypotheses.toml: a simulation of W ranks with one change to the correct loop, `replays` in workers.py)
reproduces every recorded step on every rank. Anything else is said as measured.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.checks.ex13_zero1.facts import (
    REFERENCE,
    REPLAYS,
    TRAIN,
    WORKLOAD,
    Partition,
    Reference,
    ReferenceStep,
    Trained,
    Training,
)
from grader.engine.facts import ReplayRequest
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.tolerance import close
from grader.judge.wording import shorten

STEPS, BATCH, LR = WORKLOAD.steps, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
BYTES = 4  # fp32
# fp32 sums over ranks differ from one process's by ~1e-7 of a gradient; AdamW's weight decay alone moves a
# weight by lr * 0.01 = 1e-4 of itself per step, which the weights' tolerance must see
GRAD_RTOL, GRAD_ATOL = 1e-4, 1e-6
RTOL, ATOL = 1e-5, 1e-6
# AdamW's first step moves a weight by lr * g / (|g| + eps). Where |g| is within a few rounding errors of zero,
# the rounding of a sum over ranks changes that update beyond any tolerance that still sees a mistake (a correct
# run left the reference by up to 5e-5 on 2% of the draws), and replays of a mistake no longer reproduce it. The
# grader draws its inputs again until no element of the first step's gradient of the union batch is that small:
# 12% of the draws at W=2, 18% at W=4. (Each rank's own gradient is computed alike in the run and in a replay.)
SMALLEST_GRADIENT, DRAWS = 1e-6, 8

_HYPOTHESES = replay.load(__package__ or "")  # hypotheses.toml: the causes matches_adamw can name


def _inputs(ctx: CheckContext) -> dict[str, int]:
    """This grading's data and model seeds: the first draw whose first-step gradients all stay well away
    from zero (SMALLEST_GRADIENT)."""
    for attempt in range(DRAWS):
        seeds = {f"{n}_seed": ctx.draw(f"{n}:{attempt}" if attempt else n).randrange(2**31) for n in ("data", "model")}
        if _reference_of(ctx, seeds)["smallest_gradient"] >= SMALLEST_GRADIENT:
            break
    return seeds


def _run_kwargs(ctx: CheckContext) -> dict[str, Any]:
    return {**WORKLOAD.arguments(), **_inputs(ctx), **ctx.seeds("sizes")}


def _ranks(ctx: CheckContext) -> list[Training]:
    """Each rank's training, once every rank ran train_zero1."""
    reports = ctx.facts(TRAIN, **_run_kwargs(ctx))
    if any(f.get("partitions_differ") for f in reports):
        proven = _rank_tied(ctx, [f["partitions"] for f in reports])
        raise ctx.fail(
            "partition differs between ranks: partition_parameters returned different partitions on different "
            f"ranks for the same sizes{_TIES if proven is not None else ''} (balanced_partition shows them), so "
            "train_zero1 was not run: ranks that disagree on the owners call mismatched collectives",
            hint=HintName("partition"),
            proven=proven,
        )
    ranks = []
    for rank, facts in enumerate(reports):
        training = facts.get("training")
        if training is None:  # a rank whose partitions agreed always trains: not the grader's worker
            raise ctx.fail(f"rank {rank} reported facts the grader cannot judge: the facts lack 'training'")
        ranks.append(training)
    return ranks


def _reference_of(ctx: CheckContext, seeds: dict[str, int]) -> Reference:
    facts = ctx.reference(REFERENCE, world_size=ctx.world_size, **WORKLOAD.arguments(), **seeds)
    return facts


def _reference(ctx: CheckContext) -> Reference:
    return _reference_of(ctx, _inputs(ctx))


def _sizes(ranks: list[Training]) -> dict[str, int]:
    return {name: int(n) for name, n in ranks[0]["sizes"].items()}


_FOREIGN = "another tensor"  # what the rank side calls a tensor an optimizer holds that is no model parameter


def _held(facts: Training) -> list[str]:
    """The parameters this rank's optimizers hold, in the model's order."""
    held = {name for optimizer in facts["optimizers"] for name in optimizer["params"]}
    return [name for name in facts["sizes"] if name in held]


def _steps_taken(ctx: CheckContext, ranks: list[Training]) -> None:
    counts = [len(f["snapshots"]) - 1 for f in ranks]
    if counts != [STEPS] * len(ranks):
        raise ctx.fail(
            f"the ranks ran {counts} training forward passes; train_zero1 was asked for {STEPS} steps of one "
            "batch each (the grader counts the model's forward passes with autograd on)",
            hint=HintName("data_and_loss"),
        )
    if not any(f["optimizers"] for f in ranks):
        raise ctx.fail(
            "no rank ever called optimizer.step() (the grader's step hooks saw none)", hint=HintName("data_and_loss")
        )


# --- matches_adamw ---------------------------------------------------------------------------------


def _observed(facts: Training) -> list[dict[str, Any]]:
    """Per step, the gradient the rank's first optimizer step saw (absent on a rank that stepped nothing)
    and the weights after the exchange."""
    return [
        {"grads": facts["grads"].get(str(k)), "params": facts["snapshots"][k]}
        for k in range(1, len(facts["snapshots"]))
    ]


def _proof(ctx: CheckContext, ranks: list[Training]) -> replay.Proof:
    """The hypotheses whose replay (the W ranks simulated with the ownership the run showed) reproduces every
    step on every rank."""
    start = ranks[0]["snapshots"][0]

    def replayer(requests: dict[str, ReplayRequest]) -> dict[str, list[list[ReferenceStep]]]:
        owned = [_held(f) for f in ranks]
        asked = {**WORKLOAD.arguments(), "owned": owned, "hypotheses": requests}
        return ctx.reference(REPLAYS, world_size=ctx.world_size, **asked, **_inputs(ctx))["replays"]

    def reproduced(per_rank: list[list[ReferenceStep]]) -> bool:
        return len(per_rank) == len(ranks) and all(
            replay.reproduces(_observed(f), per_rank[r], start) for r, f in enumerate(ranks)
        )

    return replay.prove(_HYPOTHESES, {"W": ctx.world_size}, {}, replayer, reproduced)


def _first_difference(ranks: list[Training], reference: Reference) -> tuple[int, int, str, str, float] | None:
    """(step, rank, parameter, phase, largest difference) of the first step that leaves the reference. Only the
    gradients of the parameters a rank's optimizer steps are its business: after a reduce-scatter, the others
    hold that rank's own gradient, which nothing uses."""
    for k, want in enumerate(reference["steps"], 1):
        for rank, facts in enumerate(ranks):
            grads = facts["grads"].get(str(k))
            if grads is not None:
                for name in _held(facts):
                    expected = want["grads"][name]
                    if not close(grads[name], expected, rtol=GRAD_RTOL, atol=GRAD_ATOL):
                        return k, rank, name, "gradient", float(np.max(np.abs(grads[name] - expected)))
            for name, expected in want["params"].items():
                got = facts["snapshots"][k][name]
                if not close(got, expected, rtol=RTOL, atol=ATOL):
                    return k, rank, name, "weights", float(np.max(np.abs(got - expected)))
    return None


@check("matches_adamw")
def matches_adamw(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    _steps_taken(ctx, ranks)
    reference = _reference(ctx)
    for rank, facts in enumerate(ranks):
        difference = first_difference(facts["snapshots"][0], reference["start"], rtol=1e-6, atol=1e-7)
        if difference is None:
            continue
        own = first_difference(facts["snapshots"][0], facts["initial"], rtol=0, atol=0) is None
        raise ctx.fail(
            f"rank {rank} began its first step from other weights than rank 0's initial ones ({difference})"
            + (
                ": its own initial weights (the grader initialises each rank differently); broadcast rank 0's "
                "parameters to every rank before training"
                if own
                else ""
            ),
            hint=HintName("initial_broadcast"),
        )
    found = _first_difference(ranks, reference)
    if found is None:
        return
    step, rank, name, phase, largest = found
    want = reference["steps"][step - 1]
    if phase == "gradient":
        got = np.asarray(ranks[rank]["grads"][str(step)][name])
        expected = np.asarray(want["grads"][name])
        ratio = float(np.sum(got * expected) / np.sum(expected * expected)) if np.any(expected) else float("nan")
        measured = (
            f"at step {step}, rank {rank}'s gradient of {name} when its optimizer stepped differs from the "
            f"gradient of the union batch by up to {largest:.3g} (least-squares ratio {ratio:.4g})"
        )
        advice = "look at how the gradients are averaged across the ranks and cleared between steps"
    else:
        measured = (
            f"after step {step}, rank {rank}'s {name} differs from one process's AdamW on the union batch by up "
            f"to {largest:.3g}, the gradients at the step being right"
        )
        advice = "look at the optimizer, its learning rate and how the updated parameters reach every rank"
    proof = _proof(ctx, ranks)
    if proof.named is not None:
        hypothesis, says = proof.named
        raise ctx.fail(
            f"{says}. Measured: {measured}; replaying it on the reference reproduces all {STEPS} steps on every rank",
            hint=hypothesis.hint,
            proven=proof.cause,
        )
    if proof.proven:
        candidates = "; or ".join(says for _, says in proof.proven)
        raise ctx.fail(
            f"{measured}. Each of these reproduces every step, and this run cannot tell them apart: {candidates}"
        )
    raise ctx.fail(f"{measured}: {advice}")


# --- state_is_sharded ------------------------------------------------------------------------------


@check("state_is_sharded")
def state_is_sharded(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    _steps_taken(ctx, ranks)
    sizes = _sizes(ranks)
    total, largest, world = sum(sizes.values()), max(sizes.values()), ctx.world_size
    full = 2 * total
    states = [sum(int(o["state_numel"]) for o in f["optimizers"]) for f in ranks]
    measured = (
        f"the optimizer state per rank holds {states} elements (AdamW: exp_avg and exp_avg_sq, 2 per parameter; "
        f"all {total} parameters: {full})"
    )
    if all(s >= full for s in states):
        reference = _reference(ctx)
        names = list(reference["start"])
        # the replay: one AdamW over all the parameters on every rank, holding the state of each (2 per element)
        everything = [{"params": names, "state_numel": 2 * sum(int(np.size(reference["start"][n])) for n in names)}]
        proven = structural(
            Cause("full_state_every_rank"),
            built={f"rank {rank}": everything for rank in range(world)},
            observed={
                f"rank {rank}": [{"params": o["params"], "state_numel": o["state_numel"]} for o in f["optimizers"]]
                for rank, f in enumerate(ranks)
            },
        )
        if proven is not None:
            raise ctx.fail(
                f"state for all parameters on every rank: {measured}. Each rank's optimizer holds every parameter, "
                "so nothing is sharded; build AdamW over this rank's shard only",
                hint=HintName("adamw_over_owned"),
                proven=proven,
            )
        counts = [len(f["optimizers"]) for f in ranks]
        raise ctx.fail(
            f"{measured}: every rank's state tensors hold at least the {full} elements of all the parameters; the "
            f"ranks stepped {counts} optimizers, rank 0's holding {len(_held(ranks[0]))} of the {len(sizes)} "
            "parameters. A rank's optimizer state is that of its own shard: one AdamW, built once over it",
            hint=HintName("adamw_over_owned"),
        )
    # an optimizer may hold tensors of its own (a flat fp32 shard): then only the numbers are judged
    foreign = [any(_FOREIGN in o["params"] for o in f["optimizers"]) for f in ranks]
    holders: dict[str, list[int]] = {}
    for rank, facts in enumerate(ranks):
        for name in _held(facts):
            holders.setdefault(name, []).append(rank)
    shared = {name: owners for name, owners in holders.items() if len(owners) > 1}
    if shared:
        name, owners = next(iter(shared.items()))
        raise ctx.fail(
            f"{measured}, {sum(states)} in all: {len(shared)} parameters are held by the optimizers of several "
            f"ranks ({name} by ranks {owners}); each parameter's state lives on one rank",
            hint=HintName("partition"),
        )
    if sum(states) > full:
        raise ctx.fail(
            f"{measured}: {sum(states)} in all, more than the {full} of all the parameters: some state is held on "
            "several ranks",
            hint=HintName("partition"),
        )
    missing = [name for name in sizes if name not in holders]
    if missing and not any(foreign):
        raise ctx.fail(
            f"{measured}: no rank's optimizer holds {', '.join(missing)}, so no rank ever updates "
            f"{'it' if len(missing) == 1 else 'them'}; every parameter is owned by exactly one rank",
            hint=HintName("partition"),
        )
    if sum(states) < full:
        raise ctx.fail(
            f"{measured}: {sum(states)} in all, less than the {full} of all the parameters: some parameters have no "
            "optimizer state on any rank",
            hint=HintName("partition"),
        )
    bound = 2 * (total / world + largest)
    heavy = [rank for rank, s in enumerate(states) if s > bound]
    if heavy:
        raise ctx.fail(
            f"{measured}: rank {heavy[0]} holds more than 2 x (parameters / W + the largest parameter) = {bound:.0f}",
            hint=HintName("partition"),
        )
    held = [2 * sum(sizes[n] for n in _held(f)) for f in ranks]
    wrong = [r for r, (s, h) in enumerate(zip(states, held)) if s != h and not foreign[r]]
    if wrong:
        rank = wrong[0]
        raise ctx.fail(
            f"{measured}: rank {rank}'s optimizer holds parameters of {held[rank] // 2} elements, whose AdamW state "
            f"is {held[rank]} elements, but its state tensors hold {states[rank]}",
            hint=HintName("adamw_over_owned"),
        )


# --- balanced_partition ----------------------------------------------------------------------------


def _partitions(ctx: CheckContext) -> list[list[Partition]]:
    """Per rank, what partition_parameters returned; read from the shared run even when training failed
    after it, so that a partition is judged on its own."""
    result = ctx.run(TRAIN.name, **_run_kwargs(ctx))
    facts = [ctx.conform(outcome.facts, Trained, outcome.rank, complete=False) for outcome in result.ranks]
    if all(f.get("partitions_done") and "partitions" in f for f in facts):
        return [f["partitions"] for f in facts]
    return [f["partitions"] for f in ctx.require(result, schema=Trained)]


_TIES = ": on every list, each rank returned the greedy partition with its ties broken towards itself"


def _greedy(sizes: list[int], world: int, towards: int) -> list[list[int]]:
    """The largest parameters first, each onto the least-loaded rank, ties broken towards rank `towards` (then on
    in rank order): the balanced partition, the same on every rank only when `towards` is."""
    shards: list[list[int]] = [[] for _ in range(world)]
    loads = [0] * world
    for index in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        rank = min(range(world), key=lambda r: (loads[r], (r - towards) % world))
        shards[rank].append(index)
        loads[rank] += sizes[index]
    return [sorted(shard) for shard in shards]


def _rank_tied(ctx: CheckContext, per_rank: list[list[Partition]]) -> Proven | None:
    """`partition_differs`, proven when every rank returned, for every list drawn, the greedy partition with its
    ties broken towards the calling rank (the replay: the judge's own greedy, once per rank)."""
    world = ctx.world_size
    return structural(
        Cause("partition_differs"),
        built={f"rank {r}": [_greedy(c["sizes"], world, r) for c in per_rank[0]] for r in range(world)},
        observed={
            f"rank {r}": [[sorted(shard) for shard in c.get("shards", [])] for c in calls]
            for r, calls in enumerate(per_rank)
        },
    )


def _loads(shards: list[list[int]], sizes: list[int]) -> list[int]:
    return [sum(sizes[i] for i in shard if 0 <= i < len(sizes)) for shard in shards]


@check("balanced_partition")
def balanced_partition(ctx: CheckContext) -> None:
    per_rank = _partitions(ctx)
    world = ctx.world_size
    unbalanced = []
    for number, first in enumerate(per_rank[0]):
        sizes = first["sizes"]
        asked = f"partition_parameters({sizes}, {world})"
        for rank, calls in enumerate(per_rank):
            if "shards" not in calls[number]:
                shown = shorten(calls[number].get("other", "nothing the grader recorded"), 150)
                raise ctx.fail(
                    f"{asked} returned {shown} on rank {rank}; expected a list of {world} lists of parameter indices",
                    hint=HintName("partition"),
                )
        outputs = [calls[number]["shards"] for calls in per_rank]
        other = next((r for r, shards in enumerate(outputs) if shards != outputs[0]), None)
        if other is not None:
            proven = _rank_tied(ctx, per_rank)
            raise ctx.fail(
                f"partition differs between ranks: {asked} returned {outputs[0]} on rank 0 and {outputs[other]} on "
                f"rank {other}{_TIES if proven is not None else ''}. Every rank must compute the same partition: it "
                "may depend on its arguments only (not the rank, nor an unseeded random draw)",
                hint=HintName("partition"),
                proven=proven,
            )
        shards = outputs[0]
        if len(shards) != world:
            raise ctx.fail(
                f"{asked} returned {len(shards)} shards; expected one per rank, {world}", hint=HintName("partition")
            )
        owners: dict[int, list[int]] = {}
        for rank, shard in enumerate(shards):
            for index in shard:
                owners.setdefault(index, []).append(rank)
        outside = sorted(i for i in owners if not 0 <= i < len(sizes))
        if outside:
            raise ctx.fail(
                f"{asked} returned {shards}: index {outside[0]} is not a parameter of the list",
                hint=HintName("partition"),
            )
        twice = sorted(i for i, ranks in owners.items() if len(ranks) > 1)
        if twice:
            raise ctx.fail(
                f"{asked} returned {shards}: parameter {twice[0]} is owned by ranks {owners[twice[0]]}; each parameter "
                "is owned by exactly one rank",
                hint=HintName("partition"),
            )
        missing = [i for i in range(len(sizes)) if i not in owners]
        if missing:
            raise ctx.fail(
                f"{asked} returned {shards}: parameter {missing[0]} is owned by no rank, so it would never be updated",
                hint=HintName("partition"),
            )
        loads = _loads(shards, sizes)
        bound = sum(sizes) / world + max(sizes)
        if max(loads) > bound:
            unbalanced.append((asked, shards, loads, bound))
    if unbalanced:
        asked, shards, loads, bound = unbalanced[0]
        # the replay: every list split by index (parameter i to rank i mod W), on every rank
        by_index = structural(
            Cause("unbalanced"),
            built={
                f"rank {rank}": [[list(range(r, len(c["sizes"]), world)) for r in range(world)] for c in per_rank[0]]
                for rank in range(world)
            },
            observed={
                f"rank {rank}": [[sorted(shard) for shard in c.get("shards", [])] for c in calls]
                for rank, calls in enumerate(per_rank)
            },
        )
        raise ctx.fail(
            f"unbalanced: {asked} gave loads {loads} (elements per rank), the largest above sum / W + the largest "
            f"parameter = {bound:g}; {len(unbalanced)} of the {len(per_rank[0])} lists drawn are unbalanced"
            + (
                ". Every list was split by index (parameter i to rank i mod W), by count, not by size"
                if by_index is not None
                else ""
            )
            + "; place the largest parameters first, each on the least-loaded rank",
            hint=HintName("partition"),
            proven=by_index,
        )


# --- updated_params_reach_every_rank ---------------------------------------------------------------


@check("updated_params_reach_every_rank")
def updated_params_reach_every_rank(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    _steps_taken(ctx, ranks)
    holders: dict[str, list[int]] = {}
    for rank, facts in enumerate(ranks):
        for name in _held(facts):
            holders.setdefault(name, []).append(rank)
    stale, other = [], []
    for k in range(1, STEPS + 1):
        for name, owners in holders.items():
            owner = owners[0]
            computed = ranks[owner]["owned"].get(str(k), {}).get(name)
            if computed is None:
                continue
            for rank, facts in enumerate(ranks):
                after = facts["snapshots"][k][name]
                if close(after, computed, rtol=1e-6, atol=1e-7):
                    continue
                moved = float(np.max(np.abs(computed - facts["snapshots"][k - 1][name])))
                if rank not in owners and np.array_equal(after, facts["snapshots"][k - 1][name]) and moved > 0:
                    stale.append((k, rank, name, owner, moved))
                else:
                    other.append((k, rank, name, owner, float(np.max(np.abs(after - computed)))))
    if stale and not other:
        k, rank, name, owner, moved = stale[0]
        measured = (
            f"after step {k}, rank {rank} still holds its pre-step {name}, which its owner, rank {owner}, moved by "
            f"up to {moved:.3g} ({len(stale)} such copies over the {STEPS} steps)"
        )
        proof = _proof(ctx, ranks)  # named only where its replay reproduces every step on every rank
        proven = proof.cause if proof.named is not None and proof.named[0].cause == "updated_params_not_sent" else None
        raise ctx.fail(
            f"updated parameters not sent: {measured}; broadcast each parameter from its owner after the step"
            if proven is not None
            else f"{measured}: look at how each parameter's new value reaches the ranks that do not own it",
            hint=HintName("broadcast_from_owner"),
            proven=proven,
        )
    if other:
        k, rank, name, owner, largest = other[0]
        whose = "its own step's result" if rank == owner else f"what its owner, rank {owner}, computed"
        extra = ""
        if rank == owner:
            rank0 = ranks[0]["snapshots"][k - 1][name]
            if owner != 0 and np.array_equal(ranks[owner]["snapshots"][k][name], rank0):
                extra = ": it holds rank 0's value from before the step, bit for bit"
        raise ctx.fail(
            f"after step {k}, rank {rank}'s {name} differs from {whose} by up to {largest:.3g}{extra}",
            hint=HintName("broadcast_from_owner"),
        )
    # parameters no optimizer holds by name (an optimizer over a flat copy of the shard): every rank agrees
    for k in range(1, STEPS + 1):
        for name in ranks[0]["snapshots"][k]:
            if name in holders:
                continue
            for rank, facts in enumerate(ranks[1:], 1):
                after, first = facts["snapshots"][k][name], ranks[0]["snapshots"][k][name]
                if not close(after, first, rtol=1e-6, atol=1e-7):
                    raise ctx.fail(
                        f"after step {k}, rank {rank}'s {name} differs from rank 0's by up to "
                        f"{float(np.max(np.abs(after - first))):.3g} (no optimizer holds {name} itself, so its "
                        "owner is not known): the updated values did not reach every rank",
                        hint=HintName("broadcast_from_owner"),
                    )


# --- communication_volume --------------------------------------------------------------------------

# the collectives' op names (c10d's, then the functional collectives')
_OPS = {
    "allreduce": "all-reduce",
    "allreduce_coalesced": "all-reduce",
    "all_reduce": "all-reduce",
    "all_reduce_coalesced": "all-reduce",
    "all_gather_into_tensor": "all-gather",
    "all_gather_into_tensor_coalesced": "all-gather",
    "allgather_into_tensor_coalesced": "all-gather",
    "reduce_scatter_tensor": "reduce-scatter",
    "reduce_scatter_tensor_coalesced": "reduce-scatter",
    "broadcast": "broadcast",
    "allgather": "all-gather",
    "_allgather_base": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "_reduce_scatter_base": "reduce-scatter",
}


@check("communication_volume")
def communication_volume(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    _steps_taken(ctx, ranks)
    sizes = _sizes(ranks)
    elements = sum(sizes.values())
    message = elements * BYTES
    expected = 2 * message
    # a reduce-scatter or an all-gather of flattened shards pads each to the largest: W x the largest shard's elements
    largest = max(sum(sizes[n] for n in _held(f)) for f in ranks)
    padded = max(message, ctx.world_size * largest * BYTES)
    for rank, facts in enumerate(ranks):
        for k in range(1, STEPS + 1):
            calls = [c for c in facts["comm"] if c["after"] == k]
            sent = sum(int(c["bytes"]) for c in calls)
            gathered = any(_OPS.get(c["op"]) == "all-gather" for c in calls)
            scattered = any(_OPS.get(c["op"]) == "reduce-scatter" for c in calls)
            if expected <= sent <= (padded if scattered else message) + (padded if gathered else message) + 64:
                continue
            by_op: dict[str, int] = {}
            for c in calls:
                by_op[_OPS.get(c["op"], c["op"])] = by_op.get(_OPS.get(c["op"], c["op"]), 0) + int(c["bytes"])
            parts = ", ".join(f"{op} {n} B" for op, n in by_op.items()) or "no collective"
            reading = ""
            if sent == message and set(by_op) == {"all-reduce"}:
                reading = ": the gradients' all-reduce alone, the updated parameters are never sent"
            elif sent == message and "all-reduce" not in by_op:
                reading = ": no gradient all-reduce"
            elif sent > expected and sent % message == 0:
                reading = f": {sent // message} times the parameters' {message} B"
            raise ctx.fail(
                f"step {k} on rank {rank} communicated {sent} bytes ({parts}); a ZeRO-1 step moves {expected} "
                f"(the gradients' all-reduce or reduce-scatter, {elements} fp32 = {message} B, and the updated "
                f"parameters' broadcast or all-gather, {message} B; a flattened reduce-scatter or all-gather "
                f"may pad each shard to the largest, W x {largest} elements){reading}",
                hint=HintName("broadcast_from_owner"),
            )
