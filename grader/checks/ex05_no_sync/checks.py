"""Judging exercise 5: every optimizer step equals the large-batch step, ranks agree, and the
gradients are all-reduced exactly once per step (counted by the grader's own comm hook).
Each check runs with k = 2 and k = 4 micro-batches per step."""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Literal

from grader.checks.ex05_no_sync.facts import REFERENCE, REPLAYS, TRAIN, WORKLOAD, Reference, Train
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.samples import Batches, Pipeline, diagnose_samples, eval_mode_passes, step_batches, trained_batches
from grader.judge.trajectory import Finding, Setting, diagnose

# 151 samples, batches of 3: the sampler pads, the loader drops a partial micro-batch, and at W=2 a
# trailing group of fewer than k micro-batches makes no step. b = 3 is neither a world size nor a k,
# so a gradient ratio of b, W or k names one cause.
SIZE, BATCH, LR = WORKLOAD.size, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
KS = (2, 4)
_HYPOTHESES = replay.load(__package__ or "")

_HINTS: dict[Cause | Literal["measured"], HintName] = {
    **dict.fromkeys(
        (
            Cause("partial_batch_used"),
            Cause("unshuffled"),
            Cause("epochs_from_one"),
            Cause("no_sampler"),
            Cause("batch_size"),
        ),
        HintName("data_and_optimizer"),
    ),
    Cause("loss_not_divided_by_k"): HintName("divide_loss_by_k"),
    Cause("divided_by_k_twice"): HintName("divide_loss_by_k"),
    Cause("zero_grad_every_micro_step"): HintName("zero_grad_per_step"),
    Cause("gradients_not_cleared"): HintName("zero_grad_per_step"),
    Cause("micro_batches_per_step"): HintName("step_per_group"),
    **dict.fromkeys(
        (
            Cause("optimizer_parameters"),
            Cause("no_momentum"),
            Cause("other_momentum"),
            Cause("nesterov"),
            Cause("weight_decay"),
            Cause("adam_like"),
            Cause("lr_times_world_size"),
            Cause("lr_over_world_size"),
            Cause("lr_times_k"),
            Cause("lr_over_k"),
            Cause("lr_times_batch"),
            Cause("learning_rate"),
            Cause("no_update"),
            Cause("returned"),
            Cause("eval_mode"),
            "measured",
        ),
        HintName("data_and_optimizer"),
    ),
    Cause("never_synchronized"): HintName("no_sync"),
}


