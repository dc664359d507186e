"""Judging exercise 14: a tensor-parallel MLP block, by hand and with parallelize_module, against the
unsplit block computed by the grader's trusted `reference` worker (a process that never loads student
code, from the ranks' seed); which slice of each weight each rank holds (by value); the collectives of
forward and of backward, counted by the grader's dispatch mode. The ranks report only what the student's
code produced: a rank that copies a reference into its outputs has no reference to copy.

A cause is named only where it is proven (grader/judge/proof.py): a structural replay (what the mistake
builds from the trusted full weights: the block every shard holds, or every parameter's placements and local
shard, and the collectives of forward and backward, on every rank, equal to the run's), or a replay of it
(`simulate` in workers.py: every rank's part in one process, with f and g changed) that reproduces the
output, x's gradient and every shard's gradient on every rank. Anything else is said as measured.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from grader.checks.ex14_tensor_parallel.facts import (
    BY_HAND,
    PARALLELIZED,
    REFERENCE,
    REPLAYS,
    ByHand,
    Collective,
    Parallelized,
    Passes,
    Reference,
    Replay,
    TensorFacts,
)
from grader.engine.facts import ReplayRequest
from grader.judge import replay
from grader.judge.api import CheckContext, CheckFailed, check
from grader.judge.compare import fraction, proportional, scale_of
from grader.judge.diagnose import failure_verdict
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.tolerance import close
from grader.judge.verdict import Verdict
from grader.judge.wording import article

RTOL, ATOL = 1e-5, 1e-5  # a sum of W partial products against one matrix product, in fp32
REPLAY_RTOL = 1e-4
KEYS = ("w1", "b1", "w2", "b2")
PARAMETERS = {"fc1.weight": "w1", "fc1.bias": "b1", "fc2.weight": "w2", "fc2.bias": "b2"}
EXPECTED_PLACEMENTS = {
    "fc1.weight": "Shard(dim=0)",
    "fc1.bias": "Shard(dim=0)",
    "fc2.weight": "Shard(dim=1)",
    "fc2.bias": "Replicate()",
}

_HYPOTHESES = replay.load(__package__ or "")  # hypotheses.toml: the causes the numbers can name


# --- the facts -----------------------------------------------------------------------------------


def _value(facts: TensorFacts | None) -> np.ndarray | None:
    return facts.get("value") if facts is not None else None


def _exactly(got: np.ndarray, want: np.ndarray) -> float | None:
    """c where `got` is exactly c times `want` (c > 0, c != 1), else None."""
    return proportional({"": got}, {"": want}, RTOL, ATOL) if got.shape == want.shape else None


def _apart(got: np.ndarray, want: np.ndarray) -> str:
    """The words between a measured tensor and "the reference's": the exact ratio where there is one, else how
    far apart, or the two shapes."""
    if got.shape != want.shape:
        return f"has shape {list(got.shape)}, not the shape {list(want.shape)} of"
    if (factor := _exactly(got, want)) is not None:
        return f"is exactly {fraction(factor)}"
    return f"differs by up to {float(np.abs(got - want).max()):.3g} from"


def _describe_value(facts: TensorFacts | None, what: str) -> str:
    """What a returned value is, when it is not a float32 tensor the judge can compare."""
    if facts is None or "shape" not in facts:
        return f"{what} is a {'NoneType' if facts is None else facts['type']}, not a tensor"
    if facts["type"] == "DTensor":
        return f"{what} is a DTensor (placements {', '.join(facts.get('placements', []))}), not a plain tensor"
    dtype = facts.get("dtype", "an unreported dtype")
    if dtype != "torch.float32":
        return f"{what} has dtype {dtype.removeprefix('torch.')}, expected float32"
    return f"{what} has shape {facts['shape']}"


def _slices(full: np.ndarray, world_size: int) -> dict[tuple[str, int], np.ndarray]:
    """Every 1/W block of a weight (rows or columns) or bias, by (dimension, index)."""
    found: dict[tuple[str, int], np.ndarray] = {}
    axes = ("rows", "columns") if full.ndim == 2 else ("slice",)
    for axis, name in enumerate(axes):
        if full.shape[axis] % world_size == 0:
            for index, block in enumerate(np.split(full, world_size, axis=axis)):
                found[(name, index)] = block
    return found


def _locate(got: np.ndarray | None, full: np.ndarray, world_size: int) -> tuple[str, int, bool] | None:
    """Which block of `full` a shard holds: (rows/columns/slice/whole, rank's index, stored transposed)."""
    if got is None:
        return None
    candidates = {**_slices(full, world_size), ("whole", -1): full}
    for (axis, index), block in candidates.items():
        if close(got, block, rtol=0, atol=0):
            return axis, index, False
        if block.ndim == 2 and close(got, block.T, rtol=0, atol=0):
            return axis, index, True
    return None


Layout = dict[str, tuple[str, int, bool] | None]  # per shard: the block it holds (_locate)
RIGHT = {"w1": "rows", "b1": "slice", "w2": "columns", "b2": "whole"}
PART = {"w1": "fc1's weight", "b1": "fc1's bias", "w2": "fc2's weight", "b2": "fc2's bias"}
WHAT = {key: f"{key} ({part})" for key, part in PART.items()}
# What a layout mistake builds on rank r: the block of each weight it determines, (dimension, whose block).
# b2 is left out of the two split mistakes: where the second bias goes is a choice of its own (measured apart).
Blocks = dict[str, tuple[str, int]]
LAYOUT_MISTAKES: dict[str, Callable[[int], Blocks]] = {
    "row_then_column": lambda r: {"w1": ("columns", r), "b1": ("whole", -1), "w2": ("rows", r)},
    "both_column_wise": lambda r: {"w1": ("rows", r), "b1": ("slice", r), "w2": ("rows", r)},
    "not_sharded": lambda r: {key: ("whole", -1) for key in KEYS},
}
# Each parameter's placement and local block under a plan: column-then-row's, and the two mistaken plans.
PLANS: dict[str, dict[str, tuple[str, str]]] = {
    "column_then_row": {
        "fc1.weight": ("Shard(dim=0)", "rows"),
        "fc1.bias": ("Shard(dim=0)", "slice"),
        "fc2.weight": ("Shard(dim=1)", "columns"),
        "fc2.bias": ("Replicate()", "whole"),
    },
    "row_then_column": {
        "fc1.weight": ("Shard(dim=1)", "columns"),
        "fc1.bias": ("Replicate()", "whole"),
        "fc2.weight": ("Shard(dim=0)", "rows"),
        "fc2.bias": ("Shard(dim=0)", "slice"),
    },
    "both_column_wise": {
        "fc1.weight": ("Shard(dim=0)", "rows"),
        "fc1.bias": ("Shard(dim=0)", "slice"),
        "fc2.weight": ("Shard(dim=0)", "rows"),
        "fc2.bias": ("Shard(dim=0)", "slice"),
    },
}


def _right(rank: int) -> Blocks:
    """Column-then-row's blocks on `rank`."""
    return {key: (RIGHT[key], -1 if key == "b2" else rank) for key in KEYS}


def _held(layout: Layout, keys: Sequence[str]) -> dict[str, object]:
    """The block each of `keys` holds, [dimension, index] (None: no block): stored transposed or not is no part
    of a layout mistake."""
    return {key: [where[0], where[1]] if (where := layout[key]) is not None else None for key in keys}


def _layout_proof(cause: Cause, layouts: list[Layout], built: Callable[[int], Blocks]) -> Proven | None:
    """`cause`, proven when the blocks its mistake builds from the full weights are those every rank holds."""
    hypothesis = {f"rank {r}": {key: list(block) for key, block in built(r).items()} for r in range(len(layouts))}
    observed = {f"rank {r}": _held(layout, list(built(r))) for r, layout in enumerate(layouts)}
    return structural(cause, hypothesis, observed)


def _offset_proof(layouts: list[Layout]) -> Proven | None:
    """A wrong offset, proven when every rank holds a block of the right dimension of each weight, all of one
    other rank's (the one rank w1's block belongs to), the W ranks' blocks a permutation of the W blocks."""
    whose = [layout["w1"][1] if layout["w1"] is not None else -2 for layout in layouts]
    hypothesis: dict[str, object] = {
        f"rank {r}": {key: [RIGHT[key], -1 if key == "b2" else whose[r]] for key in KEYS} for r in range(len(layouts))
    }
    observed: dict[str, object] = {f"rank {r}": _held(layout, KEYS) for r, layout in enumerate(layouts)}
    hypothesis["blocks"], observed["blocks"] = list(range(len(layouts))), sorted(whose)
    return structural(Cause("wrong_slice"), hypothesis, observed)


# --- by hand -------------------------------------------------------------------------------------


def _reference(ctx: CheckContext) -> Reference:
    """The trusted numbers: the weights every rank is given, the unsplit block's, and the replays."""
    facts = ctx.reference(REFERENCE, world=ctx.world_size, **ctx.seeds("data"))
    return facts


def _by_hand(ctx: CheckContext) -> tuple[list[ByHand], Verdict | None]:
    """Each rank's facts (those a failed run left too, held to the schema as far as they go), and the
    failure verdict (None if none)."""
    result = ctx.run(BY_HAND.name, **ctx.seeds("data"))
    verdict = failure_verdict(result, ctx.student_file)
    return [ctx.conform(r.facts, ByHand, r.rank, complete=r.ok) for r in result.ranks], verdict


def _shards(facts: ByHand, rank: int) -> dict[str, np.ndarray] | str:
    """The shards' values, or the sentence that says why the judge cannot use them."""
    shards = facts.get("shards")
    if shards is None:
        return ""
    if shards["type"] != "dict":
        return f"shard_mlp returned {article(str(shards['type']))} on rank {rank}, not a dict of tensors"
    keys, tensors = shards.get("keys", []), shards.get("tensors", {})
    missing = [k for k in KEYS if k not in keys or k not in tensors]
    if missing:
        return f"shard_mlp's dict on rank {rank} has keys {keys}: {', '.join(missing)} missing"
    values = {}
    for key in KEYS:
        value = _value(tensors[key])
        if value is None:
            return f"on rank {rank}, " + _describe_value(tensors[key], f'shard "{key}"')
        values[key] = value
    return values


def _layouts(
    ctx: CheckContext, ranks: list[ByHand], full: dict[str, np.ndarray]
) -> list[tuple[dict[str, np.ndarray], Layout]]:
    """Per rank, its shards' values and the block of the trusted `full` weights each holds; fails where a
    rank's shards are unusable."""
    found = []
    for rank, facts in enumerate(ranks):
        shards = _shards(facts, rank)
        if isinstance(shards, str):
            raise ctx.fail(shards or f"rank {rank} did not report its shards", hint=HintName("slices"))
        found.append((shards, {k: _locate(shards[k], full[k], ctx.world_size) for k in KEYS}))
    return found


def _layout_failure(ctx: CheckContext, ranks: list[ByHand], full: dict[str, np.ndarray], also: str = "") -> None:
    """Fail with what the shards hold, when a rank holds other than its own blocks of the weights it was given."""
    world = ctx.world_size
    found = _layouts(ctx, ranks, full)
    layouts = [layout for _, layout in found]
    for rank, (shards, layout) in enumerate(found):
        w1, w2 = layout["w1"], layout["w2"]
        if w1 and w2 and w1[0] == "columns" and w2[0] == "rows":
            measured = f"rank {rank} holds columns of w1 (its input features) and rows of w2 (its output features)"
            proven = _layout_proof(Cause("row_then_column"), layouts, LAYOUT_MISTAKES["row_then_column"])
            raise ctx.fail(
                f"row-then-column: {measured}, and every rank its own columns of w1, all of b1 and its own rows of "
                "w2. That splits the first layer's input, so its partial hidden sums must be all-reduced "
                "before GELU, and the second layer's output columns then all-gathered: two collectives in forward "
                "where column-then-row needs one. Keep w1's rows (output features) and w2's columns (input "
                f"features){also}"
                if proven
                else f"{measured}; column-then-row keeps w1's rows (output features) and w2's columns (input "
                f"features){also}",
                hint=HintName("column_then_row"),
                proven=proven,
            )
        if w1 and w2 and w1[0] == "rows" and w2[0] == "rows":
            measured = f"rank {rank} holds rows of w1 and rows of w2"
            proven = _layout_proof(Cause("both_column_wise"), layouts, LAYOUT_MISTAKES["both_column_wise"])
            raise ctx.fail(
                f"both column-wise: {measured}, and every rank its own rows of w1, b1 and w2, so both layers are "
                "split along their output features. The second layer then needs the whole hidden layer (an "
                "all-gather before it) and its output is split again (another all-gather). Split w2 along its input "
                f"features, its columns: the hidden features this rank already holds{also}"
                if proven
                else f"{measured}: both split along their output features; column-then-row keeps w2's columns (its "
                f"input features){also}",
                hint=HintName("column_then_row"),
                proven=proven,
            )
        for key in KEYS:
            where = layout[key]
            shape = list(shards[key].shape)
            if where is None:
                block = _slices(full[key], world).get((RIGHT[key], rank), full[key])
                factor = _exactly(shards[key], block)
                raise ctx.fail(
                    f'rank {rank}\'s shard "{key}" (shape {shape}) is no block of {WHAT[key]}: rank {rank} '
                    f"keeps {_name_block(key, rank, block.shape[0 if key != 'w2' else 1], world)}"
                    + (f", and the shard is exactly {fraction(factor)} it" if factor is not None else "")
                    + also,
                    hint=HintName("slices"),
                )
            axis, index, _ = where
            if axis == "whole" and key != "b2":
                own = _name_block(key, rank, full[key].shape[0 if key != "w2" else 1] // world, world)
                proven = _layout_proof(Cause("not_sharded"), layouts, LAYOUT_MISTAKES["not_sharded"])
                raise ctx.fail(
                    f"not sharded: rank {rank} holds all of {WHAT[key]}, shape {shape}, and every rank all of w1, "
                    f"b1, w2 and b2, so every rank stores the whole block; each keeps 1/W of it: {own}{also}"
                    if proven
                    else f"rank {rank} holds all of {WHAT[key]}, shape {shape}; it keeps 1/W of it: {own}{also}",
                    hint=HintName("slices"),
                    proven=proven,
                )
            if key == "b2" and axis != "whole":
                raise ctx.fail(
                    f"b2 sharded: rank {rank} holds {axis} {index} of b2 (shape {shape}); b2 belongs to the output, "
                    f"which g makes whole on every rank: keep all of b2 and add it once, after g{also}",
                    hint=HintName("bias_once"),
                )
            if axis != RIGHT[key]:
                raise ctx.fail(
                    f"{key} split along the wrong dimension: rank {rank} holds {axis} of {WHAT[key]}, where "
                    f"{'column-parallel fc1 keeps rows (output features)' if key == 'w1' else ''}"
                    f"{'row-parallel fc2 keeps columns (input features)' if key == 'w2' else ''}"
                    f"{'b1 follows the rows of w1' if key == 'b1' else ''}{also}",
                    hint=HintName("column_then_row"),
                )
            if index != rank and key != "b2":
                size = full[key].shape[0 if key != "w2" else 1] // world
                measured = (
                    f"rank {rank} holds rank {index}'s {axis} of {WHAT[key]} "
                    f"({index * size}..{(index + 1) * size - 1}); its own are {rank * size}..{(rank + 1) * size - 1}"
                )
                proven = _offset_proof(layouts)
                raise ctx.fail(
                    f"wrong slice: {measured}, and every rank holds another rank's blocks of w1, b1 and w2 alike. "
                    f"The offset is rank * h / W{also}"
                    if proven
                    else f"{measured}{also}",
                    hint=HintName("slices"),
                    proven=proven,
                )


def _name_block(key: str, rank: int, size: int, world: int) -> str:
    lo, hi = rank * size, (rank + 1) * size - 1
    return {
        "w1": f"rows {lo}..{hi} of w1",
        "b1": f"elements {lo}..{hi} of b1",
        "w2": f"columns {lo}..{hi} of w2",
        "b2": "all of b2",
    }[key]


def _completed(ctx: CheckContext, ranks: list[ByHand], full: dict[str, np.ndarray], verdict: Verdict | None) -> None:
    """Fail a run that did not finish: with what its shards show where they show a mistake, else as it failed."""
    if verdict is None:
        return
    if not verdict.message.startswith("not implemented") and all(r.get("shards") for r in ranks):
        _layout_failure(ctx, ranks, full, f". Then: {verdict.message}")
    raise CheckFailed(verdict)


@check("shards_hold_their_slice")
def shards_hold_their_slice(ctx: CheckContext) -> None:
    ranks, verdict = _by_hand(ctx)
    if verdict is not None and not all(r.get("shards") for r in ranks):
        raise CheckFailed(verdict)
    _layout_failure(ctx, ranks, _reference(ctx)["full"], "" if verdict is None else f". Then: {verdict.message}")


def _near(got: np.ndarray | None, want: np.ndarray) -> bool:
    scale = float(np.abs(want).max()) if want.size else 0.0
    return close(got, want, rtol=0, atol=REPLAY_RTOL * max(scale, 1e-6))


def _same_gradient(got: TensorFacts | None, replayed: np.ndarray | None) -> bool:
    """A shard's gradient as the replay gives it: within its scale, or none where the replay gives none."""
    if replayed is None:
        return got is not None and got["type"] == "NoneType"
    return _near(_value(got), replayed)


def _reproduces(facts: ByHand, replay: Replay, with_backward: bool) -> bool:
    if not _near(_value(facts.get("y")), replay["y"]):
        return False
    if not with_backward:
        return True
    grads = facts.get("grads", {})
    return _near(_value(facts.get("dx")), replay["dx"]) and all(
        _same_gradient(grads.get(k), replay["grads"].get(k)) for k in KEYS
    )


def _named(ctx: CheckContext, ranks: list[ByHand], measured: str, hint: HintName) -> CheckFailed:
    """The failure: the measurement, and the one hypothesis whose replay (trusted: every rank simulated in one
    process) reproduces every rank's output (and gradients, once backward ran), if one does."""
    complete = all("dx" in f for f in ranks)
    what = "output, x's gradient and every shard's gradient" if complete else "output"

    def replays(requests: dict[str, ReplayRequest]) -> dict[str, list[Replay]]:
        return ctx.reference(REPLAYS, world=ctx.world_size, hypotheses=requests, **ctx.seeds("data"))["replays"]

    def reproduced(per_rank: list[Replay]) -> bool:
        return len(per_rank) == len(ranks) and all(
            _reproduces(facts, per_rank[rank], complete) for rank, facts in enumerate(ranks)
        )

    numbers = {"W": float(ctx.world_size), "W_1": float(ctx.world_size - 1)}
    proof = replay.prove(_HYPOTHESES, numbers, {}, replays, reproduced)
    if proof.named is not None:
        hypothesis, says = proof.named
        return ctx.fail(
            f"{says}. Measured: {measured}; replaying this on the unsplit block reproduces the {what} on all "
            f"{ctx.world_size} ranks",
            hint=hypothesis.hint or hint,
            proven=proof.cause,
        )
    if proof.proven:
        names = [str(hypothesis.cause) for hypothesis, _ in proof.proven]
        return ctx.fail(
            f"{measured}; the replays of {' and of '.join(names)} both reproduce it, and this run cannot tell "
            "them apart",
            hint=hint,
        )
    return ctx.fail(measured, hint=hint)


def _bias_offset(extra: np.ndarray, b2: np.ndarray, world_size: int) -> str:
    """The words for an output off by the same multiple c of b2 in every row: "(exactly (W-1)·b2 = 1·b2 more in
    every row)", "(exactly b2 less in every row)"; "" where it is off by anything else."""
    rows = np.broadcast_to(b2, extra.shape)
    c = scale_of({"": extra}, {"": rows})
    if not (np.isfinite(c) and abs(c) > 1e-3 and close(extra, c * rows, rtol=1e-4, atol=1e-5)):
        return ""
    if abs(c - (world_size - 1)) < 1e-4 * world_size:
        return f" (exactly (W-1)·b2 = {world_size - 1}·b2 more in every row)"
    times = "" if abs(abs(c) - 1) < 1e-4 else f"{abs(c):.4g}·"
    return f" (exactly {times}b2 {'more' if c > 0 else 'less'} in every row)"


@check("forward_matches_unsplit")
def forward_matches_unsplit(ctx: CheckContext) -> None:
    ranks, verdict = _by_hand(ctx)
    trusted = _reference(ctx)
    _completed(ctx, ranks, trusted["full"], verdict)
    _layouts(ctx, ranks, trusted["full"])  # fails where a rank's shards cannot be read
    want = trusted["unsplit"]["y"]
    for rank, facts in enumerate(ranks):
        y = _value(facts.get("y"))
        if y is None or y.shape != want.shape:
            raise ctx.fail(
                _describe_value(facts.get("y"), f"tp_mlp_forward's output on rank {rank}")
                + f"; the block's output is the whole (b, d) = {list(want.shape)} tensor on every rank",
                hint=HintName("f_and_g"),
            )
        if not close(y, want, rtol=RTOL, atol=ATOL):
            extra = y - want
            offset = _bias_offset(extra, trusted["full"]["b2"], ctx.world_size)
            raise _named(
                ctx,
                ranks,
                f"rank {rank}'s output differs from the unsplit block's by up to "
                f"{float(np.abs(extra).max()):.3g}{offset}",
                HintName("f_and_g"),
            )


@check("backward_matches_unsplit")
def backward_matches_unsplit(ctx: CheckContext) -> None:
    ranks, verdict = _by_hand(ctx)
    trusted = _reference(ctx)
    _completed(ctx, ranks, trusted["full"], verdict)
    layouts = [layout for _, layout in _layouts(ctx, ranks, trusted["full"])]
    reference = trusted["unsplit"]
    for rank, facts in enumerate(ranks):
        if "dx" not in facts:
            y = facts.get("y")
            detached = isinstance(y, dict) and y.get("requires_grad") is False
            raise ctx.fail(
                "backward could not run: "
                + (
                    f"tp_mlp_forward's output on rank {rank} does not require grad (detached from the shards?)"
                    if detached
                    else _describe_value(y, f"tp_mlp_forward's output on rank {rank}")
                ),
                hint=HintName("f_and_g"),
            )
        dx, want = _value(facts.get("dx")), reference["dx"]
        if dx is None:
            raise ctx.fail(f"x has no gradient on rank {rank} after y.backward(dy)", hint=HintName("f_and_g"))
        if not close(dx, want, rtol=RTOL, atol=ATOL):
            measured = f"rank {rank}'s gradient of x {_apart(dx, want)} the unsplit block's"
            dxs = [d for d in (_value(f.get("dx")) for f in ranks) if d is not None]
            if len(dxs) == len(ranks) and close(np.sum(dxs, axis=0), want, rtol=RTOL, atol=ATOL):
                measured += " (the W ranks' gradients add up to the reference's)"
            raise _named(ctx, ranks, measured, HintName("f_and_g"))
        for key in KEYS:
            grad = _value(facts.get("grads", {}).get(key))
            where = layouts[rank][key]
            if where is None:
                raise ctx.fail(
                    f'shard "{key}" on rank {rank} is no block of {WHAT[key]}, so its gradient has no block of the '
                    "unsplit gradient to be compared with (shards_hold_their_slice says more)",
                    hint=HintName("slices"),
                )
            if grad is None:
                raise _named(
                    ctx,
                    ranks,
                    f'shard "{key}" ({PART[key]}) on rank {rank} has no gradient after y.backward(dy): the output '
                    "does not depend on it through autograd",
                    HintName("f_and_g"),
                )
            axis, index, transposed = where
            full_grad = reference[f"d{key}"]
            block = full_grad if axis == "whole" else _slices(full_grad, ctx.world_size)[(axis, index)]
            block = block.T if transposed else block
            if not close(grad, block, rtol=RTOL, atol=ATOL):
                raise _named(
                    ctx,
                    ranks,
                    f'on rank {rank}, the gradient of shard "{key}" ({PART[key]}) {_apart(grad, block)} the same '
                    "block of the unsplit block's gradient",
                    HintName("f_and_g"),
                )


def _kinds(calls: list[Collective]) -> str:
    if not calls:
        return "no collective"
    return ", ".join(
        "a barrier" if c["kind"] == "barrier" else f"{c['kind'].replace('_', '-')} of {c['numel']} elements"
        for c in calls
    )


Placed = list[dict[str, object]]  # per rank, by shard or parameter: where it sits (a block, or placements)


def _calls(calls: list[Collective]) -> list[list[object]]:
    return [[call["kind"], call["numel"]] for call in calls]


def _missing_reduction(
    phase: str, ranks: Sequence[Passes], trusted: Reference, placed: tuple[Placed, Placed]
) -> Proven | None:
    """f's or g's all-reduce missing, proven when what that mistake builds is the run: column-then-row's shards
    (`placed`: built from the reference, and as the run holds them) on every rank, no collective in `phase` and
    the other phase's one all-reduce of x's elements (backward) or the output's (forward) on every rank."""
    forward = phase == "forward"
    other = [["all_reduce", int(trusted["unsplit"]["dx" if forward else "y"].size)]]
    built: dict[str, object] = {
        "placed": placed[0],
        "forward": [[] if forward else other] * len(ranks),
        "backward": [other if forward else []] * len(ranks),
    }
    observed: dict[str, object] = {
        "placed": placed[1],
        "forward": [_calls(facts.get("forward", [])) for facts in ranks],
        "backward": [_calls(facts.get("backward", [])) for facts in ranks],
    }
    cause = Cause("no_forward_all_reduce") if forward else Cause("no_backward_all_reduce")
    return structural(cause, built, observed)


def _counted(
    ctx: CheckContext,
    ranks: Sequence[Passes],
    trusted: Reference,
    route: str,
    placed: tuple[Placed, Placed],
    layout_failure: Callable[[str], None] | None,
) -> None:
    """Exactly one all-reduce in forward and one in backward, as the grader's dispatch mode saw them; `placed`:
    where column-then-row puts each shard on every rank and where the run put it; `layout_failure`, where the route
    has shards of its own: fails with what they hold, if they show a mistake."""
    for rank, facts in enumerate(ranks):
        forward, backward = facts.get("forward"), facts.get("backward")
        if forward is None or backward is None:
            raise ctx.fail(f"rank {rank}'s {route} did not get through forward and backward", hint=HintName("f_and_g"))
        for phase, calls in (("forward", forward), ("backward", backward)):
            kinds = [c["kind"] for c in calls]
            if kinds == ["all_reduce"]:
                continue
            measured = (
                f"{phase} on rank {rank} ran {_kinds(calls)} (counted by the grader), where column-then-row needs "
                "exactly one all-reduce"
            )
            if not kinds:
                missing = (
                    "g's all-reduce is missing in forward"
                    if phase == "forward"
                    else "f's all-reduce is missing in backward"
                )
                proven = _missing_reduction(phase, ranks, trusted, placed)
                raise ctx.fail(
                    f"{measured}: {missing}, and every rank holds column-then-row's shards and ran the other pass's "
                    "one all-reduce"
                    if proven
                    else f"{measured}; the shards each rank holds are said by "
                    + ("shards_hold_their_slice" if layout_failure is not None else "parallelize_module_plan"),
                    hint=HintName("f_and_g"),
                    proven=proven,
                )
            if "all_gather" in kinds and layout_failure is not None:
                layout_failure(f". Measured: {measured}")
            batch, h = trusted["unsplit"]["y"].shape[0], trusted["full"]["w1"].shape[0]
            hidden = batch * h // ctx.world_size
            if any(c["kind"] == "all_gather" and c["numel"] == hidden for c in calls):
                measured += (
                    f"; the all-gather of {hidden} elements is this rank's block of the hidden activations "
                    f"(b x h/W = {batch} x {h // ctx.world_size}): the hidden layer was made whole between the layers, "
                    "which column-then-row never needs"
                )
            raise ctx.fail(
                measured, hint=HintName("f_and_g") if set(kinds) == {"all_reduce"} else HintName("column_then_row")
            )


@check("one_all_reduce_each_way")
def one_all_reduce_each_way(ctx: CheckContext) -> None:
    ranks, verdict = _by_hand(ctx)
    trusted = _reference(ctx)
    full = trusted["full"]
    _completed(ctx, ranks, full, verdict)
    layouts = [layout for _, layout in _layouts(ctx, ranks, full)]  # fails where a rank's shards cannot be read
    built: Placed = [{key: list(block) for key, block in _right(rank).items()} for rank in range(len(ranks))]
    held: Placed = [_held(layout, KEYS) for layout in layouts]
    placed = (built, held)
    _counted(ctx, ranks, trusted, "tp_mlp_forward", placed, lambda also: _layout_failure(ctx, ranks, full, also))


# --- parallelize_module ----------------------------------------------------------------------------


def _parallelized(ctx: CheckContext) -> tuple[list[Parallelized], Verdict | None]:
    """As `_by_hand`, for parallelize_mlp."""
    result = ctx.run(PARALLELIZED.name, **ctx.seeds("data"))
    verdict = failure_verdict(result, ctx.student_file)
    return [ctx.conform(r.facts, Parallelized, r.rank, complete=r.ok) for r in result.ranks], verdict


def _plan_shown(plan: str) -> str:
    return ", ".join(f"{name} {placement}" for name, (placement, _) in PLANS[plan].items())


def _plan_built(plan: str, full: dict[str, np.ndarray], world: int) -> list[dict[str, object]]:
    """What `plan` gives every rank, from the weights the grader gave: each parameter a DTensor on the 1-D mesh,
    its placements and its local block."""
    return [
        {
            name: {
                "dtensor": True,
                "placements": [placement],
                "local": full[PARAMETERS[name]]
                if axis == "whole"
                else _slices(full[PARAMETERS[name]], world)[(axis, rank)],
            }
            for name, (placement, axis) in PLANS[plan].items()
        }
        for rank in range(world)
    ]


def _plan_seen(ranks: list[Parallelized]) -> list[dict[str, object]]:
    """Every rank's parameters as parallelize_mlp left them: DTensor or not, placements, local shard."""
    return [
        {
            name: {
                "dtensor": p["dtensor"],
                "placements": p.get("placements", []),
                "local": _value(p["local"]),
            }
            for name, p in facts.get("parameters", {}).items()
            if name in PARAMETERS
        }
        for facts in ranks
    ]


def _plan_proof(
    cause: Cause, plan: str, ranks: list[Parallelized], full: dict[str, np.ndarray], world: int
) -> Proven | None:
    """The mistaken `plan`, proven when what it builds from the grader's weights is every rank's parameters."""
    return structural(
        cause,
        {"parameters": _plan_built(plan, full, world)},
        {"parameters": _plan_seen(ranks)},
    )


def _placement_failure(
    ctx: CheckContext, ranks: list[Parallelized], full: dict[str, np.ndarray], also: str = ""
) -> None:
    """Fail with the placements and local shards parallelize_mlp left, where they are not column-then-row
    or not the blocks of the trusted `full` weights the ranks were given."""
    for rank, facts in enumerate(ranks):
        params = facts.get("parameters")
        if params is None:
            continue
        placements = {
            name: (p.get("placements") or ["plain"])[0] if p["dtensor"] else "plain" for name, p in params.items()
        }
        missing = [name for name in PARAMETERS if name not in params]
        if missing:
            raise ctx.fail(
                f"the module parallelize_mlp returned has no {', '.join(missing)} (its parameters: "
                f"{facts.get('names')}); parallelize the grader's block in place and return it{also}",
                hint=HintName("parallelize_module"),
            )
        shown = ", ".join(f"{name} {placements[name]}" for name in PARAMETERS)
        if placements["fc1.weight"] == "Shard(dim=1)" and placements["fc2.weight"] == "Shard(dim=0)":
            proven = _plan_proof(Cause("row_then_column"), "row_then_column", ranks, full, ctx.world_size)
            raise ctx.fail(
                f"row-then-column: fc1 is row-wise and fc2 column-wise ({shown}, every parameter's local shard "
                "that plan's block on every rank): the input would have to be split and the partial hidden sums "
                "all-reduced before GELU, then the output all-gathered; use ColwiseParallel() for fc1 and "
                f"RowwiseParallel() for fc2{also}"
                if proven
                else f"rank {rank}'s parameters after parallelize_mlp: {shown}; column-then-row gives "
                f"{_plan_shown('column_then_row')}{also}",
                hint=HintName("parallelize_module"),
                proven=proven,
            )
        if placements["fc1.weight"] == "Shard(dim=0)" and placements["fc2.weight"] == "Shard(dim=0)":
            proven = _plan_proof(Cause("both_column_wise"), "both_column_wise", ranks, full, ctx.world_size)
            raise ctx.fail(
                f"both column-wise: fc1 and fc2 are both ColwiseParallel ({shown}, every parameter's local shard "
                "that plan's block on every rank): fc2 then needs the whole hidden layer and splits its output "
                f"again; use RowwiseParallel() for fc2{also}"
                if proven
                else f"rank {rank}'s parameters after parallelize_mlp: {shown}; column-then-row gives "
                f"{_plan_shown('column_then_row')}{also}",
                hint=HintName("parallelize_module"),
                proven=proven,
            )
        wrong = [name for name in PARAMETERS if placements[name] != EXPECTED_PLACEMENTS[name]]
        if wrong:
            expected = ", ".join(f"{name} {EXPECTED_PLACEMENTS[name]}" for name in PARAMETERS)
            plain = [name for name in wrong if placements[name] == "plain"]
            raise ctx.fail(
                f"rank {rank}'s parameters after parallelize_mlp: {shown}; column-then-row gives {expected}"
                + (f" ({', '.join(plain)} left a plain tensor: that layer was not parallelized)" if plain else "")
                + also,
                hint=HintName("parallelize_module"),
            )
        for name, key in PARAMETERS.items():
            axis = {"w1": "rows", "b1": "slice", "w2": "columns"}.get(key)
            want = full[key] if axis is None else _slices(full[key], ctx.world_size)[(axis, rank)]
            if not close(_value(params[name]["local"]), want, rtol=0, atol=0):
                raise ctx.fail(
                    f"rank {rank}'s local shard of {name} is not its block of the weights the grader gave "
                    f"({_describe_value(params[name]['local'], 'it')}): parallelize the module as it is, without "
                    f"changing its values{also}",
                    hint=HintName("parallelize_module"),
                )


@check("parallelize_module_plan")
def parallelize_module_plan(ctx: CheckContext) -> None:
    ranks, verdict = _parallelized(ctx)
    if verdict is not None and not all("parameters" in r for r in ranks):
        raise CheckFailed(verdict)
    if verdict is None and any("parameters" not in r for r in ranks):
        raise ctx.fail(
            f"parallelize_mlp returned a {ranks[0].get('returned')}, not the module",
            hint=HintName("parallelize_module"),
        )
    _placement_failure(ctx, ranks, _reference(ctx)["full"], "" if verdict is None else f". Then: {verdict.message}")


@check("parallelized_matches_unsplit")
def parallelized_matches_unsplit(ctx: CheckContext) -> None:
    ranks, verdict = _parallelized(ctx)
    trusted = _reference(ctx)
    if verdict is not None:
        if not verdict.message.startswith("not implemented"):
            _placement_failure(ctx, ranks, trusted["full"], f". Then: {verdict.message}")
        raise CheckFailed(verdict)
    if any("parameters" not in r for r in ranks):
        raise ctx.fail(
            f"parallelize_mlp returned a {ranks[0].get('returned')}, not the module",
            hint=HintName("parallelize_module"),
        )
    reference = trusted["unsplit"]
    for rank, facts in enumerate(ranks):
        y, want = _value(facts.get("y")), reference["y"]
        if not close(y, want, rtol=RTOL, atol=ATOL):
            what = (
                f"{_apart(y, want)} the unsplit block's"
                if y is not None
                else _describe_value(facts.get("y"), "it").removeprefix("it ")
            )
            raise ctx.fail(
                f"on rank {rank}, the parallelized block's output {what}; with fc1 column-wise and fc2 row-wise "
                "(default layouts) it is the whole (b, d) output as a plain tensor",
                hint=HintName("parallelize_module"),
            )
        dx = _value(facts.get("dx"))
        if not close(dx, reference["dx"], rtol=RTOL, atol=ATOL):
            raise ctx.fail(
                f"on rank {rank}, x's gradient through the parallelized block "
                + ("is missing" if dx is None else f"{_apart(dx, reference['dx'])} the unsplit block's"),
                hint=HintName("parallelize_module"),
            )
        for name, key in PARAMETERS.items():
            grad = facts.get("grads", {}).get(name)
            axis = {"w1": "rows", "b1": "slice", "w2": "columns"}.get(key)
            full = reference[f"d{key}"]
            want = full if axis is None else _slices(full, ctx.world_size)[(axis, rank)]
            got = _value(grad["local"]) if grad else None
            if not close(got, want, rtol=RTOL, atol=ATOL):
                raise ctx.fail(
                    f"on rank {rank}, the local gradient of {name} "
                    + ("is missing" if got is None else f"{_apart(got, want)} its block of the unsplit gradient"),
                    hint=HintName("parallelize_module"),
                )
    built: Placed = [{name: [placement] for name, placement in EXPECTED_PLACEMENTS.items()} for _ in ranks]
    seen: Placed = [
        {name: p.get("placements", []) if p["dtensor"] else "plain" for name, p in facts["parameters"].items()}
        for facts in ranks
    ]
    _counted(ctx, ranks, trusted, "parallelized block", (built, seen), None)
