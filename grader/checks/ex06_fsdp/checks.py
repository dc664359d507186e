"""Judging exercise 6: every rank holds about 1/W of every FSDP unit (counted from what it holds,
FSDP1 or FSDP2 alike), no unit gathers a block with other parameters, training equals the
single-process reference, and rank 0's checkpoint is whole. All four checks judge one shared run."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

import numpy as np

from grader.checks.ex06_fsdp.facts import REFERENCE, REPLAYS, TRAIN, WORKLOAD, Held, Reference, Train
from grader.judge import replay
from grader.judge.api import CheckContext, CheckFailed, UpToFailure, check
from grader.judge.compare import Arrays, first_difference
from grader.judge.names import Cause, HintName
from grader.judge.proof import structural
from grader.judge.tolerance import close
from grader.judge.trajectory import Finding, Setting, diagnose, gathered_steps
from grader.judge.wording import article

STEPS, BATCH, LR = WORKLOAD.steps, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
_HYPOTHESES = replay.load(__package__ or "")


def _joined_steps(ranks: list[Train], want: Reference) -> list[dict] | None:
    """The training steps as whole tensors, joined from every rank's shards; None where they cannot be joined (the
    losses and final weights are compared instead)."""
    shapes = {name: tuple(np.shape(tensor)) for name, tensor in want["initial"].items()}
    steps = gathered_steps([facts["shard_steps"] for facts in ranks], shapes, ranks[0]["flat_layouts"])
    return steps if steps is not None and len(steps) == len(want["steps"]) else None


def _trajectory_finding(ctx: CheckContext, steps: list[dict], want: Reference) -> Finding | None:
    """The shared diagnosis of the training steps joined from every rank's shards (_joined_steps)."""
    replays = ctx.replayer(REPLAYS, world_size=ctx.world_size, **WORKLOAD.arguments())

    setting = Setting(
        lr=LR,
        momentum=want["momentum"],
        factors={"b": BATCH, "W": ctx.world_size},
        reference="one process on all ranks' batches of the step",
        subject="every rank's shards joined",
        hypotheses=_HYPOTHESES,
        replay=replays,
    )
    return diagnose(steps, want["start"], want["steps"], want["start"], setting)


def _training(ctx: CheckContext) -> dict[str, Any]:
    """The arguments of the one training run every check reads."""
    return {**WORKLOAD.arguments(), **ctx.seeds("data", "model")}


# What the checks of the sharding and of the training read: complete once every rank took every step, even if the run
# failed after that (in the checkpoint's gather, say) — a failure there costs full_checkpoint, not these checks.
TRAINING_FACTS: Final = ("meshes", "optimizer_steps", "shard_steps", "flat_layouts", "units", "loose", "blocks")


def _every_step(ctx: CheckContext, judged: str, joined: bool = False) -> Callable[[list[Train]], str | None]:
    """Proof that the training facts are complete: every rank took as many optimizer steps as the reference, each
    one finished (its weights after the step recorded), and recorded what it held at them (`judged`: what of that
    the check reads); with `joined`, also that the steps join into whole tensors (else the check reads the weights
    gathered after train_fsdp)."""

    def proof(ranks: list[Train]) -> str | None:
        want = _reference(ctx)
        steps = len(want["steps"])
        if not all(
            len(f["optimizer_steps"]) == len(f["shard_steps"]) == steps and all("params" in s for s in f["shard_steps"])
            for f in ranks
        ):
            return None
        if joined and _joined_steps(ranks, want) is None:
            return None
        return judged.format(steps=steps)

    return proof


def _trained(ctx: CheckContext, judged: str, joined: bool = False) -> list[Train]:
    """_ranks, also judged where the run failed after every step (TRAINING_FACTS, _every_step); `judged` says on
    what."""
    _mesh_problems(ctx)
    return ctx.facts_until_failure(TRAIN, TRAINING_FACTS, _every_step(ctx, judged, joined), **_training(ctx))


