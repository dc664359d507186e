"""Judging exercise 16 from what the grader's own instrumentation saw on the ranks (workers.py): what each
rank stores of every parameter and what the optimizer holds, the dtypes every Linear layer computed in, the
dtypes of FSDP2's all-gathers and reduce-scatters, the tensors kept for backward per block and the layers
recomputed in backward; and the numbers against one trusted process doing the same casts. Every parameter's
name and size, what the ranks' shards must make up, comes from that trusted process too. A cause is named only
where a structural replay proves it (grader/judge/proof.py): what the mistake builds (every parameter's storage,
every unit's policy, every Linear's dtypes, the collectives, the tensors each region keeps and the layers
recomputed), from the trusted process's names and counts, equal to what the run built; or where the one replay
of hypotheses.toml whose numbers are the run's (matches_reference: the first gradient, every loss, the final
weights) proves it (grader/judge/replay.py); else the message says what was measured."""

from __future__ import annotations

import math
from typing import Any, Final, Literal

import numpy as np

from grader.checks.ex16_mixed_precision.facts import (
    REFERENCE,
    REPLAYS,
    TRAIN,
    WORKLOAD,
    Linear,
    Reference,
    Replayed,
    Train,
)
from grader.engine import RunResult
from grader.engine.facts import ReplayRequest
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import scale_of
from grader.judge.diagnose import failure_verdict
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural

STEPS, BATCH, LR = WORKLOAD.steps, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
BLOCKS = ("blocks.0", "blocks.1", "blocks.2")
REGIONS = ("inp", *BLOCKS, "out")
# bf16 keeps 8 significant bits: a relative error of 2^-8 per rounding. On the CPU a gradient computed with the
# same casts agrees far closer (the same kernels in the same dtypes: to the bit, measured); another dtype is off
# by about 2^-8. A GPU's bf16 kernels accumulate in another order, and one output rounded the other way is
# 2^-8 off, so under nccl the first gradient and the losses are held to bf16's tolerance only.
SAME_CASTS = 2e-4
WITHIN_BF16 = 4e-3
_HYPOTHESES = replay.load(__package__ or "")  # hypotheses.toml: the causes matches_reference can name


def _explained(ctx: CheckContext, result: RunResult) -> None:
    """A run that failed in a Linear layer given an input and a weight of different dtypes: which layer, and
    whether its module is an FSDP unit with the policy (the facts recorded up to the error)."""
    verdict = failure_verdict(result, ctx.student_file)
    if verdict is None or any((r.error or {}).get("not_implemented") for r in result.ranks):
        return
    facts = ctx.conform(result.ranks[0].facts, Train, 0, complete=result.ranks[0].ok)
    mixed = [c for c in facts.get("linears", []) if c["input"] != c["weight"] and not c["backward"]]
    units = facts.get("units")
    if not mixed or units is None:
        return
    layer = mixed[0]
    module = _region(layer["name"]) if layer["name"].startswith("blocks.") else ""
    where = f"block {module}" if module else "the root"
    if module not in units:
        state = f"{where} is not an FSDP unit, so nothing casts its parameters"
    else:
        state = f"{where} is an FSDP unit whose policy has param_dtype {units[module]['param_dtype']}"
    raise ctx.fail(
        f"{layer['name']} got a {layer['input']} input and a {layer['weight']} weight (the grader's forward hook, "
        f"just before the error): {state}, while the units before it return bfloat16. Wrap every block and the "
        f"root, each with mp_policy=policy. {verdict.message}",
        hint=HintName("policy"),
    )


# What every check but the final weights' reads: complete once every rank took every step, even where train failed
# after them (a full state dict gathered on rank 0 alone, say) — that failure costs matches_reference alone.
TRAINING_FACTS: Final = ("linears", "collectives", "storage", "units", "steps", "saved", "optimizer", "grads", "losses")


def _every_step(ranks: list[Train]) -> str | None:
    if all(f["steps"] == STEPS and len(f["losses"]) == STEPS for f in ranks):
        return f"the {STEPS} optimizer steps every rank took"
    return None


def _arguments(ctx: CheckContext) -> dict[str, Any]:
    """The arguments of the one training run every check reads."""
    return {**WORKLOAD.arguments(), **ctx.seeds("data", "model")}


