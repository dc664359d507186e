"""Judging exercise 17: two runs in one grading, a save at W ranks and a resume at W/2 ranks into the
same scratch folder. Who wrote the checkpoint (the files DCP left, their sizes, the grader's own watch
on dcp.save and torch.save), what each rank handed DCP (its shards or whole tensors), whether the
AdamW state survived the resharding, and whether training after the resume equals uninterrupted
training on one process (localized, then replayed). Everything the checks compare against (the model's
layout, the saved weights and AdamW state, the uninterrupted run) comes from trusted workers, never from
a rank's report."""

from __future__ import annotations

import re
from typing import Any, Literal, TypeVar, cast

import numpy as np

from grader.checks.ex17_dcp_reshard.facts import (
    INSPECT_CHECKPOINT,
    REFERENCE,
    REPLAYS,
    RESUME,
    SAVE,
    AdamState,
    CheckpointCall,
    FileLoaded,
    FileSaved,
    Inspected,
    OptimizerBuilt,
    Planned,
    Reference,
    Resumed,
    Saved,
    Trained,
)
from grader.engine import RunResult
from grader.engine.facts import ReplayedStep, ReplayRequest
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.diagnose import failure_verdict, rank_phrase
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.trajectory import Setting, diagnose, gathered_steps

STEPS_BEFORE, STEPS_AFTER, LR, PER_RANK = 3, 2, 0.01, 2
STATE: tuple[Literal["exp_avg"], Literal["exp_avg_sq"]] = ("exp_avg", "exp_avg_sq")  # AdamW's moments
SAVE_DEADLINE = 20.0  # the saving run's: a rank alone in the collective save is told at once by the collective
# check (TORCH_DISTRIBUTED_DEBUG=DETAIL) at the grader's barrier after the save; without it, by this deadline
_HYPOTHESES = replay.load(__package__ or "")
_SHARD_FILE = re.compile(r"__(\d+)_\d+\.distcp$")
E = TypeVar("E", OptimizerBuilt, CheckpointCall, Planned, FileSaved, FileLoaded)
Shapes = dict[str, tuple[int, ...]]


def _path(ctx: CheckContext) -> str:
    return str(ctx.scratch / f"dcp-w{ctx.world_size}")


