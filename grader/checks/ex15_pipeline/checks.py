"""Judging exercise 15: the stages the ranks built (which layers each holds, found by their values),
the stages' merged trajectory against one process on the whole model and batch (localize, then
replay), the order each stage ran its micro-batches in, and the bubble fraction against the one the
grader measures by replaying that order in unit time slots. A cause is named only where it is proven
(grader/judge/proof.py): by a replay of the trajectory, a slip's closed form on the whole grid, or a
structural replay (what the mistake builds: stages, schedules, the micro-batches of every optimizer step,
on every rank, equal to what the run built)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from grader.checks.ex15_pipeline.facts import (
    BUBBLE_FRACTIONS,
    BUBBLE_GRID,
    OUTSIDE_RANKS,
    REFERENCE,
    REPLAYS,
    SCHEDULES,
    SPLIT_GRID,
    STAGE_LAYERS,
    TRAIN,
    UNEVEN,
    UNKNOWN_SCHEDULES,
    Layers,
    Raised,
    Train,
    Uneven,
)
from grader.engine import RunResult
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.diagnose import error_echo_phrase, failure_verdict, phase_line, quoted_error
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.slips import Formula, Slip, find_slip
from grader.judge.trajectory import Setting, diagnose
from grader.judge.wording import article, shorten

STEPS, BATCH, LR = 3, 16, 0.1
LAYERS = 5  # the model's layers (workers.LAYERS)
UNEVEN_BATCH, UNEVEN_MICRO = 6, 4
QUOTED = 150  # characters of an error quoted in a message, below the ranks' own cut (workers.py: 200, 300)
_HYPOTHESES = replay.load(__package__ or "")
BUBBLE = Formula(("stages", "micro_batches"), "(stages - 1) / (micro_batches + stages - 1)")
NAMED_SLIPS = [
    Slip(
        Cause("bubble_p_over_m_plus_p"),
        "p/(m+p): the p - 1 idle slots counted as p and the m + p - 1 slots of a phase as m + p, as if there "
        "were p + 1 stages",
        lambda _reference: lambda p, m: p / (m + p),
        key="arg0:+1",  # the generic "stages plus 1" is this arithmetic
    ),
    Slip(
        Cause("bubble_over_compute"),
        "(p-1)/m: the idle time divided by the busy time (the 'bubble time fraction' of the Megatron paper), "
        "not by the whole step; the idle share of the step is (p-1)/(m+p-1)",
        lambda _reference: lambda p, m: (p - 1) / m,
    ),
    Slip(
        Cause("bubble_over_m_plus_p"),
        "(p-1)/(m+p): a stage spans m + p - 1 slots of each phase (m of its own, p - 1 of waiting), not m + p",
        lambda _reference: lambda p, m: (p - 1) / (m + p),
    ),
]


def _micro_batches(world_size: int) -> int:
    """m = 2W: more micro-batches than stages, so GPipe's and 1F1B's orders differ on every stage."""
    return 2 * world_size


def _train(ctx: CheckContext, schedule: str) -> list[Train]:
    result = ctx.run(
        TRAIN.name,
        schedule=schedule,
        steps=STEPS,
        batch_size=BATCH,
        micro_batches=_micro_batches(ctx.world_size),
        lr=LR,
        **ctx.seeds("data", "model"),
    )
    _explained(ctx, result, schedule)
    ranks = ctx.require(result, schema=Train)
    counts = [len(f["steps"]) for f in ranks]
    m = _micro_batches(ctx.world_size)
    if len(set(counts)) != 1:
        raise ctx.fail(
            f"with {schedule!r}, the ranks took different numbers of optimizer steps ({counts})", HintName("optimizer")
        )
    if counts[0] != STEPS:
        measured = f"with {schedule!r}, every rank took {counts[0]} optimizer steps for {STEPS} batches of m = {m} "
        proven = _step_per_micro_batch(ranks, m)
        actions = ranks[0]["actions"]
        forwards = [sum(a[0] == step and a[2] == "F" for a in actions) for step in range(1, counts[0] + 1)]
        raise ctx.fail(
            f"{measured}micro-batches: one step per micro-batch, each on every rank the one forward and backward "
            "of a schedule of one micro-batch. schedule.step() runs every micro-batch of the batch; call "
            "optimizer.step() once after it"
            if proven
            else f"{measured}micro-batches (rank 0's forwards in each step: {forwards}); one optimizer step per batch",
            hint=HintName("optimizer"),
            proven=proven,
        )
    return ranks


def _per_step(facts: Train) -> list[list[list[object]]]:
    """This rank's actions in each optimizer step, as [F/B/I/W, micro-batch]."""
    return [
        [[kind, mb] for n, _, kind, mb in facts["actions"] if n == step] for step in range(1, len(facts["steps"]) + 1)
    ]


