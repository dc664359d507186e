"""Judging exercise 12: the numbers against one process on the union batch (localize, then replay),
and what the grader's own instrumentation saw of the all-reduces: when each started, with async_op or
not, how many per step and of how many elements, which handles were waited for before the step, the
hooks registered on the tied weight and the frozen parameter's .grad."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from grader.checks.ex12_overlap_ddp.facts import (
    REFERENCE,
    REPLAYS,
    TRAIN,
    WORKLOAD,
    Arrays,
    Call,
    Comm,
    Reference,
    Trained,
)
from grader.engine import RunResult
from grader.judge import replay
from grader.judge.api import CheckContext, check
from grader.judge.compare import first_difference
from grader.judge.diagnose import failure_verdict
from grader.judge.names import Cause, HintName
from grader.judge.proof import Proven, structural
from grader.judge.trajectory import Finding, Setting, diagnose

STEPS, BATCH, LR = WORKLOAD.steps, WORKLOAD.batch_size, WORKLOAD.lr  # as messages name them
BUCKET_BYTES = 500
TIED, TIED_ALSO, FROZEN = "shared.weight", "shared_again.weight", "frozen.weight"
_HYPOTHESES = replay.load(__package__ or "")


def _tensor_hooks(facts: Trained) -> int:
    """How many trained parameters got a tensor hook (register_hook) and no post-accumulate-grad hook."""
    comm = facts.get("comm")
    registered = comm["registered"] if comm is not None else {}
    return sum(1 for counts in registered.values() if counts["tensor"] and not counts["post_accumulate"])


def _short_tail(comm: Comm, step: int) -> int:
    """The elements missing from `step`'s all-reduces when they are exactly the last gradients to be
    ready (the last bucket, never launched); 0 otherwise."""
    if len(comm["order"]) < step:
        return 0
    calls = _gradient_calls(comm, step)
    missing = _trained_elements(comm) - sum(c["numel"] for c in calls)
    order = list(dict.fromkeys(comm["order"][step - 1]))
    tails = {sum(comm["sizes"][n] for n in order[-k:]) // 4 for k in range(1, len(order))}
    return missing if calls and missing > 0 and missing in tails else 0


def _explained(ctx: CheckContext, result: RunResult) -> None:
    """A run that failed with what the grader measured before the error, when that names its cause."""
    verdict = failure_verdict(result, ctx.student_file)
    if verdict is None or any((r.error or {}).get("not_implemented") for r in result.ranks):
        return
    facts = [ctx.conform(r.facts, Trained, r.rank, complete=False) for r in result.ranks]
    none_grad = any("NoneType" in str((r.error or {}).get("message", "")) for r in result.ranks)
    hooked = _tensor_hooks(facts[0])
    comm = facts[0].get("comm")
    if none_grad and hooked and comm is not None:
        elements = _elements(_reference(ctx))
        proven = structural(
            Cause("tensor_hook"),
            built={
                "hooks": {name: {"post_accumulate": 0, "tensor": 1} for name in elements},
                "failed on a None": True,
            },
            observed={"hooks": comm["registered"], "failed on a None": none_grad},
        )
        measured = (
            f"rank 0 registered p.register_hook on {hooked} parameters and register_post_accumulate_grad_hook on "
            f"{_hooked(comm, 'post_accumulate')} (of the {len(elements)} trained parameters)"
        )
        raise ctx.fail(
            (
                f"tensor hooks, not post-accumulate-grad hooks: {measured}; a tensor hook runs on the incoming "
                "gradient before it is accumulated into .grad, which is still None there on the first step. "
                if proven is not None
                else f"{measured}: look at what each hook reads, and when it runs. "
            )
            + verdict.message,
            hint=HintName("post_accumulate_hook"),
            proven=proven,
        )
    if comm is None:  # rank 0 failed before the watch on its all-reduces closed: nothing measured
        return
    missing = _short_tail(comm, 1)
    if missing:
        proven = _calls_proven(Cause("last_bucket_not_launched"), comm, _reference(ctx), [1], _unlaunched)
        raise ctx.fail(
            f"step 1, rank 0 all-reduced {_trained_elements(comm) - missing} of the "
            f"{_trained_elements(comm)} trained gradient elements; the {missing} missing are those of the last "
            "gradients to be ready"
            + (
                ": the last, partly filled bucket was never launched, and was still open when the next step began"
                if proven is not None
                else f" ({_tail_names(comm, 1, missing)})"
            )
            + f". {verdict.message}",
            hint=HintName("flush_last_bucket"),
            proven=proven,
        )
    sent = sum(c["numel"] for c in _gradient_calls(comm, 1))
    if sent > _trained_elements(comm) > 0:
        raise ctx.fail(
            f"before the error, step 1 on rank 0 all-reduced {sent} elements where the trained gradients hold "
            f"{_trained_elements(comm)}: some gradients were sent more than once (a bucket still holding "
            f"gradients already launched?). {verdict.message}",
            hint=HintName("async_buckets"),
        )


def _ranks(ctx: CheckContext) -> list[Trained]:
    result = ctx.run(TRAIN.name, bucket_bytes=BUCKET_BYTES, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    _explained(ctx, result)
    ranks = ctx.require(result, schema=Trained)
    counts = [len(f["steps"]) for f in ranks]
    if len(set(counts)) != 1:
        raise ctx.fail(
            f"the ranks took different numbers of optimizer steps ({counts}): a rank that stops early leaves "
            "the others waiting in an all-reduce",
            hint=HintName("optimizer"),
        )
    if counts[0] == 0:
        raise ctx.fail("train_overlapped never called optimizer.step()", hint=HintName("optimizer"))
    if counts[0] != STEPS:
        raise ctx.fail(
            f"{counts[0]} optimizer steps for {STEPS} batches: one step per batch", hint=HintName("optimizer")
        )
    return ranks


def _reference(ctx: CheckContext) -> Reference:
    facts = ctx.reference(REFERENCE, world_size=ctx.world_size, **WORKLOAD.arguments(), **ctx.seeds("data", "model"))
    return facts


def _fail(ctx: CheckContext, finding: Finding, prefix: str = "") -> Exception:
    proven = finding.proven
    return ctx.fail(prefix + finding.message, hint=finding.hint or HintName("wait_then_average"), proven=proven)


def _same(a: Arrays, b: Arrays) -> bool:
    return first_difference(a, b, rtol=1e-6, atol=1e-7) is None


def _gradient_calls(comm: Comm, step: int) -> list[Call]:
    """The all-reduces of `step` (from 1) issued once its backward had started."""
    return [c for c in comm["calls"] if c["step"] == step and (c["backward"] or c["after_backward"])]


def _trained_elements(comm: Comm) -> int:
    sizes = comm["sizes"]
    return sum(sizes[name] for name in comm["trained"]) // 4  # fp32 elements


def _steps() -> list[int]:
    return list(range(1, STEPS + 1))


def _listed(calls: list[Call]) -> str:
    return str([c["numel"] for c in calls])


def _hooked(comm: Comm, kind: str) -> int:
    """How many parameters got a hook of `kind` ("post_accumulate" or "tensor")."""
    return sum(1 for counts in comm["registered"].values() if counts.get(kind))


def _tail_names(comm: Comm, step: int, missing: int) -> str:
    """The last gradients to be ready at `step` whose elements are the `missing` ones (see _short_tail)."""
    order = list(dict.fromkeys(comm["order"][step - 1]))
    tail = next(order[-k:] for k in range(1, len(order)) if sum(comm["sizes"][n] for n in order[-k:]) // 4 == missing)
    return ", ".join(tail)


# --- structural replays: the all-reduces a hypothesized mistake makes, built from the reference's parameters ---

# One all-reduce as a structural replay compares it: its elements, async_op, launched from a gradient's hook
# during backward (else once backward returned), waited for in the hook at once, written in place between the
# call and its wait, and when its handle was waited for: "before the step", "after the step" or "never".
CallShape = dict[str, object]
Packing = Callable[[list[str], dict[str, int]], list[tuple[int, bool]]]
Change = Callable[[list[CallShape]], list[CallShape]]


def _elements(reference: Reference) -> dict[str, int]:
    """The trained parameters and their elements, in the model's order: the trusted reference's."""
    return {name: int(np.size(values)) for name, values in reference["steps"][0]["params"].items()}


def _shape(comm: Comm, step: int) -> list[CallShape]:
    """The run's gradient all-reduces of `step`, in the order they were called, as a replay builds them."""
    unwaited = set(comm["unwaited"][step - 1]) if len(comm["unwaited"]) >= step else set()
    shapes: list[CallShape] = []
    for index, c in enumerate(comm["calls"]):
        if c["step"] != step or not (c["backward"] or c["after_backward"]):
            continue
        if index in unwaited:
            waited = "after the step" if c["waited"] else "never"
        else:
            waited = "before the step" if c["waited"] else "never"
        shapes.append(
            {
                "elements": c["numel"],
                "async": c["async"],
                "in backward": c["backward"],
                "waited in the hook": bool(c.get("waited_in_backward")) and c.get("waited_ready") == c["ready"],
                "written before its wait": bool(c.get("modified")),
                "waited": waited,
            }
        )
    return shapes


