"""Judging exercise 3: sync across ranks, equality with the large-batch reference, and the
checkpoint: who wrote it, whether the others waited for it, what it holds."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final, Literal

from grader.checks.ex03_train_ddp.facts import (
    INSPECT_CHECKPOINT,
    REFERENCE,
    REPLAYS,
    TRAIN,
    WORKLOAD,
    Checkpoint,
    Reference,
    Train,
)
from grader.judge import replay
from grader.judge.api import CheckContext, UpToFailure, check
from grader.judge.compare import Arrays, first_difference
from grader.judge.diagnose import where
from grader.judge.names import Cause, HintName
from grader.judge.proof import structural
from grader.judge.samples import Pipeline, diagnose_samples, eval_mode_passes, step_batches, trained_batches
from grader.judge.trajectory import Finding, Setting, diagnose
from grader.judge.writes import barrier_callers, landed_at, went_on_early, writers_problem

SIZE, EPOCHS, BATCH, LR = WORKLOAD.size, WORKLOAD.epochs, WORKLOAD.batch_size, WORKLOAD.lr  # for messages
_HYPOTHESES = replay.load(__package__ or "")

# the hint that addresses each cause a diagnosis can name
_HINTS: dict[Cause | Literal["measured"], HintName] = {
    **dict.fromkeys(
        (
            Cause("no_sampler"),
            Cause("batch_size"),
            Cause("dropped_partial_batch"),
            Cause("no_set_epoch"),
            Cause("unshuffled"),
            Cause("epochs_from_one"),
        ),
        HintName("data_sampler"),
    ),
    **dict.fromkeys(
        (Cause("loss_summed"), Cause("divided_by_b"), Cause("summed_over_ranks"), Cause("divided_by_world_size")),
        HintName("mean_loss"),
    ),
    Cause("not_averaged"): HintName("forward_through_wrapper"),
    **dict.fromkeys(
        (
            Cause("optimizer_parameters"),
            Cause("gradients_not_cleared"),
            Cause("no_momentum"),
            Cause("other_momentum"),
            Cause("nesterov"),
            Cause("weight_decay"),
            Cause("adam_like"),
            Cause("lr_times_world_size"),
            Cause("lr_over_world_size"),
            Cause("lr_times_batch"),
            Cause("learning_rate"),
            Cause("no_update"),
            Cause("zero_gradient"),
            Cause("no_gradient"),
            Cause("steps_per_batch"),
        ),
        HintName("optimizer"),
    ),
}


def _checkpoint_path(ctx: CheckContext) -> str:
    return str(ctx.scratch / f"checkpoint-w{ctx.world_size}.pt")


def _training(ctx: CheckContext) -> dict[str, Any]:
    """The arguments of the one training run every check reads."""
    return {**WORKLOAD.arguments(), "checkpoint_path": _checkpoint_path(ctx), **ctx.seeds("data", "model")}


# What the checks of the training itself read: complete once every rank took every step, even if the run failed
# after that (in the save, or at a barrier) — a failure there costs the checkpoint's checks, not the training's.
TRAINING_FACTS: Final = ("ddp_wraps", "initial", "start", "steps", "forwards")


def _every_step(ctx: CheckContext) -> Callable[[list[Train]], str | None]:
    """Proof that the training facts are complete: every rank took as many finished steps as the reference."""

    def proof(ranks: list[Train]) -> str | None:
        want = len(_reference(ctx)["steps"])
        if all(len(f["steps"]) == want and all("params" in step for step in f["steps"]) for f in ranks):
            return f"the {want} optimizer steps every rank took"
        return None

    return proof


def _saved_by_rank0(ctx: CheckContext) -> Callable[[list[Train]], str | None]:
    """Proof that the write records are complete for who wrote the checkpoint: rank 0 alone failed, after its save
    of the checkpoint had ended (whatever it would have done next, no other rank can have written it then)."""

    def proof(ranks: list[Train]) -> str | None:
        if any(isinstance(f, UpToFailure) for f in ranks[1:]) or not isinstance(ranks[0], UpToFailure):
            return None
        path = _checkpoint_path(ctx)
        saves = [e for e in ranks[0]["writes"] if e.get("op") == "save" and e.get("into") == "path"]
        if any(e.get("path") == path and "end" in e for e in saves):
            return "the writes of every rank, with rank 0's finished save of the checkpoint"
        return None

    return proof


def _trained(ctx: CheckContext) -> list[Train]:
    """_ranks, also judged where the run failed after every step (TRAINING_FACTS)."""
    return _ranks(ctx, ctx.facts_until_failure(TRAIN, TRAINING_FACTS, _every_step(ctx), **_training(ctx)))


def _saved(ctx: CheckContext) -> list[Train]:
    """_ranks, also judged where rank 0 alone failed after its save had ended (its steps and writes:
    _saved_by_rank0)."""
    return _ranks(ctx, ctx.facts_until_failure(TRAIN, ("steps", "writes"), _saved_by_rank0(ctx), **_training(ctx)))


def _returned(ranks: list[Train]) -> Train:
    """A rank that returned from train_ddp (rank 0 if it did); reading rank 0's "final" where none did fails the
    check with the run's failure (UpToFailure)."""
    return next((f for f in ranks if "final" in f), ranks[0])