def _step_per_micro_batch(ranks: list[Train], m: int) -> Proven | None:
    """One optimizer step per micro-batch, proven when what it builds is the run: on every rank one schedule, of
    one micro-batch, and m optimizer steps per batch, each after that stage's one forward and one backward."""
    steps = STEPS * m
    built = {
        "schedules": [[1] for _ in ranks],
        "actions": [[[["F", 0], ["B", 0]] for _ in range(steps)] for _ in ranks],
    }
    observed = {
        "schedules": [[made["micro_batches"] for made in f["schedules"]] for f in ranks],
        "actions": [_per_step(f) for f in ranks],
    }
    return structural(Cause("step_per_micro_batch"), built, observed)


def _explained(ctx: CheckContext, result: RunResult, schedule: str) -> None:
    """A run that failed, with what the grader's watch saw before the error, when that says why."""
    verdict = failure_verdict(result, ctx.student_file)
    if verdict is None or any((r.error or {}).get("not_implemented") for r in result.ranks):
        return
    facts = [ctx.conform(r.facts, Train, r.rank, complete=r.ok) for r in result.ranks]
    moved = {r: f["stages"][0]["index"] for r, f in enumerate(facts) if len(f.get("stages", [])) == 1}
    if any(index != rank for rank, index in moved.items()):
        raise _wrong_ranks(ctx, facts, moved, verdict.message)
    built = [f.get("schedules", []) for f in facts]
    blind = [rank for rank, schedules in enumerate(built) if schedules and not schedules[-1]["loss_fn"]]
    if blind and len(blind) < len(built):
        measured = f"with {schedule!r}, the schedule of rank(s) {blind} was built without loss_fn (observed)"
        proven = _loss_fn_on_the_last_stage_only(facts, _micro_batches(ctx.world_size))
        raise ctx.fail(
            f"{measured}, on every rank one stage, its own, and one schedule of m micro-batches, loss_fn on the last "
            "alone: torch then runs the other stages forward only, and the gradient the next stage sends is never "
            f"received. Give loss_fn to the schedule on every rank (only the last stage calls it). {verdict.message}"
            if proven
            else f"{measured}; the other ranks' with it. {verdict.message}",
            hint=HintName("schedule"),
            proven=proven,
        )


def _loss_fn_on_the_last_stage_only(facts: list[Train], m: int) -> Proven | None:
    """loss_fn given on the last stage alone, proven when what that builds is the run: on every rank one stage,
    stage r of W on rank r, and one schedule of m micro-batches, with loss_fn on rank W - 1 only."""
    world = len(facts)
    built = {
        "stages": [[[rank, world]] for rank in range(world)],
        "schedules": [[[m, rank == world - 1]] for rank in range(world)],
    }
    observed = {
        "stages": [[[stage["index"], stage["count"]] for stage in f.get("stages", [])] for f in facts],
        "schedules": [[[made["micro_batches"], made["loss_fn"]] for made in f.get("schedules", [])] for f in facts],
    }
    return structural(Cause("loss_fn_missing_on_a_stage"), built, observed)


def _wrong_ranks(ctx: CheckContext, facts: list[Train], indices: dict[int, int], after: str = "") -> Exception:
    built = ", ".join(f"rank {rank} built stage {index}" for rank, index in indices.items())
    proven = _stages_moved(facts)
    return ctx.fail(
        (
            f"stages on the wrong ranks: {built} (observed); rank 0 gets the batch and must run stage 0, rank r "
            f"stage r (each rank built one of the {len(facts)} stages, each once): "
            if proven
            else f"{built} (observed); stage r is built on rank r: "
        )
        + f"PipelineStage(stage_module, rank, world_size, device). {after}".strip(),
        hint=HintName("build_stage"),
        proven=proven,
    )