def _correct(buckets: list[tuple[int, bool]]) -> list[CallShape]:
    """The all-reduces of a correct step over `buckets`: asynchronous, waited for after backward, then used."""
    return [
        {
            "elements": elements,
            "async": True,
            "in backward": hooked,
            "waited in the hook": False,
            "written before its wait": False,
            "waited": "before the step",
        }
        for elements, hooked in buckets
    ]


def _closed_at(order: list[str], sizes: dict[str, int]) -> list[tuple[int, bool]]:
    return _buckets(order, sizes, before=False)


def _closed_before(order: list[str], sizes: dict[str, int]) -> list[tuple[int, bool]]:
    return _buckets(order, sizes, before=True)


def _one_each(order: list[str], sizes: dict[str, int]) -> list[tuple[int, bool]]:
    """One bucket per gradient, launched from its hook: bucket_bytes ignored."""
    return [(sizes[name] // 4, True) for name in order]


def _calls_proven(
    cause: Cause,
    comm: Comm,
    reference: Reference,
    steps: list[int],
    change: Change,
    packings: tuple[Packing, ...] = (_closed_at, _closed_before),
) -> Proven | None:
    """`cause`, proven when every step's all-reduces are those of a correct loop with the mistake (`change`) in
    them: the buckets the reference's parameters fill (closed at bucket_bytes or just before passing it, or as
    `packings` says) in the order the grader's own hooks saw the gradients become ready, call by call."""
    sizes = {name: 4 * elements for name, elements in _elements(reference).items()}  # fp32 bytes
    for packing in packings:
        built: dict[str, object] = {}
        observed: dict[str, object] = {}
        for step in steps:
            order = list(dict.fromkeys(comm["order"][step - 1])) if len(comm["order"]) >= step else []
            if sorted(order) != sorted(sizes):
                return None
            built[f"step {step}"] = change(_correct(packing(order, sizes)))
            observed[f"step {step}"] = _shape(comm, step)
        proven = structural(cause, built, observed)
        if proven is not None:
            return proven
    return None


def _synchronous(calls: list[CallShape]) -> list[CallShape]:
    return [{**c, "async": False} for c in calls]


def _waited_in_hook(calls: list[CallShape]) -> list[CallShape]:
    return [{**c, "waited in the hook": c["in backward"]} for c in calls]


def _unlaunched(calls: list[CallShape]) -> list[CallShape]:
    """The last, partly filled bucket (launched after backward) never launched; where every bucket was full, the
    mistake changes nothing, and the run (which missed elements) is not it."""
    return calls[:-1] if calls and not calls[-1]["in backward"] else calls


def _as_packed(calls: list[CallShape]) -> list[CallShape]:
    """No change to the calls: the mistake is in the packing (`_one_each`)."""
    return calls


def _written_before_wait(calls: list[CallShape]) -> list[CallShape]:
    return [{**c, "written before its wait": True} for c in calls]


def _waited_after_step(calls: list[CallShape]) -> list[CallShape]:
    return [{**c, "waited": "after the step"} for c in calls]


def _only_last_waited(calls: list[CallShape]) -> list[CallShape]:
    return [*({**c, "waited": "never"} for c in calls[:-1]), *calls[-1:]]


def _starts(reference: Reference, weights: list[Arrays]) -> dict[str, dict[str, np.ndarray | None]]:
    """Each rank's weights, as a structural replay compares them: every tensor the reference starts from."""
    return {f"rank {rank}": {name: w.get(name) for name in reference["start"]} for rank, w in enumerate(weights)}


def _sources(ranks: list[Trained], reference: Reference) -> tuple[str, Proven | None] | None:
    """Whose initial weights the ranks started from, when they did not all start from rank 0's: the
    measurement, and the cause a structural replay proves (None where none is). The replays: every rank starts
    from its own initial weights (rank 0's are the reference's), or every rank from rank k's."""
    starts = [f["start"] for f in ranks]
    observed = _starts(reference, starts)
    if not all(_same(s, starts[0]) for s in starts):
        apart = next(r for r, s in enumerate(starts) if not _same(s, starts[0]))
        if all(_same(f["initial"], f["start"]) for f in ranks):
            own = _starts(reference, [reference["start"], *(f["initial"] for f in ranks[1:])])
            proven = structural(Cause("no_broadcast"), own, observed)
            return (
                f"rank {apart} started its first step from other weights than rank 0: every rank started from "
                "its own initial weights (the grader seeds each rank differently)"
                + (", so rank 0's weights were never broadcast" if proven is not None else ""),
                proven,
            )
        difference = first_difference(starts[apart], starts[0])
        return f"rank {apart} started its first step from other weights than rank 0 ({difference})", None
    if not _same(ranks[0]["initial"], starts[0]):
        source = next((r for r, f in enumerate(ranks) if _same(f["initial"], starts[0])), None)
        if source is not None:
            built = _starts(reference, [ranks[source]["initial"]] * len(ranks))
            proven = structural(Cause("broadcast_wrong_source"), built, observed)
            return (
                f"every rank started from rank {source}'s initial weights, not rank 0's"
                + (": the broadcast's source is rank 0 (src=0)" if proven is not None else ""),
                proven,
            )
        return "the ranks started from the same weights, but they are no rank's initial weights", None
    return None


@check("matches_single_process")
def matches_single_process(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    sources = _sources(ranks, reference)
    if sources:
        raise ctx.fail(sources[0], hint=HintName("broadcast_first"), proven=sources[1])

    replays = ctx.replayer(REPLAYS, world_size=ctx.world_size, **WORKLOAD.arguments())

    setting = Setting(
        lr=LR,
        momentum=reference["momentum"],
        factors={"b": BATCH, "W": ctx.world_size},
        reference="one process on the union of the ranks' batches",
        hypotheses=_HYPOTHESES,
        replay=replays,
        losses=[step["part_losses"] for step in reference["steps"]],
    )
    finding = diagnose(ranks[0]["steps"], ranks[0]["start"], reference["steps"], reference["start"], setting)
    if finding:
        hooked = _tensor_hooks(ranks[0])
        if finding.cause == "measured" and hooked:
            raise _fail(
                ctx,
                finding,
                f"rank 0 registered tensor hooks (p.register_hook) on {hooked} parameters and no "
                "post-accumulate-grad hook; a tensor hook runs before the gradient is accumulated into .grad. ",
            )
        raise _fail(ctx, finding)
    for rank, facts in enumerate(ranks[1:], 1):
        for step, (mine, first) in enumerate(zip(facts["steps"], ranks[0]["steps"]), 1):
            difference = first_difference(mine["params"], first["params"], rtol=1e-5, atol=1e-6)
            if difference:
                gradient = first_difference(mine["grads"], first["grads"], rtol=1e-5, atol=1e-6)
                what = f"its gradient differs ({gradient})" if gradient else f"its weights differ ({difference})"
                raise ctx.fail(
                    f"rank 0 follows the reference, but rank {rank} leaves it at step {step}: {what}; every rank "
                    "must hold the same averaged gradient at the step",
                    hint=HintName("wait_then_average"),
                )
    if not ranks[0]["final"]:
        raise ctx.fail(f"train_overlapped returned {ranks[0]['returned']}, not the model", hint=HintName("optimizer"))
    difference = first_difference(ranks[0]["final"], reference["steps"][-1]["params"])
    if difference:
        raise ctx.fail(
            f"train_overlapped returned a model ({ranks[0]['returned']}) that is not the trained one: {difference}",
            hint=HintName("optimizer"),
        )


@check("overlaps_backward")
def overlaps_backward(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    for rank, facts in enumerate(ranks):
        total = len(facts["comm"]["trained"])
        for step in range(1, STEPS + 1):
            calls = _gradient_calls(facts["comm"], step)
            if not calls:
                raise ctx.fail(
                    f"step {step}, rank {rank}: no dist.all_reduce once backward had started, so nothing "
                    "overlapped with it (the gradients were averaged some other way, or not at all)",
                    hint=HintName("async_buckets"),
                )
            blocking = [c for c in calls if not c["async"]]
            if blocking:
                during = sum(c["backward"] for c in blocking)
                proven = _calls_proven(
                    Cause("synchronous_all_reduce"), facts["comm"], reference, _steps(), _synchronous
                )
                measured = (
                    f"step {step}, rank {rank}: {len(blocking)} of its {len(calls)} all-reduces were called with "
                    f"async_op=False ({during} of them inside backward), of {_listed(blocking)} elements"
                )
                raise ctx.fail(
                    f"synchronous all-reduce: {measured}, and each blocks until its message is through: the "
                    "numbers can be right, but backward waits for every bucket, so nothing overlaps. Launch them "
                    "with dist.all_reduce(flat, async_op=True) and wait before optimizer.step()"
                    if proven is not None
                    else f"{measured}: a blocking all-reduce holds up what is called after it until its message "
                    "is through; the buckets are launched with async_op=True and waited for before optimizer.step()",
                    hint=HintName("async_buckets"),
                    proven=proven,
                )
            first = calls[0]
            if not first["backward"]:
                raise ctx.fail(
                    f"step {step}, rank {rank}: the first all-reduce started after backward had ended (all "
                    f"{total} trained gradients were ready), so none overlapped with backward; launch each bucket "
                    "from the post-accumulate-grad hook as soon as it is full",
                    hint=HintName("post_accumulate_hook"),
                )
            if first["ready"] >= total:
                raise ctx.fail(
                    f"step {step}, rank {rank}: the first all-reduce started only when all {total} trained "
                    f"gradients were ready (the bucket of {BUCKET_BYTES} bytes is full earlier), so nothing was "
                    "left of backward to overlap with",
                    hint=HintName("async_buckets"),
                )
            early = [c for c in calls if c["backward"] and c["ready"] < total]
            if all(c.get("waited_in_backward") and c.get("waited_ready") == c["ready"] for c in early):
                proven = _calls_proven(Cause("waited_in_hook"), facts["comm"], reference, _steps(), _waited_in_hook)
                raise ctx.fail(
                    f"step {step}, rank {rank}: every all-reduce launched during backward was waited for at once, "
                    "before the next gradient was ready"
                    + (
                        ": async_op=True followed by wait() in the hook is a synchronous all-reduce. Keep the "
                        "handles and wait for them after loss.backward()"
                        if proven is not None
                        else f" ({len(early)} of the step's {len(calls)}); nothing overlapped with backward"
                    ),
                    hint=HintName("wait_then_average"),
                    proven=proven,
                )


def _buckets(order: list[str], sizes: dict[str, int], before: bool) -> list[tuple[int, bool]]:
    """The buckets a loop fills from `order` (`sizes` in bytes), as (elements, launched from a gradient's hook
    during backward): a bucket is closed once it holds BUCKET_BYTES, or (`before`) also just before it would pass
    it; what is left is the last bucket, launched once backward returned."""
    buckets: list[tuple[int, bool]] = []
    filled = 0
    for name in order:
        if before and filled and filled + sizes[name] > BUCKET_BYTES:
            buckets, filled = [*buckets, (filled // 4, True)], 0
        filled += sizes[name]
        if filled >= BUCKET_BYTES:
            buckets, filled = [*buckets, (filled // 4, True)], 0
    return [*buckets, *([(filled // 4, False)] if filled else [])]


def _pack(order: list[str], sizes: dict[str, int], before: bool) -> tuple[int, ...]:
    """The elements of each bucket from `order`, sorted."""
    return tuple(sorted(elements for elements, _ in _buckets(order, sizes, before)))


def _accepted(comm: Comm, step: int) -> set[tuple[int, ...]]:
    """The buckets' elements the packing rules the stub accepts give: the order the gradients became
    ready, the parameters' order or its reverse; closed at bucket_bytes, or just before passing it."""
    orders = [comm["trained"], comm["trained"][::-1]]
    if len(comm["order"]) >= step:
        orders.append(list(dict.fromkeys(comm["order"][step - 1])))
    return {_pack(order, comm["sizes"], before) for order in orders for before in (False, True)}


@check("buckets_by_size")
def buckets_by_size(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    for rank, facts in enumerate(ranks):
        comm = facts["comm"]
        total = _trained_elements(comm)
        sizes = comm["sizes"]
        trained = comm["trained"]
        for step in range(1, STEPS + 1):
            calls = _gradient_calls(comm, step)
            elements = sum(c["numel"] for c in calls)
            at = f"step {step}, rank {rank}"
            if elements < total:
                if _short_tail(comm, step):
                    proven = _calls_proven(Cause("last_bucket_not_launched"), comm, reference, _steps(), _unlaunched)
                    raise ctx.fail(
                        f"{at}: {elements} of the {total} trained gradient elements were all-reduced; the "
                        f"{total - elements} missing are those of the last gradients to be ready"
                        + (
                            ": the last, partly filled bucket was never launched. Launch it after loss.backward()"
                            if proven is not None
                            else f" ({_tail_names(comm, step, total - elements)})"
                        ),
                        hint=HintName("flush_last_bucket"),
                        proven=proven,
                    )
                raise ctx.fail(
                    f"{at}: {elements} of the {total} trained gradient elements were all-reduced in {len(calls)} "
                    "all-reduce(s); every trained gradient is reduced once per step",
                    hint=HintName("flush_last_bucket"),
                )
            if elements > total:
                raise ctx.fail(
                    f"{at}: {elements} elements were all-reduced where the trained gradients hold {total}: "
                    f"{elements - total} too many (some gradients reduced twice, or a bucket left over from the "
                    "step before)",
                    hint=HintName("tied_and_frozen"),
                )
            accepted = _accepted(comm, step)
            numels = tuple(sorted(c["numel"] for c in calls))
            if numels in accepted:
                continue
            counts = {len(packing) for packing in accepted}
            if len(calls) == len(trained) and list(numels) == sorted(sizes[n] // 4 for n in trained):
                proven = _calls_proven(
                    Cause("one_per_parameter"), comm, reference, _steps(), _as_packed, packings=(_one_each,)
                )
                measured = (
                    f"{at}: {len(calls)} all-reduces, one for each trained parameter, where buckets of "
                    f"{BUCKET_BYTES} bytes give {_counts(counts)}"
                )
                raise ctx.fail(
                    f"one all-reduce per parameter: {measured}; bucket_bytes is ignored, and each message pays its "
                    "latency"
                    if proven is not None
                    else f"{measured}: a bucket is launched as soon as it holds bucket_bytes or more",
                    hint=HintName("async_buckets"),
                    proven=proven,
                )
            expected = " or ".join(str(list(packing)) for packing in sorted(accepted))
            raise ctx.fail(
                f"{at}: {len(calls)} all-reduce(s) of {list(numels)} elements, where buckets of {BUCKET_BYTES} "
                f"bytes ({total * 4} bytes of gradients) carry {expected} elements ({_counts(counts)}): a bucket is "
                "launched as soon as it holds bucket_bytes or more",
                hint=HintName("async_buckets"),
            )


def _counts(accepted: set[int]) -> str:
    values = sorted(accepted)
    return " or ".join(str(v) for v in values) + " all-reduces"


@check("tied_and_frozen")
def tied_and_frozen(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    trained = _elements(reference)
    for rank, facts in enumerate(ranks):
        comm = facts["comm"]
        hooks = comm["registered"].get(TIED)
        total = _trained_elements(comm)
        tied = comm["sizes"][TIED] // 4
        sent = [sum(c["numel"] for c in _gradient_calls(comm, s)) for s in _steps()]
        extra = [elements - total for elements in sent]
        registered = hooks["post_accumulate"] + hooks["tensor"] if hooks is not None else 0
        if registered > 1:
            measured = (
                f"all-reduced {extra[0]} elements more than the trained gradients hold at step 1"
                if extra[0] > 0
                else f"all-reduced {sent[0]} elements at step 1, where the trained gradients hold {total}"
            )
            # the replay: one hook per module that uses a parameter, so two on the tied weight, each adding it
            # to a bucket at every step
            proven = structural(
                Cause("tied_reduced_twice"),
                built={
                    "hooks": {n: {"post_accumulate": 2 if n == TIED else 1, "tensor": 0} for n in trained},
                    "elements all-reduced per step": [sum(trained.values()) + trained[TIED]] * STEPS,
                },
                observed={"hooks": comm["registered"], "elements all-reduced per step": sent},
            )
            raise ctx.fail(
                (f"tied weight reduced {registered} times: " if proven is not None else "")
                + f"rank {rank} registered {registered} hooks on {TIED} ({TIED_ALSO} is the same tensor), "
                f"{measured}. A tied weight is one parameter: one hook, one place in one bucket",
                hint=HintName("tied_and_frozen"),
                proven=proven,
            )
        if any(e == tied for e in extra):
            step = extra.index(tied) + 1
            raise ctx.fail(
                f"step {step}, rank {rank}: {total + tied} elements all-reduced where the trained gradients hold "
                f"{total}: {tied} too many, the size of the tied weight {TIED}",
                hint=HintName("tied_and_frozen"),
            )
        grads = comm["frozen_grads"]
        held = next((s for s, g in enumerate(grads, 1) if g != "none"), None)
        if held is not None:
            frozen = comm["sizes"][FROZEN] // 4
            also = (
                f"; {frozen} elements more than the trained gradients hold were all-reduced, the size of {FROZEN}"
                if extra[held - 1] == frozen
                else ""
            )
            # the replay: the frozen parameter given a .grad and all-reduced with the others at every step
            frozen_start = reference["start"].get(FROZEN)
            proven = (
                structural(
                    Cause("frozen_reduced"),
                    built={
                        "frozen .grad per step": [True] * STEPS,
                        "elements all-reduced per step": [sum(trained.values()) + int(np.size(frozen_start))] * STEPS,
                    },
                    observed={
                        "frozen .grad per step": [g != "none" for g in grads],
                        "elements all-reduced per step": sent,
                    },
                )
                if frozen_start is not None
                else None
            )
            raise ctx.fail(
                f"frozen parameter given a gradient: at step {held}, rank {rank}, {FROZEN} (requires_grad=False) "
                f"had a .grad ({grads[held - 1]}) when optimizer.step() ran{also}. A frozen parameter has no "
                "gradient, no hook and no place in a bucket: its .grad stays None",
                hint=HintName("tied_and_frozen"),
                proven=proven,
            )
        if facts.get("frozen_moved", 0.0) > 0:
            raise ctx.fail(
                f"the frozen parameter {FROZEN} moved on rank {rank} (by up to {facts['frozen_moved']:.3g}) during "
                "training; it is frozen",
                hint=HintName("tied_and_frozen"),
            )


@check("waits_before_step")
def waits_before_step(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    reference = _reference(ctx)
    for rank, facts in enumerate(ranks):
        comm = facts["comm"]
        calls = comm["calls"]
        touched = [c for c in calls if c.get("modified")]
        if touched:
            touched = [c for c in touched if c["step"] == touched[0]["step"]]
            proven = _calls_proven(Cause("modified_before_wait"), comm, reference, _steps(), _written_before_wait)
            raise ctx.fail(
                ("tensor changed before wait(): " if proven is not None else "")
                + f"step {touched[0]['step']}, rank {rank}: {len(touched)} tensor(s) "
                "given to dist.all_reduce(..., async_op=True) were written in place after the call and before "
                "the handle was waited for. Until wait() returns the backend may still be reading and writing "
                "it: wait first, then divide (or divide before the call)",
                hint=HintName("wait_then_average"),
                proven=proven,
            )
        for step, unwaited in enumerate(facts["comm"]["unwaited"], 1):
            if not unwaited:
                continue
            launched = [c for c in calls if c["step"] == step and c["async"]]
            later = [calls[i] for i in unwaited if calls[i].get("waited")]
            measured = (
                f"step {step}, rank {rank}: {len(unwaited)} of the {len(launched)} asynchronous all-reduces of "
                "the step had not been waited for when optimizer.step() ran, so the step used gradients that were "
                "not yet averaged"
            )
            if len(later) == len(unwaited):
                proven = _calls_proven(Cause("step_before_wait"), comm, reference, _steps(), _waited_after_step)
                raise ctx.fail(
                    ("optimizer.step() before wait(): " if proven is not None else "")
                    + f"{measured}; each was waited for only after the step. Wait for every handle, then step",
                    hint=HintName("wait_then_average"),
                    proven=proven,
                )
            proven = _calls_proven(Cause("handle_not_waited"), comm, reference, _steps(), _only_last_waited)
            raise ctx.fail(
                f"{measured}; {len(unwaited) - len(later)} of them were never waited for at all. Every handle is "
                "waited for"
                + (" (a finished later one does not finish the earlier ones)" if proven is not None else ""),
                hint=HintName("wait_then_average"),
                proven=proven,
            )
