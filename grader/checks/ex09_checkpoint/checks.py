"""Judging exercise 9: who saves, whether the others wait for the file, what the file holds, and
whether resumed training continues exactly where it stopped."""

from __future__ import annotations

import math
from typing import Any

from grader.checks.api import CheckContext, check
from grader.checks.compare import first_difference
from grader.engine import RunResult

SIZE, BATCH, LR = 96, 4, 0.05
STEPS_BEFORE, STEPS_AFTER = 3, 3
PARAMETERS = 4  # TinyRegressor: two weights, two biases


def _path(ctx: CheckContext) -> str:
    return str(ctx.scratch / f"checkpoint-w{ctx.world_size}.pt")


def _early_load(result: RunResult) -> str:
    """'rank r ...' if some rank read the checkpoint before rank 0 had finished writing it."""
    saves = [e for e in result.ranks[0].facts.get("events", []) if e["call"] == "save"]
    written = max((e.get("end", math.inf) for e in saves), default=None)
    for outcome in result.ranks[1:]:
        loads = [e for e in outcome.facts.get("events", []) if e["call"] == "load"]
        missing = (outcome.error or {}).get("type") == "FileNotFoundError" and loads
        if missing or (written is not None and any(e["start"] < written for e in loads)):
            return f"rank {outcome.rank} called torch.load before rank 0 had finished writing the checkpoint"
    return ""


def _run(ctx: CheckContext) -> RunResult:
    """The shared run; a load that raced the save is named before anything else."""
    result = ctx.run("resume", size=SIZE, batch_size=BATCH, steps_before=STEPS_BEFORE, steps_after=STEPS_AFTER,
                     lr=LR, path=_path(ctx))
    stub = any((r.error or {}).get("not_implemented") for r in result.ranks)
    race = "" if stub else _early_load(result)
    if race:
        raise ctx.fail(f"no barrier between save and load: {race} (the grader makes rank 0's save slow). "
                       "Every rank must wait at dist.barrier() after rank 0's torch.save", hint=3)
    return result


def _ranks(ctx: CheckContext) -> list[dict[str, Any]]:
    return ctx.require(_run(ctx))


@check("saves_once_rank0")
def saves_once_rank0(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    for rank, facts in enumerate(ranks[1:], 1):
        saves = [e for e in facts["events"] if e["call"] == "save"]
        if saves:
            raise ctx.fail(f"every rank saving: rank {rank} also called torch.save({saves[0].get('path')!r}); only "
                           "rank 0 writes, the weights are the same everywhere", hint=2)
    paths = [e.get("path") for e in ranks[0]["events"] if e["call"] == "save"]
    if _path(ctx) not in paths:
        raise ctx.fail(f"rank 0 did not save to the path it was given (torch.save calls: {paths or 'none'})", hint=2)


@check("waits_for_save")
def waits_for_save(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    for rank, facts in enumerate(ranks):
        if not any(e["call"] == "load" for e in facts["events"]):
            raise ctx.fail(f"rank {rank} never called torch.load: every rank restores from the file", hint=4)


@check("checkpoint_contents")
def checkpoint_contents(ctx: CheckContext) -> None:
    result = _run(ctx)
    saved = ctx.inspect("inspect_checkpoint", path=_path(ctx))
    if not saved["exists"]:
        ctx.require(result)
        raise ctx.fail("no checkpoint was written at the path given to save_checkpoint", hint=2)
    if saved.get("problem"):
        raise ctx.fail(f"the checkpoint cannot be read: {saved['problem']}")
    if "model" not in saved:
        raise ctx.fail(f"the checkpoint has no 'model' state dict (its keys: {saved['keys']})", hint=1)
    prefixed = [key for key in saved["model"] if key.startswith("module.")]
    if prefixed:
        raise ctx.fail(f"`module.` prefix in the saved model (e.g. {prefixed[0]!r}): that is the DDP wrapper's "
                       "state_dict; save ddp_model.module.state_dict()", hint=1)
    if saved.get("momentum_buffers", 0) < PARAMETERS:
        raise ctx.fail(f"optimizer state not saved: the checkpoint holds {saved.get('momentum_buffers', 0)} momentum "
                       f"buffers for {PARAMETERS} parameters (its keys: {saved['keys']}); save optimizer.state_dict()",
                       hint=5)
    if saved["step"] != STEPS_BEFORE:
        raise ctx.fail(f"the checkpoint's 'step' is {saved['step']}, not the step it was saved at ({STEPS_BEFORE})")
    ranks = ctx.require(result)
    difference = first_difference(saved["model"], ranks[0]["saved_state"])
    if difference:
        raise ctx.fail(f"the saved weights are not the model's at the time of saving: {difference}")


@check("resume_matches")
def resume_matches(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = ctx.reference("reference", world_size=ctx.world_size, size=SIZE, batch_size=BATCH,
                              steps_before=STEPS_BEFORE, steps_after=STEPS_AFTER, lr=LR)
    for rank, facts in enumerate(ranks):
        difference = first_difference(facts["loaded_state"], facts["saved_state"])
        if difference:
            raise ctx.fail(f"after load_checkpoint, rank {rank}'s model does not hold the saved weights: {difference}",
                           hint=4)
        if facts["returned_step"] != STEPS_BEFORE:
            raise ctx.fail(f"load_checkpoint returned {facts['returned_step']!r} on rank {rank}, not the saved step "
                           f"{STEPS_BEFORE}", hint=4)
    for step, (got, want, restarted) in enumerate(
            zip(ranks[0]["resumed"], reference["uninterrupted"], reference["restarted"]), STEPS_BEFORE + 1):
        difference = first_difference(got, want)
        if difference is None:
            continue
        if first_difference(got, restarted) is None:
            raise ctx.fail(f"momentum lost: step {step} after resuming equals a run whose SGD momentum restarted "
                           f"from zero at the checkpoint ({difference} from the uninterrupted run). Save "
                           "optimizer.state_dict() and load it on every rank", hint=5)
        raise ctx.fail(f"step {step} after resuming differs from uninterrupted training: {difference}")
