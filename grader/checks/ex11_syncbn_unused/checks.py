"""Judging exercise 11: SyncBatchNorm layers, running statistics of the global batch, and training
through a branch whose parameters are unused every other step."""

from __future__ import annotations

import numpy as np

from grader.checks.ex11_syncbn_unused.facts import REFERENCE, TRAIN, WORKLOAD, Arrays, Reference, Trained
from grader.engine import RunResult
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.explain import error_messages
from grader.judge.names import HintName
from grader.judge.wording import article

SIZE, BATCH, STEPS, LR = WORKLOAD.size, WORKLOAD.batch_size, WORKLOAD.steps, WORKLOAD.lr  # as messages name them
UNUSED_MESSAGES = ("not used in producing loss", "did not receive grad", "Expected to have finished reduction")
STATISTICS = ("norm.running_mean", "norm.running_var")


def _run(ctx: CheckContext) -> RunResult:
    return ctx.run(TRAIN.name, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(
        REFERENCE,
        world_size=ctx.world_size,
        **WORKLOAD.arguments(),
        **ctx.seeds("data", "model"),
    )
    return facts


def _reported(ctx: CheckContext, result: RunResult) -> list[tuple[int, Trained]]:
    """Each rank's facts as far as it got (a rank may crash after preparing its model), held to the schema."""
    return [
        (outcome.rank, ctx.conform(outcome.facts, Trained, outcome.rank, complete=False)) for outcome in result.ranks
    ]


def _unused_parameter_error(result: RunResult) -> str:
    for outcome in result.ranks:
        message = error_messages(outcome.error)
        if any(text in message for text in UNUSED_MESSAGES):
            return f"rank {outcome.rank}"
    return ""


def _same_layers_everywhere(ctx: CheckContext, result: RunResult) -> None:
    """The ranks must convert alike: a SyncBatchNorm on some ranks all-reduces with peers that never
    join, and the run then dies in mismatched collectives."""
    layers = [(rank, facts["norm_layers"]) for rank, facts in _reported(ctx, result) if "norm_layers" in facts]
    for rank, mine in layers[1:]:
        if mine != layers[0][1]:
            raise ctx.fail(
                f"the ranks prepared different models: rank {layers[0][0]} has {layers[0][1]}, rank {rank} "
                f"has {mine}; every rank must convert its BatchNorm layers (SyncBatchNorm all-reduces "
                "with every rank of its group in each forward)",
                hint=HintName("sync_batchnorm"),
            )


def _ranks(ctx: CheckContext) -> list[Trained]:
    """Every rank's facts after the full training; DDP's unused-parameter error is named here."""
    result = _run(ctx)
    _same_layers_everywhere(ctx, result)
    rank = _unused_parameter_error(result)
    if rank and any(facts.get("static_graph") for _, facts in _reported(ctx, result)):
        raise ctx.fail(
            "static_graph=True on a graph that changes: the aux head is used on even steps only, so the "
            f"set of unused parameters changes from step to step, and {rank} failed at the next step "
            "(DDP: 'your training graph has changed in this iteration'). static_graph fits only a "
            "fixed set; pass find_unused_parameters=True instead",
            hint=HintName("find_unused_parameters"),
        )
    if rank:
        raise ctx.fail(
            f"parameters that received no gradient: the aux head is unused on odd steps, so DDP never "
            f"reduced its gradient bucket, and {rank} failed at the next step with DDP's "
            "'parameters that were not used in producing loss' error. Pass "
            "find_unused_parameters=True to DistributedDataParallel",
            hint=HintName("find_unused_parameters"),
        )
    ranks = ctx.require(result, schema=Trained)
    for number, facts in enumerate(ranks):
        on = f" on rank {number}" if number else ""
        if facts["returned"] != "DistributedDataParallel":
            raise ctx.fail(
                f"prepare_model returned {article(str(facts['returned']))}{on}, not the DistributedDataParallel model",
                hint=HintName("return_ddp"),
            )
        if "steps" not in facts:  # a class of that name, not torch's: the grader's loop never ran
            raise ctx.fail(
                f"prepare_model returned a DistributedDataParallel{on} that is not torch's "
                "(torch.nn.parallel.DistributedDataParallel)",
                hint=HintName("return_ddp"),
            )
        if len(facts["steps"]) != STEPS:
            raise ctx.fail(
                f"rank {number} reported facts the grader cannot judge: {len(facts['steps'])} steps, not {STEPS}"
            )
    return ranks


@check("converts_batchnorm")
def converts_batchnorm(ctx: CheckContext) -> None:
    """Judged from every rank that got as far as preparing its model (a rank may crash later)."""
    result = _run(ctx)
    _same_layers_everywhere(ctx, result)
    prepared = [(rank, facts["norm_layers"]) for rank, facts in _reported(ctx, result) if "norm_layers" in facts]
    if not prepared:
        ctx.require(result, schema=Trained)
    for rank, layers in prepared:
        on = f" on rank {rank}" if len(prepared) < ctx.world_size else ""
        plain = [name for name, kind in layers.items() if kind != "SyncBatchNorm"]
        if plain and "BatchNorm" in layers[plain[0]]:
            raise ctx.fail(
                f"BatchNorm not converted{on}: {plain[0]} is a {layers[plain[0]]}; "
                "nn.SyncBatchNorm.convert_sync_batchnorm(model) replaces every BatchNorm layer",
                hint=HintName("sync_batchnorm"),
            )
        if plain:
            raise ctx.fail(
                f"the BatchNorm layer was replaced{on}: {plain[0]} is a {layers[plain[0]]}, another "
                "normalization than the model's; keep BatchNorm and synchronize it with "
                "nn.SyncBatchNorm.convert_sync_batchnorm(model)",
                hint=HintName("sync_batchnorm"),
            )
        if not layers:
            raise ctx.fail(
                "the prepared model has no normalization layer left: convert BatchNorm, do not remove it",
                hint=HintName("sync_batchnorm"),
            )


def _statistics_mistake(got: Arrays, local: Arrays, layers: dict[str, str]) -> str:
    """Why a rank's running statistics are not the global batch's, from what they equal instead."""
    mean, var = (np.asarray(got[name]) for name in STATISTICS)
    if np.all(mean == 0.0) and np.all(var == 1.0):
        return (
            "they are still their initial values (mean 0, variance 1): BatchNorm never ran a training-mode "
            "forward, so the model was in eval mode (model.eval()?)"
        )
    if first_difference(got, local) is None:
        if all(kind == "SyncBatchNorm" for kind in layers.values()):
            return (
                "they are those of this rank's own batch alone: the SyncBatchNorm layers synchronized with no "
                "other rank (a process group of this rank only?)"
            )
        return (
            f"they are those of this rank's own batch of {BATCH} samples alone: the BatchNorm layers were not "
            "converted, so each rank tracks its own batch"
        )
    return "they are neither the global batch's nor this rank's own batch's"


def _wrapped_inside(state: Arrays, name: str) -> str:
    """Why a name the model has is missing from what DDP wraps: a wrapper inside DDP, or no such layer."""
    nested = next((key for key in state if key.endswith("." + name)), "")
    if nested:
        return (
            f", it has {nested!r}: the module inside DistributedDataParallel is itself a wrapper "
            f"({nested[: -len(name) - 1]}); wrap the plain model, once"
        )
    return ": its BatchNorm layer (with its running statistics) must stay, converted to SyncBatchNorm"


@check("global_batch_statistics")
def global_batch_statistics(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    want = {name: reference["steps"][0][name] for name in STATISTICS}
    for rank, facts in enumerate(ranks):
        after = facts["steps"][0]
        missing = [name for name in STATISTICS if name not in after]
        if missing:
            raise ctx.fail(
                f"the prepared model has no {missing[0]}{_wrapped_inside(after, missing[0])}",
                hint=HintName("sync_batchnorm"),
            )
        got = {name: after[name] for name in STATISTICS}
        difference = first_difference(got, want)
        if difference:
            why = _statistics_mistake(got, reference["local"][rank], facts["norm_layers"])
            raise ctx.fail(
                f"after step 1, rank {rank}'s running statistics are not those of the global batch of "
                f"{BATCH * ctx.world_size} samples ({difference}): {why}",
                hint=HintName("sync_batchnorm"),
            )


@check("trains_with_unused_branch")
def trains_with_unused_branch(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    for step, want in enumerate(reference["steps"], 1):
        parameters = {name: value for name, value in want.items() if name not in STATISTICS}
        for rank, facts in enumerate(ranks):
            difference = first_difference(facts["steps"][step - 1], parameters)
            if difference and difference.name not in facts["steps"][0]:
                raise ctx.fail(
                    f"the prepared model has no {difference.name}{_wrapped_inside(facts['steps'][0], difference.name)}",
                    hint=HintName("return_ddp"),
                )
            if difference:
                frozen = ""
                if all(
                    np.array_equal(after[difference.name], facts["steps"][0][difference.name])
                    for after in facts["steps"]
                ):
                    frozen = (
                        f"; {difference.name} never changed in {len(facts['steps'])} steps while the reference's "
                        "did: it gets no update (its requires_grad switched off?)"
                    )
                raise ctx.fail(
                    f"step {step} (aux head {'used' if step % 2 else 'unused'}) on rank {rank} differs "
                    f"from one process training on the union of the ranks' batches: {difference}{frozen}",
                    hint=HintName("find_unused_parameters"),
                )