def _ranks(ctx: CheckContext, reported: list[Train] | None = None) -> list[Train]:
    ranks = ctx.facts(TRAIN, **_training(ctx)) if reported is None else reported
    counts = [len(f["steps"]) for f in ranks]
    if len(set(counts)) != 1:
        raise ctx.fail(
            f"the ranks took different numbers of optimizer steps ({counts}): a rank that stops "
            "early leaves the others waiting in an all-reduce"
        )
    if counts[0] == 0:
        raise ctx.fail("train_ddp never called optimizer.step()")
    return ranks


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(REFERENCE, world_size=ctx.world_size, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    return facts


def _checkpoint(ctx: CheckContext) -> Checkpoint:
    return ctx.inspect(INSPECT_CHECKPOINT, path=_checkpoint_path(ctx))


def _fail(ctx: CheckContext, finding: Finding, prefix: str = "") -> Exception:
    hint = finding.hint or _HINTS.get(finding.cause)
    return ctx.fail(prefix + finding.message, hint=hint, proven=finding.proven)


def _differs(a: Arrays, b: Arrays) -> bool:
    return first_difference(a, b, rtol=1e-6, atol=1e-7) is not None


@check("ranks_stay_in_sync")
def ranks_stay_in_sync(ctx: CheckContext) -> None:
    ranks = _trained(ctx)
    wrapped = all(f["ddp_wraps"] for f in ranks)
    for rank, facts in enumerate(ranks[1:], 1):
        if _differs(facts["start"], ranks[0]["start"]):
            if not wrapped:
                raise ctx.fail(
                    f"no DDP wrap: rank {rank} started training from other weights than rank 0 (the grader "
                    "seeds each rank differently; DDP's constructor broadcasts rank 0's weights)",
                    hint=HintName("wrap_model"),
                )
            raise ctx.fail(
                f"rank {rank}'s first optimizer step started from other weights than rank 0's "
                f"({first_difference(facts['start'], ranks[0]['start'])}), although a DDP was built: "
                "the optimizer does not step the parameters of the wrapped model"
            )
        for step, (mine, first) in enumerate(zip(facts["steps"], ranks[0]["steps"]), 1):
            if not _differs(mine["params"], first["params"]):
                continue
            difference = first_difference(mine["params"], first["params"], rtol=1e-6, atol=1e-7)
            if not wrapped:
                raise ctx.fail(
                    f"no DDP wrap: ranks diverge at step {step} ({difference}); the gradients "
                    "are never averaged across ranks",
                    hint=HintName("wrap_model"),
                )
            outside = [r for r, f in enumerate(ranks) if any(c["grad"] and not c["ddp"] for c in f["forwards"])]
            if outside:
                raise ctx.fail(
                    f"forward through the unwrapped model: rank {outside[0]}'s forward passes did not go "
                    f"through the DDP wrapper, so its gradients were never averaged; the ranks diverge at "
                    f"step {step} (rank {rank}'s {difference})",
                    hint=HintName("forward_through_wrapper"),
                )
            gradient = first_difference(mine["grads"], first["grads"], rtol=1e-6, atol=1e-7)
            if gradient:
                raise ctx.fail(
                    f"ranks diverge at step {step}: rank {rank}'s gradient differs from rank 0's "
                    f"({gradient}): the gradients were not averaged across ranks before the step"
                )
            raise ctx.fail(
                f"ranks diverge at step {step}: rank {rank}'s gradient equals rank 0's, but its weights "
                f"after the step differ ({difference}): the ranks applied different updates"
            )


def _setting(ctx: CheckContext, reference: Reference) -> Setting:
    per_epoch = len(reference["batches"][0]) // EPOCHS
    # steps count from 1 (the first update is step 1); epochs from 0, as set_epoch(epoch) counts them
    labels = {epoch * per_epoch + 1: f"the first step of epoch {epoch}" for epoch in range(1, EPOCHS)}

    replays = ctx.replayer(REPLAYS, world_size=ctx.world_size, **WORKLOAD.arguments())

    return Setting(
        lr=LR,
        momentum=reference["momentum"],
        factors={"b": BATCH, "W": ctx.world_size},
        reference="one process on the union of the ranks' batches",
        labels=labels,
        hypotheses=_HYPOTHESES,
        replay=replays,
        losses=[step["part_losses"] for step in reference["steps"]],
    )


def _pipeline(reference: Reference) -> Pipeline:
    return Pipeline(
        SIZE,
        BATCH,
        EPOCHS,
        reference["batches"],
        reference["mistaken_batches"],
        "DistributedSampler(shuffle=True, seed=0) with set_epoch(epoch)",
        hint=HintName("data_sampler"),
    )


def _data_before(ranks: list[Train], reference: Reference, steps: int) -> Finding | None:
    """A data mistake, if some rank's first `steps` steps did not train on one expected batch each."""
    pipeline = _pipeline(reference)
    for facts, expected in zip(ranks, pipeline.expected):
        got = step_batches(facts)[:steps]
        if got == [[batch] for batch in expected[:steps]]:
            continue
        found = diagnose_samples([trained_batches(f["forwards"]) for f in ranks], pipeline)
        if found:
            return found
        many = next((s for s, batches in enumerate(got, 1) if len(batches) != 1), None)
        if many is not None:
            return Finding(
                f"step {many} came after {len(got[many - 1])} forward passes with autograd on, "
                "where one batch makes one step",
                hint=HintName("data_sampler"),
            )
    return None


@check("matches_large_batch")
def matches_large_batch(ctx: CheckContext) -> None:
    ranks = _trained(ctx)
    reference = _reference(ctx)
    mine, want = ranks[0]["steps"], reference["steps"]
    if len(mine) != len(want):
        batches = trained_batches(ranks[0]["forwards"])
        per_batch = len(mine) // len(batches) if batches else 0
        proven = structural(  # several steps after each batch: the batches, then steps that saw no new one
            Cause("steps_per_batch"),
            {
                "each step's new batches": [
                    step for batch in reference["batches"][0] for step in [[batch]] + [[]] * (per_batch - 1)
                ]
            },
            {"each step's new batches": step_batches(ranks[0])},
        )
        found: Finding | None = (
            Finding(f"{per_batch} optimizer steps per batch: optimizer.step() is called once per batch", proven=proven)
            if per_batch > 1 and proven is not None
            else _data_before(ranks, reference, len(mine))
        )
        counted = (
            f"{len(mine)} optimizer steps instead of {len(want)} ({EPOCHS} epochs of {SIZE} samples, batches "
            f"of {BATCH} per rank)"
        )
        if found is None:
            raise ctx.fail(counted)
        raise _fail(ctx, found, f"{counted}: ")
    finding = diagnose(mine, ranks[0]["start"], want, reference["start"], _setting(ctx, reference))
    if finding:
        raise _fail(ctx, _data_before(ranks, reference, finding.step) or finding)
    returned = _returned(ranks)
    difference = first_difference(returned["final"], want[-1]["params"])
    if difference:
        raise ctx.fail(
            f"train_ddp returned a model ({returned['returned']}) whose weights are not the trained ones: {difference}"
        )
    in_eval, passes = eval_mode_passes(ranks[0]["forwards"])
    if in_eval:
        raise ctx.fail(
            f"the model trained in eval mode: {in_eval} of the {passes} forward passes that trained ran "
            "with model.training False (layers such as dropout and batch norm then behave as in "
            "evaluation); call model.train() before training"
        )


@check("checkpoint_rank0_only")
def checkpoint_rank0_only(ctx: CheckContext) -> None:
    ranks = _saved(ctx)
    path = _checkpoint_path(ctx)
    problem = writers_problem([f["writes"] for f in ranks], path, _checkpoint(ctx)["exists"], once=False)
    if problem:
        raise ctx.fail(problem, hint=HintName("rank0_saves"))


def _barrier_reached_by_some(ctx: CheckContext) -> None:
    """A run that failed because a barrier only some ranks called was left alone by the others (rank 0
    then raises in it, its peers gone): fail with who called the barrier and who went on, measured
    from the facts every rank reported, before the run's failure is reported as a crash."""
    result = ctx.run(TRAIN.name, **_training(ctx))  # the shared run of _ranks
    failed = [outcome for outcome in result.ranks if not outcome.ok]
    if not failed or any((outcome.error or {}).get("not_implemented") for outcome in failed):
        return
    facts = [ctx.conform(outcome.facts, Train, outcome.rank, complete=outcome.ok) for outcome in result.ranks]
    writes = [f.get("writes", []) for f in facts]
    returns = [[f["returned_at"]] if "returned_at" in f else [] for f in facts]
    early = went_on_early(writes, _checkpoint_path(ctx), [f.get("host", "") for f in facts], returns)
    callers = barrier_callers(writes, early)
    if callers:
        then = "; ".join(
            f"rank {outcome.rank} then raised {(outcome.error or {}).get('type', 'an error')}"
            + (f" at {place}" if (place := where(outcome, ctx.student_file)) else "")
            for outcome in failed
        )
        raise ctx.fail(
            f"{callers}: rank {early[0]} returned from train_ddp before rank 0's checkpoint was on disk"
            f"{'; ' + then if then else ''}. A barrier holds the ranks back only when every rank calls it: "
            "after rank 0's torch.save, outside the `if`",
            hint=HintName("rank0_saves"),
            explains=result,
        )


@check("waits_for_checkpoint")
def waits_for_checkpoint(ctx: CheckContext) -> None:
    _barrier_reached_by_some(ctx)
    ranks = _ranks(ctx)
    writes = [f["writes"] for f in ranks]
    if landed_at(writes, _checkpoint_path(ctx)) is None:
        raise ctx.fail("no rank wrote the checkpoint, so no rank could wait for it", hint=HintName("rank0_saves"))
    returns = [[f["returned_at"]] for f in ranks]
    early = went_on_early(writes, _checkpoint_path(ctx), [f["host"] for f in ranks], returns)
    callers = barrier_callers(writes, early)
    if callers:
        raise ctx.fail(
            f"{callers}: rank {early[0]} returned from train_ddp before rank 0's checkpoint was on disk (the "
            "grader holds rank 0's save until the other ranks wait for it or move on). A barrier holds the "
            "ranks back only when every rank calls it: after rank 0's torch.save, outside the `if`",
            hint=HintName("rank0_saves"),
        )
    if early:
        raise ctx.fail(
            f"no barrier after the save: rank {early[0]} returned from train_ddp before rank 0's "
            "checkpoint was on disk (the grader holds rank 0's save until the other ranks wait for it or "
            "move on); every rank waits at dist.barrier() after rank 0's torch.save",
            hint=HintName("rank0_saves"),
        )


@check("checkpoint_loads_plain")
def checkpoint_loads_plain(ctx: CheckContext) -> None:
    ranks = _saved(ctx)
    saved = _checkpoint(ctx)
    if not saved["exists"]:
        raise ctx.fail("no checkpoint was written at checkpoint_path", hint=HintName("rank0_saves"))
    if saved.get("problem"):
        raise ctx.fail(f"the checkpoint cannot be used: {saved['problem']}")
    prefixed = [key for key in saved["keys"] if key.startswith("module.")]
    if prefixed:
        raise ctx.fail(
            f"`module.` prefix in the checkpoint (e.g. {prefixed[0]!r}): that is the DDP wrapper's "
            "state_dict, which a plain model cannot load; save model.state_dict() of the inner model",
            hint=HintName("unwrapped_state_dict"),
        )
    if saved["loads_plain"]:
        raise ctx.fail(f"the checkpoint does not load into a plain model: {saved['loads_plain']}")
    difference = first_difference(saved["tensors"], _returned(ranks)["final"])
    if difference:
        raise ctx.fail(f"the checkpoint does not hold the trained weights: {difference}")