def _run(ctx: CheckContext) -> RunResult:
    return ctx.run(TRAIN.name, **_arguments(ctx))


def _ranks(ctx: CheckContext) -> list[Train]:
    _explained(ctx, _run(ctx))
    ranks = ctx.facts_until_failure(TRAIN, TRAINING_FACTS, _every_step, **_arguments(ctx))
    counts = [f["steps"] for f in ranks]
    if counts[0] == 0:
        raise ctx.fail("train never called optimizer.step()", hint=HintName("optimizer"))
    if any(c != STEPS for c in counts):
        raise ctx.fail(
            f"optimizer steps per rank {counts} for {STEPS} batches: one step per batch", hint=HintName("optimizer")
        )
    return ranks


def _units_policy(param_dtype: str) -> dict[str, str]:
    """Every FSDP unit a right wrapping builds (each block, then the root: ""), with this policy's param_dtype."""
    return {unit: param_dtype for unit in ("", *BLOCKS)}


def _linears(reference: Reference) -> list[str]:
    """The model's Linear layers in forward order: its parameters of more than one row and column, by the trusted
    process's names."""
    return [
        name.removesuffix(".weight")
        for name, (elements, rows) in reference["parameters"].items()
        if name.endswith(".weight") and elements != rows
    ]


def _policies(facts: Train) -> dict[str, str]:
    return {unit: seen["param_dtype"] for unit, seen in facts["units"].items()}


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(REFERENCE, world_size=ctx.world_size, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    return facts


def _relative(got: np.ndarray, want: np.ndarray) -> float:
    """The largest difference, relative to the largest element of `want`."""
    if got.shape != want.shape:
        return math.inf
    return float(np.max(np.abs(got - want))) / max(float(np.max(np.abs(want))), 1e-12)


def _worst(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> tuple[str, float]:
    """The tensor furthest from `want` (relative to its own scale) and how far."""
    return max(
        ((name, _relative(np.asarray(got.get(name)), np.asarray(w))) for name, w in want.items()),
        key=lambda item: item[1],
    )


def _whole_gradient(ranks: list[Train]) -> dict[str, np.ndarray]:
    """The first step's gradients, put back together from the ranks' shards (FSDP2 shards along dim 0, rank r
    holding the r-th chunk); a gradient held whole, or missing on some rank, is rank 0's."""
    sharded = {s["name"] for s in ranks[0]["storage"] if s["dtensor"]}
    whole = {}
    for name, first in ranks[0]["grads"].items():
        parts = [np.asarray(f["grads"][name]) for f in ranks if name in f["grads"]]
        same_rank = len({p.ndim for p in parts}) == 1 and len(parts) == len(ranks)
        whole[name] = np.concatenate(parts, axis=0) if name in sharded and same_rank else np.asarray(first)
    return whole


def _region(name: str) -> str:
    """inp, blocks.i or out: the region a parameter or layer belongs to."""
    return ".".join(name.split(".")[:2]) if name.startswith("blocks.") else name.split(".")[0]


@check("shards_fp32_master")
def shards_fp32_master(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    world = ctx.world_size
    for rank, facts in enumerate(ranks):
        whole = [s["name"] for s in facts["storage"] if not s["dtensor"]]
        if whole:
            root = sorted(whole) == ["inp.bias", "inp.weight", "out.bias", "out.weight"]
            raise ctx.fail(
                f"rank {rank} holds {', '.join(whole)} whole, not sharded"
                + (": the root was never wrapped (fully_shard(model, ...) after the blocks)" if root else "")
                + f"; FSDP keeps about 1/{world} of every parameter on each rank",
                hint=HintName("wrap"),
            )
        low = [s for s in facts["storage"] if s["dtype"] != "float32"]
        if low:
            dtype = low[0]["dtype"]
            measured = f"rank {rank} stores its shard of {len(low)} parameters ({low[0]['name']} first) in {dtype}"
            proven = _master_weights_cast(ranks, dtype, _reference(ctx))
            raise ctx.fail(
                f"master weights in {dtype}: {measured}, every rank all {len(low)} of the model's, and the optimizer "
                "holds them: it updates low-precision weights and small updates are rounded away. Keep the model in "
                "float32 (no model.to(torch.bfloat16)); MixedPrecisionPolicy(param_dtype=torch.bfloat16) casts only "
                "the copies gathered for compute"
                if proven
                else f"{measured}, where FSDP's mixed precision keeps every shard in float32 (the policy casts only "
                "the copies gathered for compute)",
                hint=HintName("policy"),
                proven=proven,
            )
    sizes = _reference(ctx)["parameters"]
    for rank, facts in enumerate(ranks):
        names = [s["name"] for s in facts["storage"]]
        if sorted(names) != sorted(sizes):
            missing = sorted(set(sizes) - set(names))
            raise ctx.fail(
                f"rank {rank} stores {len(names)} parameters, not the model's {len(sizes)}"
                + (f" ({', '.join(missing[:3])} missing)" if missing else "")
                + ": wrap the model given, keeping its parameters",
                hint=HintName("wrap"),
            )
    stored_by_name = [{s["name"]: s for s in f["storage"]} for f in ranks]
    for name, (full, rows) in sizes.items():
        most = math.ceil(rows / world) * (full // max(rows, 1))
        locals_ = [mine[name]["local"] for mine in stored_by_name]
        if sum(locals_) != full or max(locals_) > most:
            raise ctx.fail(
                f"{name} ({full} elements): the ranks hold {locals_} of it, not a 1/{world} shard each",
                hint=HintName("wrap"),
            )
    units = ranks[0]["units"]
    for block in BLOCKS:
        own = {name for name in sizes if name.startswith(block + ".")}
        if not any(set(unit["params"]) == own for unit in units.values()):
            holder: list[str] = next((u["params"] for u in units.values() if own & set(u["params"])), [])
            together = list(dict.fromkeys(_region(name) for name in holder))
            raise ctx.fail(
                f"{block} is not an FSDP unit of its own: "
                + (f"one unit gathers {', '.join(together)} together" if holder else "no unit holds it")
                + ", so forward gathers more than one block at once; call fully_shard on each block, then on the "
                "model",
                hint=HintName("wrap"),
            )
    for rank, facts in enumerate(ranks):
        optimizer = facts["optimizer"]
        if "held" not in optimizer:  # steps were counted, yet no first step was seen
            raise ctx.fail(f"rank {rank}'s first optimizer step was not seen", hint=HintName("optimizer"))
        if optimizer["current"] < optimizer["held"] or optimizer["dtypes"] != ["float32"]:
            raise ctx.fail(
                f"rank {rank}'s optimizer holds {optimizer['held']} tensors of dtype {', '.join(optimizer['dtypes'])}, "
                f"{optimizer['current']} of them the model's parameters after wrapping: build it after wrap_model, "
                "over model.parameters() (the fp32 shards)",
                hint=HintName("optimizer"),
            )


def _master_weights_cast(ranks: list[Train], dtype: str, reference: Reference) -> Proven | None:
    """The model cast to `dtype`, proven when what that builds is the run: every parameter of the model stored in
    `dtype` on every rank, and the optimizer holding tensors of that dtype alone."""
    built = {
        "storage": [{name: dtype for name in reference["parameters"]} for _ in ranks],
        "optimizer": [[dtype] for _ in ranks],
    }
    observed = {
        "storage": [{stored["name"]: stored["dtype"] for stored in f["storage"]} for f in ranks],
        "optimizer": [f["optimizer"].get("dtypes") for f in ranks],
    }
    return structural(Cause("low_precision_master_weights"), built, observed)


Seen = Literal["input", "weight", "autocast"]  # what a Linear's forward hook saw, as a proof compares it


def _computed(ranks: list[Train], fields: tuple[Seen, ...]) -> list[dict[str, list[object]]]:
    """Every rank's Linear layers of the first forward: the `fields` each was seen with."""
    return [{call["name"]: [call[field] for field in fields] for call in _layers(f, backward=False)} for f in ranks]


def _compute_proof(
    cause: Cause, ranks: list[Train], linears: list[str], layer: list[object], fields: tuple[Seen, ...], dtype: str
) -> Proven | None:
    """A compute mistake, proven when what it builds is the run: on every rank every Linear of the model seen
    with `layer` (its `fields`), every unit's policy with param_dtype `dtype`, every all-gather in `dtype`
    ("None": float32, as stored)."""
    gathered = "float32" if dtype == "None" else dtype
    built = {
        "linears": [{name: layer for name in linears} for _ in ranks],
        "units": [_units_policy(dtype) for _ in ranks],
        "gathered": [[gathered] for _ in ranks],
    }
    observed = {
        "linears": _computed(ranks, fields),
        "units": [_policies(f) for f in ranks],
        "gathered": [sorted({c["dtype"] for c in f["collectives"] if c["kind"] == "all-gather"}) for f in ranks],
    }
    return structural(cause, built, observed)


def _layers(facts: Train, backward: bool) -> list[Linear]:
    return [call for call in facts["linears"] if call["backward"] == backward]


@check("computes_in_bf16")
def computes_in_bf16(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    for rank, facts in enumerate(ranks):
        gathers = [c for c in facts["collectives"] if c["kind"] == "all-gather"]
        if not gathers:
            raise ctx.fail(f"rank {rank}: no FSDP2 all-gather (dist.all_gather_single) was seen", hint=HintName("wrap"))
        forward = _layers(facts, backward=False)
        if not forward:
            raise ctx.fail(
                f"rank {rank}: no Linear layer of the model ran forward before the first step",
                hint=HintName("optimizer"),
            )
        gathered = sorted({c["dtype"] for c in gathers})
        autocast = [c["name"] for c in forward if c["autocast"]]
        if autocast:
            linears = _linears(_reference(ctx))
            stacked = _compute_proof(
                Cause("autocast_and_policy"), ranks, linears, [True, "bfloat16"], ("autocast", "weight"), "bfloat16"
            )
            instead = _compute_proof(
                Cause("autocast_no_policy"), ranks, linears, [True, "float32"], ("autocast", "weight"), "None"
            )
            measured = (
                f"the grader's hooks saw autocast enabled in the forward of {', '.join(autocast)} on rank {rank}, "
                f"and FSDP all-gathered the parameters in {', '.join(gathered)}"
            )
            if stacked:
                message = (
                    f"autocast stacked on the policy: {measured}, every unit's policy casting them to bf16. The "
                    "policy already casts them to bf16; autocast casts every op's inputs again, and runs some ops in "
                    "float32 (the loss; on CUDA also layer norm and softmax). Drop the autocast"
                )
            elif instead:
                message = (
                    f"autocast instead of the policy: {measured}, no unit's policy casting them. Autocast casts "
                    "after the gather, so the parameters travel in float32, twice the bytes; use "
                    "MixedPrecisionPolicy(param_dtype=torch.bfloat16) instead"
                )
            else:
                units = ", ".join(f"{unit or 'the root'} {dtype}" for unit, dtype in _policies(facts).items())
                message = (
                    f"{measured}; the units' param_dtype: {units or 'no unit'}. MixedPrecisionPolicy(param_dtype="
                    "torch.bfloat16) on every fully_shard call casts for compute, without autocast"
                )
            raise ctx.fail(message, hint=HintName("policy"), proven=stacked or instead)
        wrong = [c for c in forward if c["input"] != "bfloat16" or c["weight"] != "bfloat16"]
        if wrong:
            kinds = {(c["input"], c["weight"]) for c in wrong}
            said = "; ".join(f"{c['name']}: input {c['input']}, weight {c['weight']}" for c in wrong[:4])
            policies = _policies(facts)
            proven = None
            if kinds == {("float16", "float16")} and len(wrong) == len(forward):
                fp16 = ["float16", "float16", False]
                linears = _linears(_reference(ctx))
                proven = _compute_proof(
                    Cause("fp16_compute"), ranks, linears, fp16, ("input", "weight", "autocast"), "float16"
                )
            if proven:
                reason = (
                    "param_dtype=torch.float16 on every unit, every Linear on every rank computed in it: fp16 has a "
                    "range of 65504 and needs loss scaling"
                )
            elif set(policies.values()) == {"None"}:
                reason = "every FSDP unit's policy has param_dtype None: no mixed precision policy"
            else:
                reason = "the units' param_dtype: " + (
                    ", ".join(f"{unit or 'the root'} {dtype}" for unit, dtype in policies.items()) or "no unit"
                )
            raise ctx.fail(
                f"rank {rank}'s Linear layers did not all compute in bfloat16 ({said}): {reason}; pass "
                "mp_policy=MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) to "
                "every fully_shard call",
                hint=HintName("policy"),
                proven=proven,
            )
        if gathered != ["bfloat16"]:
            raise ctx.fail(
                f"rank {rank}: FSDP all-gathered parameters in {', '.join(gathered)}, not bfloat16",
                hint=HintName("policy"),
            )


@check("reduces_in_fp32")
def reduces_in_fp32(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    scatters = [c for c in ranks[0]["collectives"] if c["kind"] == "reduce-scatter"]
    if not scatters:
        raise ctx.fail("rank 0: no FSDP2 reduce-scatter (dist.reduce_scatter_single) was seen", hint=HintName("wrap"))
    dtypes = sorted({c["dtype"] for c in scatters})
    if dtypes == ["float32"]:
        return
    reference = _reference(ctx)
    got = _whole_gradient(ranks)
    want = reference["first_grads"]["correct"]
    low = reference["first_grads"]["bf16_reduce"]
    name, off = _worst(got, want)
    replayed = _worst(got, low)[1]
    tolerance = SAME_CASTS if ctx.backend == "gloo" else WITHIN_BF16
    built = {
        "reduced": [["bfloat16"] * ((len(BLOCKS) + 1) * STEPS) for _ in ranks],
        "storage": [{parameter: "float32" for parameter in reference["parameters"]} for _ in ranks],
        "units": [_units_policy("bfloat16") for _ in ranks],
        "first gradient is the bf16 replay's": True,
    }
    observed = {
        "reduced": [[c["dtype"] for c in f["collectives"] if c["kind"] == "reduce-scatter"] for f in ranks],
        "storage": [{stored["name"]: stored["dtype"] for stored in f["storage"]} for f in ranks],
        "units": [_policies(f) for f in ranks],
        "first gradient is the bf16 replay's": replayed <= tolerance,
    }
    proven = structural(Cause("bf16_reduce"), built, observed)
    measured = (
        f"the grader saw {len(scatters)} reduce-scatters of {', '.join(dtypes)} on rank 0 per run. The gradient "
        f"of step 1 differs from the reference reduced in fp32 by up to {off:.2g} of its scale ({name}), and from "
        f"a replay reducing in bf16 by {replayed:.2g}"
    )
    raise ctx.fail(
        f"gradients reduced in bfloat16: {measured}, with fp32 shards and every unit's param_dtype bf16. Sums of "
        "many ranks' gradients lose bits in bf16; set reduce_dtype=torch.float32 (left unset it is param_dtype)"
        if proven
        else f"{measured}; FSDP's reduce_dtype=torch.float32 reduces them in float32 (left unset it is param_dtype)",
        hint=HintName("policy"),
        proven=proven,
    )


def _spanning_regions(regions: list[str]) -> list[list[str]]:
    """Runs of regions backward recomputed in forward order. Regions checkpointed on their own are recomputed
    one by one as backward reaches them, last first; a region holding several is recomputed whole, first to
    last, before any of them is differentiated."""
    spans: list[list[str]] = []
    for previous, region in zip(regions, regions[1:]):
        if REGIONS.index(region) > REGIONS.index(previous):
            if spans and spans[-1][-1] == previous:
                spans[-1].append(region)
            else:
                spans.append([previous, region])
    return spans


@check("checkpoints_each_block")
def checkpoints_each_block(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    facts = ranks[0]
    saved = facts["saved"]
    plain = reference["saved"]
    recomputed = [c["name"] for c in _layers(facts, backward=True)]
    regions = list(dict.fromkeys(_region(name) for name in recomputed))

    def kept(region: str) -> str:
        count, size = saved.get(region, (0, 0))
        return f"{count} tensors ({size} bytes)"

    linears = _linears(reference)
    spans = _spanning_regions(regions)
    if spans:
        whole = _kept_and_recomputed(
            Cause("whole_model_checkpointed"), saved, recomputed, {region: [0, 0] for region in REGIONS}, linears
        )
        raise ctx.fail(
            f"backward recomputed {', '.join(regions)}, in that order: "
            + "; ".join(", ".join(span) for span in spans)
            + " in forward order, so one checkpointed region spans them (regions of their own are recomputed last "
            "first, each as backward reaches it)"
            + (
                "; that region is the whole model: every Linear recomputed in forward order, no region keeping any"
                if whole
                else ""
            )
            + ". Its recomputation holds all their activations at once: checkpoint each block on its own",
            hint=HintName("checkpoint"),
            proven=whole,
        )
    full = {b: plain[b][1] for b in BLOCKS}
    not_checkpointed = [b for b in BLOCKS if b not in regions or saved.get(b, (0, 0))[1] * 2 > full[b]]
    if not_checkpointed:
        none = len(not_checkpointed) == len(BLOCKS)
        checkpointed = [b for b in BLOCKS if b in regions]
        kept_built: dict[str, object] = {region: list(plain[region]) for region in REGIONS}
        kept_built.update({b: True for b in checkpointed})  # recomputed, and keeping at most half a plain block
        cause = Cause("some_blocks_checkpointed") if checkpointed else Cause("no_checkpointing")
        order = [name for b in reversed(checkpointed) for name in linears if _region(name) == b]
        proven = _kept_and_recomputed(cause, saved, recomputed, kept_built, order, full)
        raise ctx.fail(
            (
                ("no activation checkpointing: " if none else f"only {', '.join(checkpointed)} checkpointed: ")
                if proven
                else ""
            )
            + "in forward, "
            + "; ".join(f"{b} kept {kept(b)} for backward" for b in not_checkpointed)
            + f" (a plain block keeps {plain[BLOCKS[0]][0]} tensors, {plain[BLOCKS[0]][1]} bytes), and backward "
            f"recomputed {', '.join(regions) or 'nothing'}. Wrap every block (checkpoint_wrapper, or "
            "torch.utils.checkpoint.checkpoint(..., use_reentrant=False) in its forward)",
            hint=HintName("checkpoint"),
            proven=proven,
        )
    for block in BLOCKS:  # one region per block: its Linears recomputed together, in forward order
        again = [name.removeprefix(f"{block}.") for name in recomputed if _region(name) == block]
        forward = [name.removeprefix(f"{block}.") for name in linears if _region(name) == block]
        if again != forward:
            raise ctx.fail(
                f"backward recomputed {block}'s Linear layers in the order {', '.join(again)}, where forward ran "
                f"{', '.join(forward)}: they were recomputed one at a time, each as backward reached it, not as one "
                f"region per block. The exercise checkpoints each block whole, so that its LayerNorm and GELU "
                "outputs are recomputed too, not kept: wrap the block itself (checkpoint_wrapper(block))",
                hint=HintName("checkpoint"),
            )


def _kept_and_recomputed(
    cause: Cause,
    saved: dict[str, tuple[int, int]],
    recomputed: list[str],
    kept: dict[str, object],
    order: list[str],
    full: dict[str, int] | None = None,
) -> Proven | None:
    """A checkpointing mistake, proven when what it builds is the run: backward recomputing the Linear layers in
    `order`, and each region keeping for backward what `kept` says (a plain region's [tensors, bytes], as the
    trusted process counts them; [0, 0] inside a checkpointed region; True: a block recomputed, keeping at most
    half a plain block's bytes, `full`)."""
    observed: dict[str, object] = {}
    for region, want in kept.items():
        count, size = saved.get(region, (0, 0))
        observed[region] = size * 2 <= (full or {}).get(region, 0) if want is True else [count, size]
    return structural(cause, {"recomputed": order, "kept": kept}, {"recomputed": recomputed, "kept": observed})


def _replay_proof(ctx: CheckContext, ranks: list[Train], got: dict[str, np.ndarray]) -> replay.Proof:
    """The hypothesis of hypotheses.toml whose replay gives the run's numbers: the first step's gradient, every
    rank's loss at every step and the final weights, each within the tolerance of the same casts. Only on the CPU
    (gloo): a GPU's bf16 kernels round otherwise than the replay's, and bf16's own tolerance (WITHIN_BF16) would
    not tell these hypotheses from the correct run."""
    if ctx.backend != "gloo":
        return replay.Proof(())
    final = ranks[0].get("final")

    def replays(requests: dict[str, ReplayRequest]) -> dict[str, Replayed]:
        asked = {**WORKLOAD.arguments(), "hypotheses": requests}
        return ctx.reference(REPLAYS, world_size=ctx.world_size, **asked, **ctx.seeds("data", "model"))["replays"]

    def reproduced(replayed: Replayed) -> bool:
        losses = [f["losses"] for f in ranks]
        return (
            _worst(got, replayed["first_grads"])[1] <= SAME_CASTS
            and all(len(mine) == STEPS for mine in losses)
            and all(
                abs(losses[rank][step] - want) <= SAME_CASTS * max(abs(want), 1e-3)
                for step, per_rank in enumerate(replayed["losses"])
                for rank, want in enumerate(per_rank)
            )
            and final is not None
            and _worst(final, replayed["final"])[1] <= SAME_CASTS
        )

    return replay.prove(_HYPOTHESES, {"W": float(ctx.world_size)}, {}, replays, reproduced)


def _named(proof: replay.Proof) -> str:
    """What the message adds when one replay reproduces the run."""
    named = proof.named
    return f". It equals, within {SAME_CASTS:g}, a replay with {named[1]}" if named else ""


@check("matches_reference")
def matches_reference(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    if not ranks[0]["grads"]:
        raise ctx.fail(
            "at the first optimizer.step() no parameter the optimizer holds is one of the model's, with a gradient",
            hint=HintName("optimizer"),
        )
    got = _whole_gradient(ranks)
    candidates = reference["first_grads"]
    name, off = _worst(got, candidates["correct"])
    tolerance = SAME_CASTS if ctx.backend == "gloo" else WITHIN_BF16
    if off > tolerance:
        close = [
            label for label, want in candidates.items() if label != "correct" and _worst(got, want)[1] <= tolerance
        ]
        said = {
            "bf16_reduce": "rounded to bfloat16 (what a bf16 reduce gives, and so do gradients kept in bf16)",
            "fp32_compute": "computed in float32 throughout",
            "fp16_compute": "computed in float16",
        }
        ratio = scale_of(got, candidates["correct"])
        proof = _replay_proof(ctx, ranks, got)
        raise ctx.fail(
            f"the gradient of step 1 (rank shards put together) differs from the reference's (bf16 compute, fp32 "
            f"reduce) by up to {off:.2g} of its scale, at {name}; least-squares ratio to it {ratio:.3g}"
            + (
                f"; it equals, within {tolerance:g}, the reference's gradient {said[close[0]]}"
                if len(close) == 1 and not proof.named
                else ""
            )
            + _named(proof),
            hint=_hint(proof, HintName("policy")),
            proven=proof.cause,
        )
    for step in range(STEPS):
        for rank, facts in enumerate(ranks):
            losses = facts["losses"]
            want = reference["losses"][step][rank]
            if len(losses) <= step:
                raise ctx.fail(
                    f"rank {rank} ran {len(losses)} forward passes for {STEPS} batches", hint=HintName("optimizer")
                )
            if abs(losses[step] - want) > tolerance * max(abs(want), 1e-3):
                proof = _replay_proof(ctx, ranks, got)
                # where a replay names the cause, the advice to look at the optimizer would point elsewhere
                advice = (
                    "" if proof.named else ": look at the optimizer, SGD with lr and momentum=0.9 over the fp32 shards"
                )
                raise ctx.fail(
                    f"step {step + 1}, rank {rank}: loss {losses[step]:.6g}, the reference's {want:.6g} (the gradient "
                    f"of step 1 was right{advice})" + _named(proof),
                    hint=_hint(proof, HintName("optimizer")),
                    proven=proof.cause,
                )
    final = ranks[0].get("final")  # the run's failure where rank 0 failed
    if final is None:
        ctx.require(_run(ctx))  # where another rank failed, the grader made no gather: that failure
        error = ranks[0].get("gather_error", "no weights were reported")
        raise ctx.fail(f"the grader could not gather the trained weights: {error}", hint=HintName("wrap"))
    name, off = _worst(final, reference["final"])
    if off > WITHIN_BF16:
        proof = _replay_proof(ctx, ranks, got)
        raise ctx.fail(
            f"after {STEPS} steps {name} differs from the reference's by up to {off:.2g} of its scale" + _named(proof),
            hint=_hint(proof, HintName("optimizer")),
            proven=proof.cause,
        )


def _hint(proof: replay.Proof, otherwise: HintName) -> HintName:
    """The named hypothesis' hint, else the one the measurement points at."""
    named = proof.named
    return (named[0].hint if named else None) or otherwise