def _stages_moved(facts: list[Train]) -> Proven | None:
    """Stages on the wrong ranks, proven when what that builds is the run: every rank one stage of a W-stage
    pipeline, the W stage indices each once, not each on its own rank (the caller saw that)."""
    world = len(facts)
    built = {"stages": [[world] for _ in facts], "indices": list(range(world))}
    observed = {
        "stages": [[stage["count"] for stage in f.get("stages", [])] for f in facts],
        "indices": sorted(stage["index"] for f in facts for stage in f.get("stages", [])),
    }
    return structural(Cause("stage_index_not_rank"), built, observed)


def _layers(layers: list[int]) -> str:
    if not layers:
        return "no layer"
    if layers == list(range(layers[0], layers[-1] + 1)) and len(layers) > 1:
        return f"layers {layers[0]}-{layers[-1]}"
    return ("layer " if len(layers) == 1 else "layers ") + ", ".join(map(str, layers))


def _split_problem(held: list[list[int]], num_layers: int, where: str) -> str:
    """What is wrong with a split, stage by stage (`held[s]`: the layers stage s holds), or ""."""
    owners: dict[int, list[int]] = {}
    for stage, layers in enumerate(held):
        for layer in layers:
            owners.setdefault(layer, []).append(stage)
    shown = "; ".join(f"stage {s} holds {_layers(sorted(layers))}" for s, layers in enumerate(held))
    twice = sorted(layer for layer, stages in owners.items() if len(stages) > 1)
    if twice:
        stages = owners[twice[0]]
        return (
            f"{where}: layer {twice[0]} is held by stages {' and '.join(map(str, stages))} ({shown}): a layer "
            "duplicated at the boundary between stages, so it runs twice"
        )
    missing = sorted(set(range(num_layers)) - set(owners))
    if missing:
        return (
            f"{where}: {_layers(missing)} of {num_layers} held by no stage ({shown}): dropped at a boundary or at the "
            "end, so the pipeline computes another model"
        )
    extra = sorted(set(owners) - set(range(num_layers)))
    if extra:
        return f"{where}: {_layers(extra)} do not exist (there are {num_layers}) ({shown})"
    for stage, layers in enumerate(held):
        ordered = sorted(layers)
        if ordered != list(range(ordered[0], ordered[0] + len(ordered))) if ordered else False:
            return f"{where}: stage {stage} holds {_layers(ordered)}, which are not contiguous ({shown})"
    firsts = [min(layers) for layers in held if layers]
    if firsts != sorted(firsts):
        order = "reversed" if firsts == sorted(firsts, reverse=True) else "out of order"
        return (
            f"{where}: the stages are {order} ({shown}): the data flows from stage 0 to stage {len(held) - 1}, so "
            "stage 0 (rank 0) must hold the first layers and each next stage the layers after"
        )
    sizes = [len(layers) for layers in held]
    if max(sizes) - min(sizes) > 1:
        return (
            f"{where}: stage sizes {sizes} differ by more than one ({shown}): the slowest stage sets the pace of "
            "the whole pipeline; spread the remainder, one extra layer to some stages"
        )
    return ""


def _observed_split(ctx: CheckContext, ranks: list[Train], schedule: str) -> None:
    """Fails unless each rank built one stage, stage r on rank r, holding a balanced slice in order."""
    world = ctx.world_size
    for rank, facts in enumerate(ranks):
        stages = facts["stages"]
        if len(stages) != 1:
            raise ctx.fail(
                f"with {schedule!r}, rank {rank} built {len(stages)} pipeline stages (PipelineStage); one stage "
                "per rank here",
                hint=HintName("build_stage"),
            )
        stage = stages[0]
        if stage["count"] != world:
            raise ctx.fail(
                f"rank {rank} built a stage of {article(str(stage['count']))}-stage pipeline; W = {world}",
                HintName("build_stage"),
            )
        if stage["foreign"]:
            raise ctx.fail(
                f"rank {rank}'s stage module holds {stage['foreign']} parameter(s) that are none of the model's "
                "layers (by value): keep the model's own layers",
                hint=HintName("split"),
            )
    indices = [f["stages"][0]["index"] for f in ranks]
    if sorted(indices) != list(range(world)):
        raise ctx.fail(
            f"the ranks built stages {indices} (rank r's stage index is the r-th): each stage 0..{world - 1} once",
            hint=HintName("build_stage"),
        )
    if indices != list(range(world)):
        raise _wrong_ranks(ctx, ranks, dict(enumerate(indices)))
    held = [f["stages"][0]["layers"] for f in ranks]
    problem = _split_problem(held, LAYERS, f"the stages the ranks built ({LAYERS} layers, W = {world})")
    if problem:
        raise ctx.fail(problem, hint=HintName("split"))


