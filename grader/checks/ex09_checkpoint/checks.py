"""Judging exercise 9: who saves, whether the others wait for the file, what the file holds, and
whether resumed training continues exactly where it stopped."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

from grader.checks.ex09_checkpoint.facts import (
    INSPECT_CHECKPOINT,
    REFERENCE,
    REPLAYS,
    RESUME,
    WORKLOAD,
    Checkpoint,
    Resumed,
)
from grader.engine import RunResult
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.explain import error_types
from grader.judge.names import HintName
from grader.judge.trajectory import Setting, diagnose
from grader.judge.writes import barrier_callers, went_on_early, writers_problem

SIZE, BATCH, STEPS_BEFORE, STEPS_AFTER, LR = (
    WORKLOAD.size,
    WORKLOAD.batch_size,
    WORKLOAD.steps_before,
    WORKLOAD.steps_after,
    WORKLOAD.lr,
)  # as messages name them
PARAMETERS = 4  # TinyRegressor: two weights, two biases
_HYPOTHESES = replay.load(__package__ or "")
MODEL_KEYS = "hidden.weight, hidden.bias, out.weight, out.bias"


def _path(ctx: CheckContext) -> str:
    return str(ctx.scratch / f"checkpoint-w{ctx.world_size}.pt")


def _checkpoint(ctx: CheckContext) -> Checkpoint:
    """The file at the checkpoint path, described by the trusted reader (it holds what a rank wrote)."""
    return ctx.inspect(INSPECT_CHECKPOINT, path=_path(ctx))


def _early_load(ctx: CheckContext, result: RunResult, path: str) -> str:
    """'rank r ...' if some rank read the checkpoint before the file rank 0 wrote had landed."""
    facts = [ctx.conform(outcome.facts, Resumed, outcome.rank, complete=False) for outcome in result.ranks]
    loads = [[e["start"] for e in f.get("writes", []) if e["op"] == "load"] for f in facts]
    early = went_on_early([f.get("writes", []) for f in facts], path, [f.get("host", "") for f in facts], loads)
    missing = [o.rank for o in result.ranks if "FileNotFoundError" in error_types(o.error) and loads[o.rank]]
    for rank in sorted({*early, *missing} - {0}):
        if loads[rank]:
            raced = f"rank {rank} called torch.load before rank 0 had finished writing the checkpoint"
            others = sorted(r for r in {*early, *missing} - {0} if loads[r])
            callers = barrier_callers([f.get("writes", []) for f in facts], others)
            return f"{callers}: {raced}" if callers else raced
    return ""


def _arguments(ctx: CheckContext) -> dict[str, Any]:
    """The arguments of the one run every check reads."""
    return {"path": _path(ctx), **WORKLOAD.arguments(), **ctx.seeds("data", "model")}


def _run(ctx: CheckContext) -> RunResult:
    """The shared run; a load that raced the save is named before anything else."""
    result = ctx.run(RESUME.name, **_arguments(ctx))
    stub = any((r.error or {}).get("not_implemented") for r in result.ranks)
    race = "" if stub else _early_load(ctx, result, _path(ctx))
    if race.startswith("only "):  # some ranks called a barrier: said as measured, not as "no barrier"
        raise ctx.fail(
            f"{race} (the grader holds rank 0's save until the other ranks wait for it or move on). A barrier "
            "holds the ranks back only when every rank calls it: after rank 0's torch.save, outside the `if`",
            hint=HintName("barrier_after_save"),
        )
    if race:
        raise ctx.fail(
            f"no barrier between save and load: {race} (the grader holds rank 0's save until the other "
            "ranks wait for it or move on). Every rank must wait at dist.barrier() after rank 0's "
            "torch.save",
            hint=HintName("barrier_after_save"),
        )
    return result


def _ranks(ctx: CheckContext) -> list[Resumed]:
    return ctx.require(_run(ctx), schema=Resumed)


# What the checks of the save read: complete once every rank returned from save_checkpoint (the grader's code records
# save_returned_at then), whatever failed after it — a failure in load_checkpoint costs resume_matches, not these.
SAVE_FACTS: Final = ("writes", "host", "start", "saved_state", "save_returned_at")


def _every_rank_saved(ranks: list[Resumed]) -> str | None:
    if all("save_returned_at" in facts for facts in ranks):
        return "what every rank did until it returned from save_checkpoint"
    return None


def _every_rank_loading(ranks: list[Resumed]) -> str | None:
    if _every_rank_saved(ranks) and all(any(e["op"] == "load" for e in facts["writes"]) for facts in ranks):
        return "what every rank did until it returned from save_checkpoint and called torch.load"
    return None


def _saved(ctx: CheckContext, proof: Callable[[list[Resumed]], str | None] = _every_rank_saved) -> list[Resumed]:
    """The ranks' facts, also where the run failed after every rank's save (SAVE_FACTS, `proof`)."""
    _run(ctx)  # a load that raced the save is named first
    return ctx.facts_until_failure(RESUME, SAVE_FACTS, proof, **_arguments(ctx))


@check("saves_once_rank0")
def saves_once_rank0(ctx: CheckContext) -> None:
    ranks = _saved(ctx)
    exists = _checkpoint(ctx)["exists"]
    problem = writers_problem([facts["writes"] for facts in ranks], _path(ctx), exists, once=True)
    if problem:
        raise ctx.fail(problem, hint=HintName("rank0_saves"))


@check("waits_for_save")
def waits_for_save(ctx: CheckContext) -> None:
    ranks = _saved(ctx, _every_rank_loading)
    for rank, facts in enumerate(ranks):
        if not any(e["op"] == "load" for e in facts["writes"]):
            raise ctx.fail(
                f"rank {rank} never called torch.load: every rank restores from the file",
                hint=HintName("load_checkpoint"),
            )


@check("checkpoint_contents")
def checkpoint_contents(ctx: CheckContext) -> None:
    ranks = _saved(ctx)
    saved = _checkpoint(ctx)
    if not saved["exists"]:
        raise ctx.fail("no checkpoint was written at the path given to save_checkpoint", hint=HintName("rank0_saves"))
    if saved.get("problem"):
        raise ctx.fail(f"the checkpoint cannot be read: {saved['problem']}")
    if "model" not in saved:
        raise ctx.fail(
            f"the checkpoint holds no state dict of the model (its {MODEL_KEYS}, with no `module.` "
            f"prefix); its keys: {saved['keys']}",
            hint=HintName("unwrapped_state_dict"),
        )
    prefixed = [key for key in saved["model"] if key.startswith("module.")]
    if prefixed:
        raise ctx.fail(
            f"`module.` prefix in the saved model (e.g. {prefixed[0]!r}): that is the DDP wrapper's "
            "state_dict; save ddp_model.module.state_dict()",
            hint=HintName("unwrapped_state_dict"),
        )
    if saved.get("only_model"):
        raise ctx.fail(
            "optimizer state not saved: the checkpoint is the model's state dict alone, with no "
            "optimizer state (momentum buffers) and no step; save a dict of all three",
            hint=HintName("optimizer_state"),
        )
    if saved.get("momentum_buffers", 0) < PARAMETERS:
        raise ctx.fail(
            f"optimizer state not saved: the checkpoint holds {saved.get('momentum_buffers', 0)} momentum "
            f"buffers for {PARAMETERS} parameters (its keys: {saved['keys']}); save optimizer.state_dict()",
            hint=HintName("optimizer_state"),
        )
    if STEPS_BEFORE not in saved["integers"].values():
        raise ctx.fail(
            f"the checkpoint holds no step equal to the step it was saved at ({STEPS_BEFORE}): its "
            f"integers are {saved['integers'] or 'none'}",
            hint=HintName("load_checkpoint"),
        )
    difference = first_difference(saved["model"], ranks[0]["saved_state"])
    if difference:
        raise ctx.fail(f"the saved weights are not the model's at the time of saving: {difference}")


@check("resume_matches")
def resume_matches(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = ctx.reference(
        REFERENCE,
        world_size=ctx.world_size,
        **WORKLOAD.arguments(),
        **ctx.seeds("data", "model"),
    )
    for rank, facts in enumerate(ranks):
        difference = first_difference(facts["loaded_state"], facts["saved_state"])
        if difference:
            raise ctx.fail(
                f"after load_checkpoint, rank {rank}'s model does not hold the saved weights: {difference}",
                hint=HintName("load_checkpoint"),
            )
        if facts["returned_step"] != STEPS_BEFORE:
            raise ctx.fail(
                f"load_checkpoint returned {facts['returned_step']!r} on rank {rank}, not the saved step "
                f"{STEPS_BEFORE}",
                hint=HintName("load_checkpoint"),
            )
    resumed = STEPS_BEFORE + 1

    replays = ctx.replayer(REPLAYS, world_size=ctx.world_size, **WORKLOAD.arguments())

    for rank, facts in enumerate(ranks):
        setting = Setting(
            lr=LR,
            momentum=reference["momentum"],
            factors={"W": ctx.world_size, "resumed": resumed},
            reference="uninterrupted training",
            labels={resumed: "the first step after resuming"},
            subject=f"rank {rank}",
            hypotheses=_HYPOTHESES,
            replay=replays,
        )
        finding = diagnose(facts["steps"], facts["start"], reference["steps"], reference["start"], setting)
        if finding is None:
            continue
        proven = finding.proven
        if finding.cause == "momentum_lost":  # proven by its replay: the buffers counted say how it was lost
            restored = facts["momentum_restored"]
            raise ctx.fail(
                f"{finding.message} (after load_checkpoint the optimizer held {restored} momentum buffers for "
                f"{PARAMETERS} parameters)",
                hint=finding.hint,
                proven=proven,
            )
        raise ctx.fail(
            f"resumed training differs from uninterrupted training: {finding.message}", hint=finding.hint, proven=proven
        )