def _ranks(ctx: CheckContext, k: int) -> list[Train]:
    ranks = ctx.facts(TRAIN, k=k, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    if not ranks[0]["ddp_wraps"]:
        raise ctx.fail(
            "no DDP wrap: the model was never wrapped in DistributedDataParallel, so no_sync has nothing "
            "to suppress and the gradients are never averaged",
            hint=HintName("no_sync"),
        )
    counts = [len(f["steps"]) for f in ranks]
    if len(set(counts)) != 1:
        raise ctx.fail(f"with k={k} the ranks took different numbers of optimizer steps ({counts})")
    if counts[0] == 0:
        raise ctx.fail(f"with k={k} train_accumulate never called optimizer.step()", hint=HintName("step_per_group"))
    return ranks


def _reference(ctx: CheckContext, k: int) -> Reference:
    facts = ctx.reference(
        REFERENCE, world_size=ctx.world_size, k=k, **WORKLOAD.arguments(), **ctx.seeds("data", "model")
    )
    return facts


def _pipeline(reference: Reference) -> Pipeline:
    return Pipeline(
        SIZE,
        BATCH,
        1,
        reference["batches"],
        reference["mistaken_batches"],
        "DistributedSampler(shuffle=True, seed=0) with a drop_last loader",
        drop_last=True,
        hint=HintName("data_and_optimizer"),
    )


def _each_step(batches: Batches, per_step: int, first: int) -> list[Batches]:
    """The micro-batches of each step when the first step takes `first` of `batches` and every later one
    `per_step`, the last one what is left."""
    rest = batches[first:]
    return [batches[:first]] + [rest[i : i + per_step] for i in range(0, len(rest), per_step)]


def _stepped(facts: Train, expected: Batches, per_step: int, first: int, whole: bool) -> Proven | None:
    """A step after `first` micro-batches, then every `per_step` (1, 1: every micro-step; k, k with `whole`: a
    trailing partial group that still steps; 1, k: the counter off by one), proven when the run's steps take
    exactly those groups of the expected micro-batches: all of them with `whole`, else as many steps as it made."""
    got = step_batches(facts)
    built = _each_step(expected, per_step, first)
    if not got or (whole and len(got) != len(built)):
        return None
    return structural(
        Cause("micro_batches_per_step"),
        {"each step's micro-batches": built[: len(got)]},
        {"each step's micro-batches": got},
    )


def _micro_batches(ranks: list[Train], reference: Reference, k: int, steps: int) -> Finding | None:
    """A mistake in what the first `steps` steps were made of: their samples, or how many micro-batches each."""
    pipeline = _pipeline(reference)
    hint = HintName("step_per_group")
    for facts, expected in zip(ranks, pipeline.expected):
        got = step_batches(facts)[:steps]
        if got == [expected[i * k : (i + 1) * k] for i in range(len(got))]:
            continue
        counts = [len(batches) for batches in got]
        if trained_batches(facts["forwards"])[: sum(counts)] == expected[: sum(counts)]:
            if (proven := _stepped(facts, expected, 1, 1, whole=False)) is not None:
                return Finding(
                    f"stepping every micro-step: with k={k} each optimizer step "
                    f"came after one micro-batch; call optimizer.step() once per {k} micro-batches",
                    hint=hint,
                    proven=proven,
                )
            wrong = next(s for s, count in enumerate(counts, 1) if count != k)
            every = [len(batches) for batches in step_batches(facts)]
            off = _stepped(facts, expected, k, 1, whole=False)  # stepping where i % k == 0
            return Finding(
                f"with k={k}, optimizer step {wrong} came after "
                f"{counts[wrong - 1]} micro-batch(es) instead of {k} (micro-batches per step: "
                f"{every[:6]}...)"
                + (": the accumulation counter is off by one" if off else "")
                + "; step when (i + 1) % k == 0",
                hint=hint,
                proven=off,
            )
        return diagnose_samples([trained_batches(f["forwards"]) for f in ranks], pipeline) or Finding(
            f"with k={k}, step 1 trained on other samples than the reference's first k micro-batches",
            hint=HintName("data_and_optimizer"),
        )
    return None


def _step_count(k: int, mine: list[dict[str, Any]], ranks: list[Train], want: Reference) -> Finding | None:
    expected, micro = len(want["steps"]), want["micro_batches"]
    if len(mine) == expected:
        return None
    setting = f"with k={k}: {micro} full micro-batches of {BATCH} per rank"
    hint = HintName("step_per_group")
    batches = want["batches"][0]
    if (proven := _stepped(ranks[0], batches, 1, 1, whole=True)) is not None:
        return Finding(
            f"stepping every micro-step: {len(mine)} optimizer steps instead of "
            f"{expected} ({setting}); call optimizer.step() once per {k} micro-batches",
            hint=hint,
            proven=proven,
        )
    if (proven := _stepped(ranks[0], batches, k, k, whole=True)) is not None:
        return Finding(
            f"{len(mine)} optimizer steps instead of {expected} ({setting}): the "
            f"trailing group of {micro % k} micro-batch(es) made a step; drop a group of fewer than k",
            hint=hint,
            proven=proven,
        )
    found = _micro_batches(ranks, want, k, len(mine))
    counted = (
        f"{len(mine)} optimizer steps instead of {expected} ({setting}, one step per {k}; a trailing partial "
        "group makes none)"
    )
    if found is None:
        return Finding(counted, hint=hint)
    return replace(found, message=f"{counted}: {found.message}")


def _setting(ctx: CheckContext, k: int, want: Reference) -> Setting:
    replays = ctx.replayer(REPLAYS, world_size=ctx.world_size, k=k, **WORKLOAD.arguments())

    return Setting(
        lr=LR,
        momentum=want["momentum"],
        factors={"b": BATCH, "W": ctx.world_size, "k": k},
        reference=f"one process on the k*b*W = {k * BATCH * ctx.world_size} samples of the step",
        context=f"with k={k}, ",
        hypotheses=_HYPOTHESES,
        replay=replays,
        losses=[step["part_losses"] for step in want["steps"]],
    )


def _problem(ctx: CheckContext, k: int) -> Finding | None:
    ranks, want = _ranks(ctx, k), _reference(ctx, k)
    mine = ranks[0]["steps"]
    counted = _step_count(k, mine, ranks, want)
    if counted:
        return counted
    finding = diagnose(mine, ranks[0]["start"], want["steps"], want["start"], _setting(ctx, k, want))
    if finding is not None:
        never = structural(  # every rank stepping on its own gradients: no all-reduce in any step, on any rank
            Cause("never_synchronized"),
            {f"rank {r}'s all-reduces per step": [0] * len(f["all_reduces_per_step"]) for r, f in enumerate(ranks)},
            {f"rank {r}'s all-reduces per step": list(f["all_reduces_per_step"]) for r, f in enumerate(ranks)},
        )
        if never is not None:
            return Finding(
                f"with k={k}, step {finding.step} differs from the large-batch step "
                "and no gradient was ever all-reduced: " + _why_never_synchronized(ranks[0]),
                hint=HintName("no_sync"),
                proven=never,
            )
        return _micro_batches(ranks, want, k, finding.step) or finding
    difference = first_difference(ranks[0]["final"], want["steps"][-1]["params"])
    if difference:
        untrained = structural(  # the model as it was before training: its initial weights, exactly
            Cause("returned"), {"returned weights": want["start"]}, {"returned weights": ranks[0]["final"]}
        )
        said = "the untrained one (its initial weights, exactly)" if untrained else "not the trained ones"
        return Finding(
            f"train_accumulate returned a model ({ranks[0]['returned']}) whose weights are {said}: {difference}",
            hint=HintName("data_and_optimizer"),
            proven=untrained,
        )
    in_eval, passes = eval_mode_passes(ranks[0]["forwards"])
    if in_eval:
        flags = [call["training"] for call in ranks[0]["forwards"] if call["grad"] and call["samples"]]
        evaluated = structural(
            Cause("eval_mode"),
            {"training flag of each training pass": [False] * passes},
            {"training flag of each training pass": flags},
        )
        return Finding(
            f"the model trained in eval mode: {in_eval} of the {passes} forward passes that "
            "trained ran with model.training False; call model.train() before training",
            hint=HintName("data_and_optimizer"),
            proven=evaluated,
        )
    return None


@check("matches_large_batch")
def matches_large_batch(ctx: CheckContext) -> str:
    found = [finding for k in KS if (finding := _problem(ctx, k))]
    if found:
        # causes this run cannot tell apart (k = W = 2) are named by neither; the other k may tell them apart
        chosen = next((f for f in found if f.cause != "measured"), found[0])
        raise ctx.fail(chosen.message, hint=chosen.hint or _HINTS.get(chosen.cause), proven=chosen.proven)
    return f"k = {' and '.join(map(str, KS))}: every optimizer step equals one process on its k*b*W samples"


def _why_never_synchronized(facts: Train) -> str:
    """Why DDP never all-reduced, from how the forward passes ran."""
    training = [call for call in facts["forwards"] if call["grad"]]
    if any(not call["ddp"] for call in training):
        return (
            "forward through the unwrapped model: the forward passes did not go through the DDP wrapper, whose "
            "forward arms the all-reduce of the coming backward"
        )
    return (
        "every forward pass ran inside no_sync, the last micro-batch's too (DDP decides in the forward pass "
        "whether the coming backward all-reduces); run the k-th forward and backward outside no_sync"
    )


@check("ranks_stay_in_sync")
def ranks_stay_in_sync(ctx: CheckContext) -> None:
    for k in KS:
        ranks = _ranks(ctx, k)
        for rank, facts in enumerate(ranks[1:], 1):
            for step, (mine, first) in enumerate(zip(facts["steps"], ranks[0]["steps"]), 1):
                difference = first_difference(mine["params"], first["params"], rtol=1e-6, atol=1e-7)
                if difference is None:
                    continue
                if sum(ranks[0]["all_reduces_per_step"]) == 0:
                    raise ctx.fail(
                        f"no gradient was ever all-reduced: with k={k} the ranks diverge at step {step} "
                        f"(rank {rank}'s {difference} from rank 0's): {_why_never_synchronized(ranks[0])}",
                        hint=HintName("no_sync"),
                    )
                raise ctx.fail(
                    f"with k={k} the ranks diverge at step {step}: rank {rank}'s {difference} from "
                    f"rank 0's (all-reduces per step on rank 0: {ranks[0]['all_reduces_per_step'][:6]})",
                    hint=HintName("no_sync"),
                )


@check("one_allreduce_per_step")
def one_allreduce_per_step(ctx: CheckContext) -> str:
    for k in KS:
        ranks, want = _ranks(ctx, k), _reference(ctx, k)
        counted = _step_count(k, ranks[0]["steps"], ranks, want)
        if counted:
            raise ctx.fail(counted.message, hint=HintName("step_per_group"))
        counts = ranks[0]["all_reduces_per_step"]
        if all(count == 1 for count in counts):
            continue
        if all(count == k for count in counts):
            if not ranks[0]["no_sync_entries"]:
                raise ctx.fail(
                    f"correct but k times the communication: with k={k} every optimizer step all-reduced "
                    f"the gradients {k} times, once per micro-batch, and no_sync was never used; run the "
                    "first k-1 micro-batches inside ddp_model.no_sync()",
                    hint=HintName("no_sync"),
                )
            raise ctx.fail(
                f"no_sync had no effect: with k={k} every optimizer step all-reduced the gradients {k} "
                f"times, although no_sync was entered {len(ranks[0]['no_sync_entries'])} times; the forward "
                "passes ran outside it (DDP decides in the forward pass whether the coming backward "
                "all-reduces): put the forward pass of micro-batches 1..k-1 inside no_sync too",
                hint=HintName("no_sync"),
            )
        if all(count == 0 for count in counts):
            raise ctx.fail(
                f"no gradient all-reduce at all with k={k}: {_why_never_synchronized(ranks[0])}",
                hint=HintName("no_sync"),
            )
        raise ctx.fail(
            f"with k={k} the gradient all-reduces per optimizer step were {counts}; expected exactly one "
            "per step, on the last micro-batch",
            hint=HintName("no_sync"),
        )
    size = 4 * ranks[0]["parameters"]  # fp32 gradients
    return f"one all-reduce of {size} bytes per optimizer step, where accumulating without no_sync sends k times that"