def _merged(ranks: list[Train]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The stages' trajectories as one model's: each parameter from the rank whose stage holds it."""
    owner = {name: rank for rank, f in enumerate(ranks) for name in f["stages"][0]["names"]}
    steps = []
    for number in range(len(ranks[0]["steps"])):
        step: dict[str, Any] = {"grads": {}, "params": {}, "no_grad": [], "state": {}}
        for rank, facts in enumerate(ranks):
            mine = facts["steps"][number]
            for name in mine["grads"]:
                if owner.get(name, rank) != rank:
                    continue  # another stage's parameter, in an optimizer over the whole model
                step["grads"][name], step["params"][name] = mine["grads"][name], mine["params"][name]
                step["state"][name] = mine["state"].get(name, {})
                if name in mine["no_grad"]:
                    step["no_grad"].append(name)
        steps.append(step)
    start = {n: t for rank, f in enumerate(ranks) for n, t in f["start"].items() if owner.get(n, rank) == rank}
    return steps, start


def _matches(ctx: CheckContext, schedule: str) -> None:
    ranks = _train(ctx, schedule)
    _observed_split(ctx, ranks, schedule)
    reference = ctx.reference(REFERENCE, steps=STEPS, batch_size=BATCH, lr=LR, **ctx.seeds("data", "model"))
    m = _micro_batches(ctx.world_size)
    setting = Setting(
        lr=LR,
        momentum=reference["momentum"],
        factors={"b": BATCH, "m": m, "W": ctx.world_size},
        reference="one process on the whole batch",
        context=f"with {schedule!r} and m = {m}, ",
        subject="the stages together",
        hypotheses=_HYPOTHESES,
        replay=ctx.replayer(REPLAYS, steps=STEPS, batch_size=BATCH, micro_batches=m, lr=LR),
    )
    steps, start = _merged(ranks)
    finding = diagnose(steps, start, [dict(step) for step in reference["steps"]], reference["start"], setting)
    if finding:
        proven = finding.proven
        raise ctx.fail(finding.message, hint=finding.hint or HintName("loss_scaling"), proven=proven)
    for rank, facts in enumerate(ranks):
        names, foreign = facts.get("returned_names"), facts.get("returned_foreign")
        if names is None or foreign is None:
            raise ctx.fail(
                f"train_pipeline returned {facts['returned']} on rank {rank}, not the stage module", HintName("split")
            )
        mine = facts["stages"][0]["names"]
        if names != mine or foreign:
            raise ctx.fail(
                f"rank {rank} returned {article(str(facts['returned']))} holding {len(names)} of the model's "
                f"parameters ({foreign} others) where its stage holds {len(mine)}: return the "
                "stage module it trained",
                hint=HintName("split"),
            )


def _asks_value_error(ctx: CheckContext, call: str, probe: Mapping[str, Any], why: str) -> None:
    """Fail unless the probe raised the ValueError the docstring asks for."""
    if "error" in probe and probe["error"].startswith("ValueError"):
        return
    got = f"returned {probe['value']!r}" if "value" in probe else shorten(probe["error"], QUOTED)
    hint = HintName("split") if call.startswith("stage_layers") else HintName("bubble")
    raise ctx.fail(f"{call} {got}; {why}, and the docstring asks for a ValueError there", hint=hint)


@check("stage_split")
def stage_split(ctx: CheckContext) -> None:
    facts = ctx.facts(STAGE_LAYERS, nprocs=1)[0]
    grid = facts["split"]
    probed = [(num_layers, world, rank) for num_layers, world, rank, _ in grid]
    if probed != [(n, w, r) for n, w in SPLIT_GRID for r in range(w)]:
        raise ctx.fail(f"the report of stage_layers' probes holds {probed}, not the grader's grid", HintName("split"))
    by_setting: dict[tuple[int, int], list[tuple[int, Layers | Raised]]] = {}
    for num_layers, world, rank, probe in grid:
        by_setting.setdefault((num_layers, world), []).append((rank, probe))
    for (num_layers, world), probes in by_setting.items():
        held = []
        for rank, probe in probes:
            if "error" in probe:
                raise ctx.fail(
                    f"stage_layers({num_layers}, {world}, {rank}) {shorten(probe['error'], QUOTED)}; expected the "
                    f"layers of stage {rank} as a range or list of ints",
                    hint=HintName("split"),
                )
            held.append(probe["value"])
        problem = _split_problem(held, num_layers, f"stage_layers with {num_layers} layers on {world} stages")
        if problem:
            raise ctx.fail(problem, hint=HintName("split"))
    if [(n, w, r) for n, w, r, _ in facts["outside"]] != OUTSIDE_RANKS:
        raise ctx.fail("the report of stage_layers' probes outside the stages is not the grader's", HintName("split"))
    for num_layers, world, rank, probe in facts["outside"]:
        why = f"rank {rank} is no stage of a {world}-stage pipeline (0..{world - 1})"
        _asks_value_error(ctx, f"stage_layers({num_layers}, {world}, {rank})", probe, why)
    _observed_split(ctx, _train(ctx, "gpipe"), "gpipe")


@check("matches_single_process")
def matches_single_process(ctx: CheckContext) -> None:
    for schedule in SCHEDULES:
        _matches(ctx, schedule)


def _actions(ranks: list[Train], step: int = 1) -> list[list[tuple[int, str, int]]]:
    return [[(s, kind, mb) for n, s, kind, mb in f["actions"] if n == step] for f in ranks]


def _incomplete(actions: list[list[tuple[int, str, int]]], m: int) -> str:
    """Why the actions of a step are not one forward and one backward of each micro-batch per stage, or ""."""
    for stage, mine in enumerate(actions):
        for kind in ("F", "B"):
            done = sorted(mb for _, k, mb in mine if k == kind or (kind == "B" and k == "I"))
            if done != list(range(m)):
                what = "forward" if kind == "F" else "backward"
                return f"stage {stage} ran the {what} of micro-batches {done} in step 1, where m = {m} gives 0-{m - 1}"
    return ""


def measured_bubble(actions: list[list[tuple[int, str, int]]]) -> float | None:
    """The idle share of the stage-slots when each rank runs its actions in the order it ran them, each
    in one time slot, as soon as its input is there (the previous stage's forward of that micro-batch,
    the next stage's backward); None when the order cannot run (a rank waits for what never comes)."""
    last = len(actions) - 1
    done: dict[tuple[str, int, int], int] = {}  # (F or G (input gradient) or W, stage, micro-batch) -> end slot
    clock, position = [0] * len(actions), [0] * len(actions)
    progress = True
    while progress:
        progress = False
        for rank, mine in enumerate(actions):
            while position[rank] < len(mine):
                stage, kind, mb = mine[position[rank]]
                if kind == "F":
                    needs = ("F", stage - 1, mb) if stage > 0 else None
                elif kind in ("B", "I"):
                    needs = ("F", stage, mb) if stage == last else ("G", stage + 1, mb)
                else:
                    needs = ("G", stage, mb)
                if needs is not None and needs not in done:
                    break
                clock[rank] = max(clock[rank], done[needs] if needs else 0) + 1
                done[("F" if kind == "F" else "G" if kind in ("B", "I") else "W", stage, mb)] = clock[rank]
                position[rank] += 1
                progress = True
    span = max(clock, default=0)
    if span == 0 or any(p < len(mine) for p, mine in zip(position, actions)):
        return None
    return 1 - sum(len(mine) for mine in actions) / (len(actions) * span)


def _in_flight(mine: list[tuple[int, str, int]]) -> int:
    """The most micro-batches a stage held forwarded and not yet backwarded: whose activations it keeps."""
    most = held = 0
    for _, kind, _ in mine:
        held += 1 if kind == "F" else -1 if kind in ("B", "I") else 0
        most = max(most, held)
    return most


@check("runs_the_schedule")
def runs_the_schedule(ctx: CheckContext) -> None:
    world, m = ctx.world_size, _micro_batches(ctx.world_size)
    for schedule in SCHEDULES:
        ranks = _train(ctx, schedule)
        actions = _actions(ranks)
        incomplete = _incomplete(actions, m)
        if incomplete:
            raise ctx.fail(f"with {schedule!r}: {incomplete}", hint=HintName("schedule"))
        flights = [_in_flight(mine) for mine in actions]
        classes = [f["schedules"][-1]["class"] if f["schedules"] else "no schedule" for f in ranks]
        if schedule == "1f1b" and flights[0] == m:
            proven = _schedule_swapped(Cause("gpipe_for_1f1b"), "ScheduleGPipe", [m] * world, ranks, flights)
            raise ctx.fail(
                f"wrong schedule: with '1f1b', stage 0 ran all {m} forwards before its first backward (GPipe's "
                f"order; in flight on each stage: {flights}, the schedule built on every rank a ScheduleGPipe); "
                f"1F1B keeps at most W = {world} micro-batches in flight on stage 0: use Schedule1F1B for '1f1b'"
                if proven
                else f"with '1f1b', stage 0 ran all {m} forwards before its first backward (in flight on each "
                f"stage: {flights}; the schedules built: {', '.join(classes)}); 1F1B keeps at most W = {world} "
                "micro-batches in flight on stage 0",
                hint=HintName("schedule"),
                proven=proven,
            )
        if schedule == "1f1b" and any(f > world - s for s, f in enumerate(flights)):
            raise ctx.fail(
                f"with '1f1b', the stages held {flights} micro-batches in flight; 1F1B holds at most W - s on "
                f"stage s ({[world - s for s in range(world)]})",
                hint=HintName("schedule"),
            )
        if schedule == "gpipe" and flights[0] < m:
            one_f_one_b = [min(m, world - stage) for stage in range(world)]
            proven = _schedule_swapped(Cause("1f1b_for_gpipe"), "Schedule1F1B", one_f_one_b, ranks, flights)
            raise ctx.fail(
                f"wrong schedule: with 'gpipe', stage 0 ran a backward before its last forward (at most "
                f"{flights[0]} of m = {m} micro-batches in flight: 1F1B's order, on every stage, the schedule built "
                "on every rank a Schedule1F1B); GPipe runs every forward, then every backward: use ScheduleGPipe for "
                "'gpipe'"
                if proven
                else f"with 'gpipe', stage 0 ran a backward before its last forward (in flight on each stage: "
                f"{flights}, of m = {m}; the schedules built: {', '.join(classes)}); GPipe runs every forward, then "
                "every backward",
                hint=HintName("schedule"),
                proven=proven,
            )


def _schedule_swapped(
    cause: Cause, built_class: str, in_flight: list[int], ranks: list[Train], flights: list[int]
) -> Proven | None:
    """The other schedule of the two, proven when what it builds is the run: on every rank one schedule, of that
    class and m micro-batches, each stage holding at most what that schedule holds in flight (`in_flight`: m on
    every stage for GPipe, W - s on stage s for 1F1B)."""
    m = _micro_batches(len(ranks))
    built = {"schedules": [[[built_class, m]] for _ in ranks], "in_flight": in_flight}
    observed = {
        "schedules": [[[made["class"], made["micro_batches"]] for made in f["schedules"]] for f in ranks],
        "in_flight": flights,
    }
    return structural(cause, built, observed)


@check("bubble_fraction")
def bubble_fraction(ctx: CheckContext) -> None:
    world, m = ctx.world_size, _micro_batches(ctx.world_size)
    facts = ctx.facts(BUBBLE_FRACTIONS, nprocs=1)[0]
    grid = facts["bubble"]
    probed = [(p, mb, schedule) for p, mb, schedule, _ in grid]
    if probed != [(p, mb, schedule) for p, mb in BUBBLE_GRID for schedule in SCHEDULES]:
        raise ctx.fail(
            f"the report of bubble_fraction's probes holds {probed}, not the grader's grid", HintName("bubble")
        )
    values = {(p, mb, schedule): probe for p, mb, schedule, probe in grid}
    raised = {key: probe["error"] for key, probe in values.items() if "error" in probe}
    fractions = {key: probe["value"] for key, probe in values.items() if "value" in probe}
    for schedule in SCHEDULES:
        errors = [(key, error) for key, error in raised.items() if key[2] == schedule]
        if errors:
            (p, mb, _), error = errors[0]
            raise ctx.fail(
                f"bubble_fraction({p}, {mb}, {schedule!r}) {shorten(error, QUOTED)}; expected the idle fraction, a "
                "number from 0 up to 1 (never 1 itself)",
                hint=HintName("bubble"),
            )
        actions = _actions(_train(ctx, schedule))
        incomplete = _incomplete(actions, m)
        if incomplete:
            raise ctx.fail(f"with {schedule!r}, no bubble to measure: {incomplete}", hint=HintName("schedule"))
        measured = measured_bubble(actions)
        if measured is None:
            raise ctx.fail(
                f"with {schedule!r}, the stages' order of actions cannot run to the end", hint=HintName("schedule")
            )
        got = fractions[(world, m, schedule)]
        if not abs(got - measured) <= 1e-6:  # NaN included
            probes = [(p, mb) for p, mb, s in values if s == schedule]
            slip = find_slip(BUBBLE, probes, [fractions[(p, mb, schedule)] for p, mb in probes], NAMED_SLIPS)
            said = f"; every probed (p, m) fits one slip: {slip.sentence}" if slip else ""
            raise ctx.fail(
                f"bubble_fraction({world}, {m}, {schedule!r}) returned {got:.6g}; the grader measured {measured:.6g} "
                f"from the schedule's own timeline (the order each stage ran its {m} forwards and backwards, "
                f"replayed in unit time slots: {world - 1} idle of {m + world - 1} slots per phase on each stage)"
                + said,
                hint=HintName("bubble"),
                proven=slip.proven if slip else None,
            )
        wrong = [
            (p, mb, fractions[(p, mb, s)])
            for p, mb, s in values
            if s == schedule and not abs(fractions[(p, mb, s)] - BUBBLE(p, mb)) <= 1e-6
        ]
        if wrong:
            p, mb, value = wrong[0]
            raise ctx.fail(
                f"bubble_fraction({p}, {mb}, {schedule!r}) returned {value:.6g}, expected {BUBBLE(p, mb):.6g} "
                f"(wrong at {len(wrong)} of the probed (p, m)); it matches the measurement at ({world}, {m}) only",
                hint=HintName("bubble"),
            )
    if [(p, mb, schedule) for p, mb, schedule, _ in facts["unknown"]] != UNKNOWN_SCHEDULES:
        raise ctx.fail(
            "the report of bubble_fraction's probes of other schedules is not the grader's", HintName("bubble")
        )
    for p, mb, schedule, probe in facts["unknown"]:
        why = f"{schedule!r} is neither 'gpipe' nor '1f1b'"
        _asks_value_error(ctx, f"bubble_fraction({p}, {mb}, {schedule!r})", probe, why)


@check("uneven_micro_batches")
def uneven_micro_batches(ctx: CheckContext) -> None:
    result = ctx.run(
        UNEVEN.name, batch_size=UNEVEN_BATCH, micro_batches=UNEVEN_MICRO, lr=LR, **ctx.seeds("data", "model")
    )
    if any((r.error or {}).get("not_implemented") for r in result.ranks):
        ctx.require(result)
    wanted = f"a ValueError naming both sizes ({UNEVEN_BATCH} samples, {UNEVEN_MICRO} micro-batches)"
    # a rank's own error before those of peers that only lost it ("Connection closed by peer")
    for r in sorted(result.ranks, key=lambda outcome: bool(error_echo_phrase(outcome.error))):
        if r.error:
            raise ctx.fail(
                f"a batch of {UNEVEN_BATCH} samples in {UNEVEN_MICRO} micro-batches: rank {r.rank} raised "
                f"{r.error.get('type')}: {shorten(quoted_error(str(r.error.get('message', ''))), QUOTED)}; "
                f"expected {wanted}, raised before the schedule runs{phase_line(r.error)}",
                hint=HintName("uneven"),
            )
    ranks = ctx.require(result, schema=Uneven)
    for rank, facts in enumerate(ranks):
        raised = facts["raised"]
        if raised is None:
            raise ctx.fail(
                f"a batch of {UNEVEN_BATCH} samples in {UNEVEN_MICRO} micro-batches ran without an error on rank "
                f"{rank}: the micro-batches cannot be equal; expected {wanted}",
                hint=HintName("uneven"),
            )
        message = raised["message"]
        if not all(_names(message, n) for n in (UNEVEN_BATCH, UNEVEN_MICRO)):
            raise ctx.fail(
                f"rank {rank} raised ValueError({shorten(message, QUOTED)!r}) for a batch of {UNEVEN_BATCH} samples in "
                f"{UNEVEN_MICRO} micro-batches; the message must name both sizes",
                hint=HintName("uneven"),
            )


def _names(message: str, number: int) -> bool:
    """Whether `message` names `number` as a number of its own: not a digit of another, nor a part of a decimal
    ("4." ending a sentence names 4; "4.5" and "14" do not)."""
    return re.search(rf"(?<![\d.]){number}(?!\d|\.\d)", message) is not None