def _ranks(ctx: CheckContext) -> list[Train]:
    _mesh_problems(ctx)
    return ctx.facts(TRAIN, **_training(ctx))


def _mesh_problems(ctx: CheckContext) -> None:
    """A failed run whose cause is the device mesh: one on the wrong device, or one that does not hold every rank."""
    result = ctx.run(TRAIN.name, **_training(ctx))
    if not result.ok:
        expected = "cuda" if ctx.backend == "nccl" else "cpu"
        reported = [ctx.conform(r.facts, Train, r.rank, complete=r.ok) for r in result.ranks]
        meshes = [m["device_type"] for facts in reported for m in facts.get("meshes", [])]
        wrong = sorted({device for device in meshes if device != expected})
        if wrong:
            raise ctx.fail(
                f"mesh on the wrong device: a {wrong[0]!r} device mesh on a {ctx.backend} run, which needs "
                f"init_device_mesh({expected!r}, (world_size,)); the run failed",
                hint=HintName("mesh_device"),
            )
        built = [facts["meshes"][0]["size"] for facts in reported if facts.get("meshes")]
        sizes = [size for size in built if size is not None]  # the first mesh of a rank is the student's own
        if sizes and sizes[0] != ctx.world_size:
            raise ctx.fail(
                f"a device mesh of {sizes[0]} rank{'s' if sizes[0] != 1 else ''} on a run of "
                f"{ctx.world_size}: FSDP shards over the mesh, which must hold every rank "
                f"(init_device_mesh(device_type, (world_size,))); the run failed",
                hint=HintName("mesh_and_fully_shard"),
            )


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(REFERENCE, world_size=ctx.world_size, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    return facts


def _unit_bound(params: list[Held], world: int) -> int:
    """The most elements of a unit a 1/W shard may hold: each parameter split along its first
    dimension, a whole row at most more per parameter (FSDP2 pads each dim-0 chunk; FSDP1's shard
    of its flat parameter, ceil(n/W), is never more)."""
    return sum(math.ceil(p["rows"] / world) * (p["full"] // max(p["rows"], 1)) for p in params)


def _listed(names: list[str], most: int = 4) -> str:
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


def kibibytes(size: int) -> str:
    """Bytes as KiB with one decimal: how the grader and the exercise's docstring both say sizes."""
    return f"{size / 1024:.1f} KiB"


def _memory(ranks: list[Train]) -> str:
    """The parameter memory each rank holds, against the whole model's."""
    params = [[p for unit in facts["units"] for p in unit["params"]] + facts["loose"] for facts in ranks]
    held = [sum(p["local"] * p["itemsize"] for p in mine) for mine in params]
    counts = [sum(p["local"] for p in mine) for mine in params]
    whole = params[0]
    return (
        f"parameter memory per rank: {', '.join(kibibytes(n) for n in held)} of "
        f"{kibibytes(sum(p['full'] * p['itemsize'] for p in whole))} "
        f"({', '.join(map(str, counts))} of {sum(p['full'] for p in whole)} parameters)"
    )


@check("shards_parameters")
def shards_parameters(ctx: CheckContext) -> str:
    ranks = _trained(ctx, "the FSDP units and shards every rank held when it took its {steps} optimizer steps")
    world = ctx.world_size
    first = ranks[0]
    loose = [p for p in first["loose"] if p["full"]]
    if loose and not first["units"]:
        total = sum(p["full"] for p in loose)
        raise ctx.fail(
            f"not sharded: there is no FSDP unit, every rank holds all {total} parameters whole; "
            "call fully_shard on each block, then on the model",
            hint=HintName("mesh_and_fully_shard"),
        )
    if loose:
        names = [p["name"] for p in loose]
        raise ctx.fail(
            f"not sharded: {_listed(names)} ({sum(p['full'] for p in loose)} elements) belong to no FSDP "
            "unit, so every rank holds them whole. Parameters of a module that is not wrapped, nor inside "
            "a wrapped one, stay whole: wrap the root too (fully_shard(model) after the blocks)",
            hint=HintName("mesh_and_fully_shard"),
        )
    units = {unit["name"]: unit["params"] for unit in first["units"]}
    for rank, facts in enumerate(ranks):
        if sorted(unit["name"] for unit in facts["units"]) != sorted(units):
            raise ctx.fail(
                f"the ranks wrapped the model differently: FSDP units {sorted(units)} on rank 0, "
                f"{sorted(u['name'] for u in facts['units'])} on rank {rank}"
            )
    for name, params in units.items():
        full = sum(p["full"] for p in params)
        held = [
            sum(p["local"] for p in unit["params"])
            for facts in ranks
            for unit in facts["units"]
            if unit["name"] == name
        ]
        if sum(held) < full:
            raise ctx.fail(f"FSDP unit {name}: the ranks together hold {sum(held)} of its {full} elements")
        bound = _unit_bound(params, world)
        if all(h >= full for h in held):
            raise ctx.fail(
                f"not sharded: every rank holds all {full} elements of FSDP unit {name} (a 1/{world} shard "
                f"holds at most {bound}): the unit is replicated, not sharded (what NO_SHARD or a "
                "replicate mesh dimension do); shard over all the ranks",
                hint=HintName("mesh_and_fully_shard"),
            )
        for rank, local in enumerate(held):
            if local > bound:
                raise ctx.fail(
                    f"not sharded: rank {rank} holds {local} of the {full} elements of FSDP unit {name}; a "
                    f"1/{world} shard holds at most {bound}",
                    hint=HintName("mesh_and_fully_shard"),
                )
    return _memory(ranks)


def _block_of(name: str, blocks: int) -> int | None:
    """The index of the block a parameter belongs to, from its name (blocks.<i>.)."""
    parts = name.split(".")
    if len(parts) > 2 and parts[0] == "blocks" and parts[1].isdigit() and int(parts[1]) < blocks:
        return int(parts[1])
    return None


@check("wraps_each_block")
def wraps_each_block(ctx: CheckContext) -> str:
    facts = _trained(ctx, "the FSDP units rank 0 held when it took its {steps} optimizer steps")[0]
    units, blocks = facts["units"], facts["blocks"]
    if not units:
        raise ctx.fail(
            "no FSDP unit at all: the model was not wrapped with fully_shard (or FSDP)",
            hint=HintName("mesh_and_fully_shard"),
        )
    every = {p["name"] for unit in units for p in unit["params"]} | {p["name"] for p in facts["loose"]}
    block_params = [{n for n in every if _block_of(n, blocks) == i} for i in range(blocks)]
    for unit in units:
        names = {p["name"] for p in unit["params"]}
        whole = [i for i, params in enumerate(block_params) if params and params <= names]
        if not whole or names == block_params[whole[0]]:
            continue
        if names == every:
            raise ctx.fail(
                f"only the root is wrapped: one FSDP unit ({unit['name']}) holds all the parameters, so "
                "forward gathers the whole model at once and nothing overlaps; call fully_shard on each "
                "block first",
                hint=HintName("blocks_before_root"),
            )
        others = sorted(names - set().union(*(block_params[i] for i in whole)))
        together = [f"blocks.{i}" for i in whole] + ([_listed(others, 3)] if others else [])
        elements = sum(p["full"] for p in unit["params"])
        raise ctx.fail(
            f"blocks not wrapped one by one: FSDP unit {unit['name']} holds {' and '.join(together)} "
            f"together ({elements} elements gathered at once); make each block a unit of its own "
            "(one fully_shard call per block), then wrap the root",
            hint=HintName("blocks_before_root"),
        )
    for index, params in enumerate(block_params):
        held = {unit["name"]: sorted(params & {p["name"] for p in unit["params"]}) for unit in units}
        held["(no unit)"] = sorted(params - {p["name"] for unit in units for p in unit["params"]})
        holders = [
            f"{name} holds {', '.join(n.removeprefix(f'blocks.{index}.') for n in mine)}"
            for name, mine in held.items()
            if mine
        ]
        if len(holders) > 1:
            found = [unit["name"] for unit in units]
            raise ctx.fail(
                f"a block split over several FSDP units: the parameters of blocks.{index} are in {len(holders)} "
                f"units ({'; '.join(holders)}), not one. Units found ({len(found)}): {_listed(found, 9)}; "
                f"expected one unit per block ({', '.join(f'blocks.{i}' for i in range(blocks))}), then the root "
                "for the rest. Call fully_shard once on each block, not on the layers inside it",
                hint=HintName("blocks_before_root"),
            )
    return f"{len(units)} FSDP units: {', '.join(unit['name'] for unit in units)}"


@check("matches_reference")
def matches_reference(ctx: CheckContext) -> None:
    ranks = _trained(ctx, "the {steps} optimizer steps of every rank's shards, joined", joined=True)
    want = _reference(ctx)
    facts = ranks[0]
    cut = next((f for f in ranks if isinstance(f, UpToFailure)), None)  # a rank the run's failure cut short
    if cut is None and facts.get("final") is None:  # the worker reports gather_error instead
        raise ctx.fail(f"the grader could not gather the trained weights: {facts.get('gather_error')}")
    steps = len(facts["optimizer_steps"])
    if steps != STEPS:
        raise ctx.fail(f"{steps} optimizer steps instead of {STEPS}, one per batch")
    joined = _joined_steps(ranks, want)
    finding = _trajectory_finding(ctx, joined, want) if joined is not None else None
    if finding is not None:
        hint = finding.hint or HintName("optimizer_after_sharding")
        raise ctx.fail(finding.message, hint=hint, proven=finding.proven)
    if cut is not None:
        return  # every step, joined (the proof), equals one process's: the weights after train_fsdp were never gathered
    final = facts["final"]
    if first_difference(final, want["initial"], rtol=0.0, atol=0.0) is None:
        owned = max(facts["optimizer_steps"])
        why = (
            " The optimizer was built before wrapping: it holds the original tensors, which fully_shard replaced "
            "by sharded ones, so they never get a gradient."
            if owned == 0
            else ""
        )
        raise ctx.fail(
            f"no parameter changed after the step: after {STEPS} optimizer steps the weights are the "
            f"initial ones.{why}",
            hint=HintName("optimizer_after_sharding"),
        )
    losses = np.mean([rank["losses"][:STEPS] for rank in ranks], axis=0)
    if len(losses) != STEPS:
        raise ctx.fail(f"the model ran forward {len(losses)} times for {STEPS} batches")
    for step, (got, expected) in enumerate(zip(losses, want["losses"]), 1):
        if not close(got, expected, rtol=1e-5, atol=1e-6):
            raise ctx.fail(
                f"the loss of step {step} (mean over ranks) is {got:.6g}, one process on all ranks' batches "
                f"gets {expected:.6g}. Check SGD(lr, momentum=0.9), the mean loss, and that the optimizer "
                "was built after wrapping",
                hint=HintName("optimizer_after_sharding"),
            )
    difference = first_difference(final, want["final"])
    if difference:
        raise ctx.fail(
            f"after {STEPS} steps the weights differ from one process training on all ranks' batches: {difference}",
            hint=HintName("optimizer_after_sharding"),
        )


FSDP1_WRAPPER = "_fsdp_wrapped_module."


def _match_keys(keys: list[str], wanted: list[str]) -> tuple[dict[str, str], str]:
    """Each plain parameter name's key in the checkpoint, and how the keys differ from the plain
    names ("" when they are the plain names, or when some are missing altogether)."""
    if all(name in keys for name in wanted):
        return {name: name for name in wanted}, ""
    unwrapped = {key.replace(FSDP1_WRAPPER, ""): key for key in keys}
    if all(name in unwrapped for name in wanted):
        return {name: unwrapped[name] for name in wanted}, f"FSDP1's wrapper names ({FSDP1_WRAPPER})"
    first = next((key for key in keys if key.endswith("." + wanted[0])), "")
    prefix = first[: -len(wanted[0])]
    if prefix and all(prefix + name in keys for name in wanted):
        return {name: prefix + name for name in wanted}, f"the prefix {prefix!r}"
    return {name: name for name in wanted}, ""


def _initial_weights(ctx: CheckContext, facts: Train, initial: Arrays, saved: Arrays) -> CheckFailed:
    """The checkpoint equals the initial weights: when it was gathered is proven only by the weights the
    grader gathered itself after training. Where training left them unchanged too, that is
    matches_reference's finding, and nothing here tells when the checkpoint was taken."""
    after = facts.get("final") or {}
    if facts.get("gather_error") or not after:
        return ctx.fail(
            "the checkpoint holds the initial weights, not the trained ones (the grader could not gather the "
            "model after training to compare)",
            hint=HintName("full_state_dict"),
        )
    if first_difference(after, initial, rtol=0.0, atol=0.0) is None:
        return ctx.fail(
            "the checkpoint holds the initial weights, and so did the model after training: no optimizer "
            "step changed them; see matches_reference"
        )
    before = structural(  # gathered before the steps: the reference's initial weights, every tensor exactly
        Cause("checkpoint_before_training"), {"checkpoint": initial}, {"checkpoint": saved}
    )
    return ctx.fail(
        "the checkpoint holds the initial weights, while the model after training holds other ones"
        + (": it was gathered before the training steps" if before else ""),
        hint=HintName("full_state_dict"),
        proven=before,
    )


@check("full_checkpoint")
def full_checkpoint(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    want = reference["final"]
    saved = ranks[0]["checkpoint"]
    if saved.get("type") != "dict":
        raise ctx.fail(
            f"train_fsdp returned {article(str(saved.get('type')))} on rank 0, not a state dict",
            hint=HintName("full_state_dict"),
        )
    sharded = [e for e in saved["entries"] if e["kind"] != "Tensor" and e["shape"] is not None]
    if sharded:
        raise ctx.fail(
            f"a checkpoint of local shards passed off as full: {sharded[0]['key']} is a "
            f"{sharded[0]['kind']} (this rank's shards); gather with get_model_state_dict(..., "
            "full_state_dict=True)",
            hint=HintName("full_state_dict"),
        )
    entries = {e["key"]: e for e in saved["entries"]}
    keys, renamed = _match_keys(list(entries), list(want))
    for name, tensor in want.items():
        entry = entries.get(keys[name])
        if entry is None:
            raise ctx.fail(
                f"the checkpoint has no {name!r} (keys: {list(entries)[:4]}...)", hint=HintName("full_state_dict")
            )
        if entry["shape"] != list(tensor.shape):
            raise ctx.fail(
                f"a checkpoint of local shards passed off as full: {keys[name]} has shape {entry['shape']} "
                f"instead of {list(tensor.shape)}; each rank holds only its shard, gather with "
                "get_model_state_dict(..., full_state_dict=True)",
                hint=HintName("full_state_dict"),
            )
    if renamed:
        name = next(name for name in want if keys[name] != name)
        raise ctx.fail(
            f"the checkpoint's keys carry {renamed}: {keys[name]!r} for {name!r}, names a plain model "
            "does not load; save the model's own parameter names",
            hint=HintName("full_state_dict"),
        )
    if saved["loads_plain"]:
        raise ctx.fail(
            f"the checkpoint does not load into a plain model: {saved['loads_plain']}", hint=HintName("full_state_dict")
        )
    if first_difference(saved["tensors"], reference["initial"], rtol=0.0, atol=0.0) is None:
        raise _initial_weights(ctx, ranks[0], reference["initial"], saved["tensors"])
    difference = first_difference(saved["tensors"], want)
    if difference:
        raise ctx.fail(
            f"the checkpoint on rank 0 does not hold the trained weights: {difference}",
            hint=HintName("full_state_dict"),
        )