def _half(ctx: CheckContext) -> int:
    """The resuming job's world size: half the saving job's (W=1 resumes at 1, resharding nothing)."""
    return max(1, ctx.world_size // 2)


def _sizes(ctx: CheckContext) -> dict[str, Any]:
    return {
        "global_batch": PER_RANK * ctx.world_size,
        "steps_before": STEPS_BEFORE,
        "steps_after": STEPS_AFTER,
        "lr": LR,
    }


def _args(ctx: CheckContext) -> dict[str, Any]:
    """The arguments every worker of a grading shares: the sizes, the lr and the drawn seeds."""
    return {**_sizes(ctx), **ctx.seeds("data", "model")}


def _calls(facts: Saved | Resumed | Trained, kind: type[E], *ops: str) -> list[E]:
    """The watch's events of these ops, as `kind` (the schema holds each op to its own TypedDict, so
    the op says which one an event is)."""
    return [cast(E, event) for event in facts.get("events", []) if event["op"] in ops]


def _alone(
    ctx: CheckContext, result: RunResult, schema: type[Saved] | type[Resumed], ops: tuple[str, ...], what: str
) -> None:
    """A collective called by some ranks only, in a run that failed: named from the grader's watch."""
    if all(r.ok for r in result.ranks) or any((r.error or {}).get("not_implemented") for r in result.ranks):
        return
    ranks = [ctx.conform(r.facts, schema, r.rank, complete=r.ok) for r in result.ranks]
    calls = [_calls(facts, CheckpointCall, *ops) for facts in ranks]
    callers = [rank for rank, mine in enumerate(calls) if mine]
    absent = [rank for rank, mine in enumerate(calls) if not mine]
    if callers and absent:
        saving = "save" in what
        # the mistake, built from the reference's one call per rank at the path given: rank 0's call alone, and
        # (saving) the others returning from save_checkpoint, which does nothing else
        built: dict[str, object] = {"calls": [1] + [0] * (len(ranks) - 1), "paths": [_path(ctx)]}
        observed: dict[str, object] = {"calls": [len(mine) for mine in calls], "paths": [e["path"] for e in calls[0]]}
        if saving:
            built["returned"] = [True] * (len(ranks) - 1)
            observed["returned"] = [bool(ranks[rank].get("save_returned")) for rank in range(1, len(ranks))]
        proven = structural(Cause("save_on_rank0_only") if saving else Cause("load_on_rank0_only"), built, observed)
        raise ctx.fail(
            f"{rank_phrase(callers, len(result.ranks))} alone called the collective {what}; "
            f"{rank_phrase(absent, len(result.ranks))} never joined it (the grader's watch on {what} saw no call "
            "there)"
            + (", so the callers waited for ranks that had moved on" if proven else ", and the run failed")
            + f". {what} is a collective: every rank calls it, with its own shards, and DCP decides who writes what",
            hint=HintName("every_rank_saves") if saving else HintName("shard_then_load"),
            proven=proven,
        )


def _saved(ctx: CheckContext) -> list[Saved]:
    """The saving run at W ranks, under a short deadline; a save called by some ranks only is named here."""
    result = ctx.run(SAVE.name, deadline=min(ctx.deadline, SAVE_DEADLINE), path=_path(ctx), **_args(ctx))
    _alone(ctx, result, Saved, ("dcp.save", "dcp.async_save"), "dcp.save")
    return ctx.require(result, "while saving", schema=Saved)


def _resumed(ctx: CheckContext) -> list[Trained]:
    """The resuming run at W/2 ranks, after the save; a load called by some ranks only is named here."""
    _saved(ctx)
    # the model seed stays with the saving run and the trusted workers: resume cannot rebuild what was saved
    result = ctx.run(RESUME.name, nprocs=_half(ctx), path=_path(ctx), **_sizes(ctx), **ctx.seeds("data", "fresh"))
    _alone(ctx, result, Resumed, ("dcp.load",), "dcp.load")
    _optimizer_first(ctx, result)
    ranks = ctx.require(result, f"while resuming at W={_half(ctx)}", schema=Resumed)
    returned = ranks[0].get("returned")
    if returned is not None:
        raise ctx.fail(f"resume returned {returned}, not (model, optimizer)", hint=HintName("shard_then_load"))
    return [ctx.conform(outcome.facts, Trained, outcome.rank) for outcome in result.ranks]


def _built_before_shard(facts: Resumed | Trained) -> int:
    """How many plain tensors the optimizers resume built held, when none was built over DTensors and the
    model was sharded by the end: the optimizer was built before fully_shard (0 otherwise)."""
    built = _calls(facts, OptimizerBuilt, "optimizer")
    if built and not any(b["dtensors"] for b in built) and facts.get("sharded_at_end"):
        return int(built[-1]["params"])
    return 0


def _before_shard(ctx: CheckContext, ranks: list[Resumed] | list[Trained], stale: bool) -> Proven | None:
    """The optimizer built before fully_shard, proven: what that order builds from the reference (on every
    rank one optimizer over all the model's parameters, none a DTensor; the model sharded at the end; and, where
    resume returned, every parameter missing from the optimizer) is what every rank reports."""
    names = sorted(_shapes(_reference(ctx)))
    built: dict[str, object] = {
        "optimizers": [[{"dtensors": 0, "params": len(names)}]] * len(ranks),
        "sharded_at_end": [True] * len(ranks),
    }
    observed: dict[str, object] = {
        "optimizers": [
            [{"dtensors": b["dtensors"], "params": b["params"]} for b in _calls(facts, OptimizerBuilt, "optimizer")]
            for facts in ranks
        ],
        "sharded_at_end": [facts.get("sharded_at_end") for facts in ranks],
    }
    if stale:
        built["stale"] = [names] * len(ranks)
        observed["stale"] = [sorted(facts.get("stale_optimizer", [])) for facts in ranks]
    return structural(Cause("optimizer_before_shard"), built, observed)


def _optimizer_first(ctx: CheckContext, result: RunResult) -> None:
    """A resume that failed after building its optimizer over plain tensors, the model sharded at the end."""
    verdict = failure_verdict(result, ctx.student_file, f"while resuming at W={_half(ctx)}")
    if verdict is None or any((r.error or {}).get("not_implemented") for r in result.ranks):
        return
    ranks = [ctx.conform(r.facts, Resumed, r.rank, complete=r.ok) for r in result.ranks]
    plain = _built_before_shard(ranks[0])
    if plain:
        proven = _before_shard(ctx, ranks, stale=False)
        said = (
            "optimizer built before fully_shard: rank 0 built its optimizer over {plain} plain tensors, and the "
            "model was sharded afterwards (its parameters are DTensors now): fully_shard replaces every "
            "parameter, so the optimizer holds tensors the model no longer has. Build the optimizer after sharding"
            if proven
            else "rank 0 built no optimizer over DTensors (its last one holds {plain} plain tensors), and the model "
            "is sharded when resume returns: look at what the optimizer is built over, and when"
        )
        raise ctx.fail(
            f"{said.format(plain=plain)}. {verdict.message[:1].upper()}{verdict.message[1:]}",
            hint=HintName("shard_then_load"),
            proven=proven,
        )


def _inspect(ctx: CheckContext) -> Inspected:
    return ctx.inspect(INSPECT_CHECKPOINT, path=_path(ctx))


def _reference(ctx: CheckContext) -> Reference:
    return ctx.reference(REFERENCE, **_args(ctx))


def _shapes(reference: Reference) -> Shapes:
    """Every parameter's name and shape, from the trusted weights at the save: the layout the ranks'
    pieces are joined into (a rank's own account of its model's shapes is never asked for)."""
    return {name: tuple(value.shape) for name, value in reference["saved"].items()}


def _elements(count: int) -> str:
    return f"{count} element{'' if count == 1 else 's'}"


Contents = dict[str, int]  # what a state dict held, as the watch counts it (workers._contents)
COPIES = 3  # the state of one parameter: its weight, AdamW's exp_avg and exp_avg_sq (the step: one element)


def _contents(event: Planned | FileSaved) -> Contents:
    return {
        "dtensors": event["dtensors"],
        "local": event["local"],
        "whole": event["whole"],
        "whole_elements": event["whole_elements"],
    }


def _whole_state(shapes: Shapes, copies: int = COPIES) -> Contents:
    """The model (copies=1) or the model and its AdamW state (3) gathered into whole tensors, counted as the watch
    counts them: a tensor of one element is not counted."""
    counted = [int(np.prod(shape)) for shape in shapes.values() if int(np.prod(shape)) > 1]
    return {"dtensors": 0, "local": 0, "whole": copies * len(counted), "whole_elements": copies * sum(counted)}


def _shard_state(shapes: Shapes, world: int, rank: int) -> Contents:
    """One rank's shards of the model and its AdamW state: every tensor a DTensor whose local piece is the
    rank's chunk of dim 0, as torch.chunk (and FSDP2) cuts it."""
    local = sum(_piece(shape, world, rank) for shape in shapes.values())
    return {"dtensors": COPIES * len(shapes), "local": COPIES * local, "whole": 0, "whole_elements": 0}


def _piece(shape: tuple[int, ...], world: int, rank: int) -> int:
    """The elements of a rank's chunk of dim 0 of a tensor of this shape, as torch.chunk (and FSDP2) cuts it."""
    if not shape:
        return int(rank == 0)
    rows = -(-shape[0] // world)
    return max(0, min(rows, shape[0] - rank * rows)) * int(np.prod(shape[1:]))


def filled_whole(rank: int, tensors: int, elements: int, shapes: Shapes) -> str:
    """What a rank asked dcp.load to fill whole, against the model. The ranks count only the tensors of more
    than one element (workers._tensors: one element looks alike whole or sharded, as AdamW's step does), so
    the model is counted the same way and the tensors left out are named: "15 whole tensors (2368 elements)"
    then reads as the whole model, not as a model of 2369 elements with one missing."""
    counted = {name: int(np.prod(shape)) for name, shape in shapes.items() if int(np.prod(shape)) > 1}
    single = sorted(set(shapes) - set(counted))
    left_out = (
        f"; {', '.join(single)}, of one element, {'is' if len(single) == 1 else 'are'} not counted" if single else ""
    )
    model = f"{len(counted)} tensors of more than one element ({_elements(sum(counted.values()))}{left_out})"
    whole = f"{tensors} whole tensor{'' if tensors == 1 else 's'}"
    asked = f"rank {rank} asked dcp.load to fill {whole} ({_elements(elements)})"
    if tensors == len(counted) and elements == sum(counted.values()):
        return f"{asked}: all of the model's {model}"
    return f"{asked} of the model's {model}"


def _listing(saved: Inspected) -> str:
    """What the checkpoint path holds, in a few words."""
    if not saved["exists"]:
        return "nothing at the path"
    if not saved.get("folder"):
        return f"the path is one file of {saved.get('size', 0)} bytes"
    files = saved.get("files", {})
    return f"the path is a folder of {len(files)} file(s): " + ", ".join(
        f"{n} ({b} bytes)" for n, b in sorted(files.items())
    )


def _torch_saved(ctx: CheckContext, ranks: list[Saved], files: list[list[Contents]], saved: Inspected) -> None:
    """Files written with torch.save, and no dcp.save: one writer gathering the whole state, files of each
    rank's shards, or (unproven) what was measured."""
    world = ctx.world_size
    writers = [r for r, mine in enumerate(files) if mine]
    shapes = _shapes(_reference(ctx))
    if writers == [0] and not files[0][0]["whole_elements"]:
        raise ctx.fail(
            f"rank 0 alone wrote a checkpoint, with torch.save, and it holds no whole tensor (its own DTensor "
            f"shards, at most); {rank_phrase(list(range(1, world)), world)} wrote nothing, so their shards are "
            "in no file. Call dcp.save on every rank",
            hint=HintName("every_rank_saves"),
        )
    if writers == [0]:
        # what gathering to rank 0 builds from the reference: rank 0 alone saves the whole model and its state, once
        gathered = structural(
            Cause("gathered_to_rank0"), {"files": [[_whole_state(shapes)]] + [[]] * (world - 1)}, {"files": files}
        )
        elements = sum(c["whole_elements"] for c in files[0])
        said = (
            "Rank 0 held the whole model and its optimizer state in memory and wrote it alone: with dcp.save every "
            "rank writes its own shard, in parallel"
            if gathered
            else "Only rank 0 wrote: with dcp.save every rank writes its own shard, in parallel"
        )
        raise ctx.fail(
            ("one writer: " if gathered else "")
            + f"rank 0 alone wrote the checkpoint, with torch.save (whole tensors of {_elements(elements)} in all"
            + (", gathered from every rank's shards" if gathered else "")
            + f"); {rank_phrase(list(range(1, world)), world)} wrote nothing ({_listing(saved)}). {said}",
            hint=HintName("every_rank_saves"),
            proven=gathered,
        )
    paths = {e["path"] for facts in ranks for e in _calls(facts, FileSaved, "torch.save")}
    # what a torch.save per rank builds from the reference: each rank's own shards, in a file of its own
    built = {"files": [[_shard_state(shapes, world, r)] for r in range(world)], "paths": world}
    per_rank = structural(Cause("torch_save_per_rank"), built, {"files": files, "paths": len(paths)})
    first = files[writers[0]][0]
    measured = (
        f" ({len(paths)} path{'' if len(paths) == 1 else 's'}; rank {writers[0]}: {first['dtensors']} DTensor "
        f"shards and {first['whole']} whole tensors)"
    )
    raise ctx.fail(
        f"{rank_phrase(writers, world)} wrote a file"
        + (" of its own" if per_rank else "")
        + " with torch.save and no rank called dcp.save"
        + ("" if per_rank else measured)
        + ": there is no DCP metadata (.metadata) saying which piece of which tensor is where"
        + (", so nothing can load these shards at another world size" if per_rank else "")
        + ". Call dcp.save on every rank",
        hint=HintName("every_rank_saves"),
        proven=per_rank,
    )


def _unwaited(ctx: CheckContext, ranks: list[Saved]) -> None:
    """dcp.async_save's future left untouched when save_checkpoint returned."""
    world = ctx.world_size
    unwaited = [r for r, facts in enumerate(ranks) if facts.get("async_unwaited")]
    if not unwaited:
        return
    # what an unwaited async save builds from the reference: on every rank one dcp.async_save at the path given,
    # its future never touched
    observed = {
        "saves": [
            [(e["op"], e["path"]) for e in _calls(f, CheckpointCall, "dcp.save", "dcp.async_save")] for f in ranks
        ],
        "unwaited": [f.get("async_unwaited", 0) for f in ranks],
    }
    built = {"saves": [[("dcp.async_save", _path(ctx))]] * world, "unwaited": [1] * world}
    proven = structural(Cause("async_save_not_waited"), built, observed)
    raise ctx.fail(
        ("asynchronous save never waited for: " if proven else "")
        + f"on {rank_phrase(unwaited, world)}, save_checkpoint returned without touching the future "
        "dcp.async_save gave back (the grader held the background write until then, and finished it itself)"
        + (
            ". A job that moves on, saves again or exits before that future is done leaves a partial checkpoint: "
            "call .result() on it before the next save and before exiting"
            if proven
            else ": look at what becomes of that future"
        ),
        hint=HintName("async_save"),
        proven=proven,
    )


def _paths(ctx: CheckContext, ranks: list[Saved]) -> None:
    """dcp.save called with different paths on different ranks."""
    world = ctx.world_size
    calls = [_calls(facts, CheckpointCall, "dcp.save", "dcp.async_save") for facts in ranks]
    paths = {r: e["path"] for r, mine in enumerate(calls) for e in mine}
    if len(set(paths.values())) <= 1:
        return
    # what a path per rank builds from the reference: one save per rank, each at a path of its own
    built = {"calls": [1] * world, "paths": world}
    proven = structural(
        Cause("path_per_rank"), built, {"calls": [len(mine) for mine in calls], "paths": len(set(paths.values()))}
    )
    said = ", ".join(f"rank {r}: {path!r}" for r, path in sorted(paths.items()))
    raise ctx.fail(
        ("a checkpoint path per rank: " if proven else "")
        + f"the ranks called dcp.save with different paths ({said})"
        + (
            ", so each rank's shards went to a folder of its own and DCP's .metadata, written by the coordinator, "
            "only into rank 0's"
            if proven
            else ""
        )
        + ". One checkpoint is one folder, the same path on every rank",
        hint=HintName("every_rank_saves"),
        proven=proven,
    )


@check("every_rank_writes")
def every_rank_writes(ctx: CheckContext) -> None:
    ranks = _saved(ctx)
    world = ctx.world_size
    saved = _inspect(ctx)
    written = [[_contents(e) for e in _calls(facts, FileSaved, "torch.save")] for facts in ranks]
    saves = [r for r, facts in enumerate(ranks) if _calls(facts, CheckpointCall, "dcp.save", "dcp.async_save")]
    if any(written) and not saves:
        _torch_saved(ctx, ranks, written, saved)
    _unwaited(ctx, ranks)
    _paths(ctx, ranks)
    if not saved["exists"] or not saved.get("folder"):
        raise ctx.fail(
            f"no checkpoint folder at the path given to save_checkpoint ({'a file' if saved['exists'] else 'nothing'} "
            "there): dcp.save(state_dict, checkpoint_id=path) writes a folder",
            hint=HintName("every_rank_saves"),
        )
    files = saved.get("files", {})
    if ".metadata" not in files:
        raise ctx.fail(
            f"the checkpoint folder has no .metadata (its files: {sorted(files)}): dcp.save writes it on the "
            "coordinator rank once every rank has written its shard",
            hint=HintName("every_rank_saves"),
        )
    if "problem" in saved:  # refused (it names what no checkpoint holds), damaged, or not DCP's
        raise ctx.fail(saved["problem"])
    plans = [[_contents(plan) for plan in _calls(facts, Planned, "write")] for facts in ranks]
    whole = [(r, plan) for r, mine in enumerate(plans) for plan in mine if plan["whole_elements"] > 0]
    if whole:
        rank, plan = whole[0]
        # what full_state_dict=True builds from the reference: every rank hands one save the whole model and state
        built = {"plans": [[_whole_state(_shapes(_reference(ctx)))]] * world}
        proven = structural(Cause("full_state_dict_saved"), built, {"plans": plans})
        said = (
            "the state was gathered into whole tensors (full_state_dict=True, or full_tensor()) before the save, "
            "so ranks held the whole model at once where each needs only its shard. Hand DCP the sharded state "
            "dict: get_state_dict's default, or model.state_dict() of an FSDP2 model"
            if proven
            else "dcp.save needs only each rank's shards (DTensors): look at how the state dict handed to it was built"
        )
        raise ctx.fail(
            f"rank {rank} handed dcp.save {plan['whole']} whole tensors ({_elements(plan['whole_elements'])}) and "
            f"{plan['dtensors']} DTensor shards: {said}",
            hint=HintName("every_rank_saves"),
            proven=proven,
        )
    sizes = [0] * world
    for name, size in files.items():
        found = _SHARD_FILE.search(name)
        if found and int(found.group(1)) < world:
            sizes[int(found.group(1))] += size
    empty = [r for r, size in enumerate(sizes) if size == 0]
    if empty:
        raise ctx.fail(
            f"{rank_phrase(empty, world)} wrote no shard file (__<rank>_<n>.distcp) into the checkpoint folder; "
            f"its files: {sorted(files)}",
            hint=HintName("every_rank_saves"),
        )


def _keys_saved(ctx: CheckContext) -> list[str]:
    """The keys the checkpoint's metadata lists; where the grader could not read them (a refused or damaged
    .metadata), the check fails saying so, rather than judge as if the checkpoint held no key."""
    saved = _inspect(ctx)
    if "problem" in saved:
        raise ctx.fail(saved["problem"])
    return saved.get("keys", [])


def _optimizer_saved(keys: list[str]) -> bool:
    return any("exp_avg" in key for key in keys)


def _gathered(per_rank: list[dict[str, np.ndarray]], shapes: Shapes) -> dict[str, np.ndarray] | None:
    """Each parameter's whole tensor, from every rank's flat piece joined in rank order; None when the
    pieces do not make the trusted shapes."""
    joined = {}
    for name, shape in shapes.items():
        pieces = [mine.get(name) for mine in per_rank]
        if any(piece is None for piece in pieces):
            return None
        whole = np.concatenate([np.asarray(piece).ravel() for piece in pieces])
        if whole.size != int(np.prod(shape)):
            return None
        joined[name] = whole.reshape(shape)
    return joined


def _not_sharded(ctx: CheckContext, ranks: list[Trained], shapes: Shapes) -> None:
    plain = [name for name in shapes if name not in ranks[0]["sharded"]]
    if plain:
        raise ctx.fail(
            f"the model resume returned is not sharded: {len(plain)} of its {len(shapes)} parameters (e.g. "
            f"{plain[0]}) are plain tensors, not DTensors; call fully_shard on each block and then on the model, "
            "with the mesh given",
            hint=HintName("shard_then_load"),
        )
    stale = ranks[0]["stale_optimizer"]
    if stale:
        measured = (
            f"the optimizer resume returned does not hold the model's parameters ({len(stale)} of them, e.g. "
            f"{stale[0]}, are not among its params)"
        )
        proven = _before_shard(ctx, ranks, stale=True) if _built_before_shard(ranks[0]) else None
        if proven:
            raise ctx.fail(
                f"optimizer built before fully_shard: {measured}: it was built over plain tensors, and fully_shard "
                "then replaced every parameter with a DTensor; build it after sharding",
                hint=HintName("shard_then_load"),
                proven=proven,
            )
        raise ctx.fail(
            f"{measured}; build it over model.parameters() once the model is sharded", hint=HintName("shard_then_load")
        )


@check("resumes_at_half")
def resumes_at_half(ctx: CheckContext) -> None:
    ranks = _resumed(ctx)
    reference = _reference(ctx)
    shapes = _shapes(reference)
    _not_sharded(ctx, ranks, shapes)
    loaded = _gathered([facts["loaded"] for facts in ranks], shapes)
    expected = reference["saved"]
    difference = first_difference(loaded or {}, expected)
    if difference:
        raise ctx.fail(
            f"after resume at W={_half(ctx)}, the model does not hold the weights saved at W={ctx.world_size}: "
            f"{difference}",
            hint=HintName("shard_then_load"),
        )
    steps = gathered_steps([[dict(step) for step in facts["steps"]] for facts in ranks], shapes)
    if steps is None or len(steps) != STEPS_AFTER:
        counts = [len(facts["steps"]) for facts in ranks]
        raise ctx.fail(
            f"{counts} optimizer steps recorded per rank after resuming, where the grader took {STEPS_AFTER}"
        )
    resumed = STEPS_BEFORE + 1
    replayer = ctx.replayer(REPLAYS, **_sizes(ctx))

    def replays(requests: dict[str, ReplayRequest]) -> dict[str, list[ReplayedStep]]:
        return {name: trajectory[STEPS_BEFORE:] for name, trajectory in replayer(requests).items()}

    setting = Setting(
        lr=LR,
        momentum=0.0,
        factors={"W": ctx.world_size, "resumed": resumed},
        reference=f"uninterrupted AdamW training on one process, from step {resumed}",
        labels={1: "the first step after resuming"},
        context=f"after resuming at W={_half(ctx)}: ",
        subject="the ranks' shards joined",
        hypotheses=_HYPOTHESES,
        replay=replays,
        optimizer=f"AdamW(lr={LR:g})",
    )
    trusted_steps = [dict(step) for step in reference["steps"][STEPS_BEFORE:]]
    finding = diagnose(steps, loaded or {}, trusted_steps, expected, setting)
    if finding is None:
        return
    proven = finding.proven
    if finding.cause == "optimizer_state_lost":
        keys = _keys_saved(ctx)
        where = (
            "the checkpoint holds the optimizer state, so resume did not load it into the optimizer "
            "(set_state_dict, or an optimizer state dict that DCP filled and nobody applied)"
            if _optimizer_saved(keys)
            else "the checkpoint holds no optimizer state at all (no exp_avg among its keys): save_checkpoint "
            "saved the model alone"
        )
        raise ctx.fail(f"{finding.message} ({where})", hint=HintName("optimizer_state"), proven=proven)
    raise ctx.fail(
        f"resumed training differs from uninterrupted training: {finding.message}",
        hint=finding.hint or HintName("optimizer_state"),
        proven=proven,
    )


def _never_loaded(ranks: list[Trained]) -> bool:
    """Whether every rank's AdamW state is the one get_state_dict initializes (one step of zero gradients)."""
    return all(
        buffers.get("step") == 1.0
        and all(not np.any(np.asarray(buffers[key])) for key in ("exp_avg", "exp_avg_sq") if key in buffers)
        for facts in ranks
        for buffers in facts["state"].values()
    )


def _moments_saved(keys: list[str], names: list[str]) -> dict[str, list[str]]:
    """Which AdamW moments the checkpoint's metadata lists for each parameter (DCP's flattened keys end in
    `<parameter>.<buffer>`)."""
    return {
        name: [buf for buf in STATE if any(key == f"{name}.{buf}" or key.endswith(f".{name}.{buf}") for key in keys)]
        for name in names
    }


def _fresh_held(buffers: AdamState) -> dict[str, object]:
    """A parameter's AdamW state as the fresh one is compared: the step, and each moment's size and whether it is
    all zero."""
    held: dict[str, object] = {"step": buffers.get("step")}
    for key in STATE:
        if key in buffers:
            held[key] = (int(np.asarray(buffers[key]).size), not bool(np.any(np.asarray(buffers[key]))))
    return held


def _fresh_built(size: int) -> dict[str, object]:
    """The state get_state_dict initializes for a fresh AdamW: step 1, zero moments of the rank's piece's size."""
    return {"step": 1.0, **{key: (size, True) for key in STATE}}


def _state_not_restored(
    ctx: CheckContext, ranks: list[Trained], shapes: Shapes, keys: list[str], fresh: bool
) -> Proven | None:
    """The optimizer state never saved, or saved and not loaded, proven field by field: what each builds from
    the reference (the checkpoint's moments: none, or both for every parameter; the student's save building no
    optimizer of its own, so that what it saved is the trained one's; on every rank the resumed AdamW holding, for
    every parameter, no state at all, or (`fresh`) the state get_state_dict initializes: step 1, zero moments
    of the rank's piece's size) is what the run built."""
    names = list(shapes)
    held: list[list[object]]
    if fresh:
        held = [[_fresh_held(f["state"].get(name, {"lr": LR})) for name in names] for f in ranks]
        restored: list[list[object]] = [
            [_fresh_built(_piece(shapes[name], len(ranks), r)) for name in names] for r in range(len(ranks))
        ]
    else:
        held = [[sorted(set(f["state"].get(name, {})) - {"lr"}) for name in names] for f in ranks]
        restored = [[[]] * len(names)] * len(ranks)
    saving = [[(b["dtensors"], b["params"]) for b in _calls(f, OptimizerBuilt, "optimizer")] for f in _saved(ctx)]
    observed = {"checkpoint": _moments_saved(keys, names), "held": held, "save_built": saving}

    def built(moments: list[str]) -> dict[str, object]:
        return {"checkpoint": {name: moments for name in names}, "held": restored, "save_built": [[]] * len(saving)}

    loaded = structural(Cause("optimizer_not_loaded"), built(list(STATE)), observed)
    # get_state_dict's initial state is there to load into: it is no sign of a state never saved
    return loaded or (None if fresh else structural(Cause("optimizer_not_saved"), built([]), observed))


@check("optimizer_resharded")
def optimizer_resharded(ctx: CheckContext) -> None:
    ranks = _resumed(ctx)
    trusted = _reference(ctx)
    shapes = _shapes(trusted)
    _not_sharded(ctx, ranks, shapes)
    reference = trusted["saved_state"]
    names = list(shapes)
    keys = _keys_saved(ctx)
    for rank, facts in enumerate(ranks):  # every rank: a parameter absent on one is read below
        empty = [name for name in names if not {"exp_avg", "exp_avg_sq"} <= set(facts["state"].get(name, {}))]
        if empty:
            proven = _state_not_restored(ctx, ranks, shapes, keys, fresh=False)
            why = {
                "optimizer_not_loaded": "the checkpoint holds it (exp_avg among its keys), so it was not loaded into "
                "the optimizer",
                "optimizer_not_saved": "the checkpoint holds no optimizer state (no exp_avg among its keys): it was "
                "never saved",
            }
            moments = sum(bool(held) for held in _moments_saved(keys, names).values())
            raise ctx.fail(
                f"optimizer state not restored: after resume at W={_half(ctx)}, rank {rank}'s AdamW holds no "
                f"exp_avg / exp_avg_sq for {len(empty)} of the {len(names)} parameters (e.g. {empty[0]}); "
                + (
                    why[proven.cause]
                    if proven
                    else f"the checkpoint lists exp_avg or exp_avg_sq for {moments} of them: look at what the "
                    "optimizer resume returned holds, parameter by parameter"
                ),
                hint=HintName("optimizer_state"),
                proven=proven,
            )
    if _never_loaded(ranks):
        proven = _state_not_restored(ctx, ranks, shapes, keys, fresh=True)
        raise ctx.fail(
            f"optimizer state not restored: after resume at W={_half(ctx)}, the AdamW state is the empty state "
            "get_state_dict creates for a fresh optimizer (step 1, exp_avg and exp_avg_sq all zero on every rank)"
            + (
                ", though the checkpoint holds the saved one: nothing was loaded into it. Pass the state dict "
                "dcp.load filled to set_state_dict(model, optimizer, ..., optim_state_dict=...)"
                if proven
                else ": look at what the checkpoint holds of the optimizer and what resume loads into it"
            ),
            hint=HintName("optimizer_state"),
            proven=proven,
        )
    for rank, facts in enumerate(ranks):
        steps = {name: facts["state"][name].get("step") for name in names}
        wrong = {name: step for name, step in steps.items() if step != float(STEPS_BEFORE)}
        if wrong:
            name, step = next(iter(wrong.items()))
            raise ctx.fail(
                f"after resume, rank {rank}'s AdamW step counter for {name} is {step}, where {STEPS_BEFORE} steps "
                "were taken before the save: the bias correction of the next steps depends on it",
                hint=HintName("optimizer_state"),
            )
        rates = {facts["state"][name]["lr"] for name in names}
        if rates != {LR}:
            raise ctx.fail(
                f"after resume, rank {rank}'s optimizer has lr {sorted(rates)}, not the lr given ({LR:g})",
                hint=HintName("optimizer_state"),
            )
    for key in STATE:
        per_rank = [{name: facts["state"][name][key] for name in names} for facts in ranks]
        joined = _gathered(per_rank, shapes)
        expected = {name: np.asarray(reference[name][key]) for name in names}
        difference = first_difference(joined or {}, expected) if joined else None
        if joined is None or difference:
            measured = str(difference) if difference else "its pieces do not make whole tensors"
            raise ctx.fail(
                f"after resume at W={_half(ctx)}, the ranks' {key} shards joined are not the AdamW state at the "
                f"save at W={ctx.world_size}: {measured}",
                hint=HintName("optimizer_state"),
            )


def _loaded_whole(ranks: list[Trained], shapes: Shapes) -> Proven | None:
    """The model loaded before fully_shard, proven: what that order builds from the reference (on every rank one
    fill of the model's whole tensors while it is not sharded, the model sharded at the end) is what every rank
    asked of dcp.load."""
    observed = []
    for facts in ranks:
        unsharded, asked = [], None
        for event in facts.get("events", []):
            if event["op"] == "dcp.load":
                asked = event.get("model_sharded")
            elif event["op"] == "fill" and asked is False:
                unsharded.append(_contents(event))
        observed.append(unsharded)
    built = {"fills": [[_whole_state(shapes, copies=1)]] * len(ranks), "sharded_at_end": [True] * len(ranks)}
    return structural(
        Cause("loaded_before_shard"),
        built,
        {"fills": observed, "sharded_at_end": [facts.get("sharded_at_end") for facts in ranks]},
    )


@check("loads_own_shard")
def loads_own_shard(ctx: CheckContext) -> None:
    ranks = _resumed(ctx)
    half = _half(ctx)
    # a file of whole tensors; one of none (metadata beside DCP's files, as Lightning writes) holds no state
    loaded = [sum(e["whole_elements"] for e in _calls(facts, FileLoaded, "torch.load")) for facts in ranks]
    readers = [r for r, elements in enumerate(loaded) if elements]
    if readers:
        raise ctx.fail(
            f"{rank_phrase(readers, half)} read a whole checkpoint file with torch.load (whole tensors of "
            f"{_elements(loaded[readers[0]])} on rank {readers[0]}): every rank held the whole state at once. Load "
            "with dcp.load into the sharded state dict, each rank reading its pieces",
            hint=HintName("shard_then_load"),
        )
    if not any(_calls(facts, CheckpointCall, "dcp.load") for facts in ranks):
        raise ctx.fail(
            "no rank called dcp.load: resume loads the checkpoint with dcp.load", hint=HintName("shard_then_load")
        )
    shapes = _shapes(_reference(ctx))
    for rank, facts in enumerate(ranks):
        sharded = None  # whether the model was sharded when the dcp.load being planned was called
        for event in facts.get("events", []):
            if event["op"] == "dcp.load":
                sharded = event.get("model_sharded")
            if event["op"] != "fill" or event["whole_elements"] == 0:
                continue
            wanted = filled_whole(rank, event["whole"], event["whole_elements"], shapes)
            if sharded is False and facts.get("sharded_at_end"):
                proven = _loaded_whole(ranks, shapes)
                raise ctx.fail(
                    ("model loaded before fully_shard: " if proven else "")
                    + f"{wanted}, while the model was not sharded yet; it was sharded after the load"
                    + (
                        ", so every rank read the whole model. Shard first, then load: each rank reads only its pieces"
                        if proven
                        else ": look at what is loaded before fully_shard"
                    ),
                    hint=HintName("shard_then_load"),
                    proven=proven,
                )
            raise ctx.fail(
                f"{wanted}, and {event['dtensors']} DTensor shards, with the model already sharded: every rank read "
                "whole tensors (a full_state_dict=True state dict?). Load into the sharded state dict "
                "(get_state_dict's default), so that each rank reads only its pieces",
                hint=HintName("shard_then_load"),
            )
