"""Judging exercise 12: the numbers against one process on the union batch (localize, then replay),
and what the grader's own instrumentation saw of the all-reduces: when each started, with async_op or
not, how many per step and of how many elements, which handles were waited for before the step, the
hooks registered on the tied weight and the frozen parameter's .grad."""

from __future__ import annotations

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
from grader.judge.names import Cause, HintName, MaybeCause
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
    if none_grad and hooked:
        raise ctx.fail(
            f"tensor hooks, not post-accumulate-grad hooks: rank 0 registered p.register_hook on {hooked} "
            "parameters and none with register_post_accumulate_grad_hook; a tensor hook runs on the incoming "
            "gradient before it is accumulated into .grad, which is still None there on the first step. "
            f"{verdict.message}",
            hint=HintName("post_accumulate_hook"),
            cause=Cause("tensor_hook"),
        )
    comm = facts[0].get("comm")
    if comm is None:  # rank 0 failed before the watch on its all-reduces closed: nothing measured
        return
    missing = _short_tail(comm, 1)
    if missing:
        raise ctx.fail(
            f"step 1, rank 0 all-reduced {_trained_elements(comm) - missing} of the "
            f"{_trained_elements(comm)} trained gradient elements; the {missing} missing are those of the last "
            "gradients to be ready: the last, partly filled bucket was never launched, and was still open when the "
            f"next step began. {verdict.message}",
            hint=HintName("flush_last_bucket"),
            cause=Cause("last_bucket_not_launched"),
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


def _sources(ranks: list[Trained]) -> tuple[str, MaybeCause] | None:
    """Whose initial weights the ranks started from, when they did not all start from rank 0's: the
    measurement, and the cause it proves ("" where it proves none)."""
    starts = [f["start"] for f in ranks]
    if not all(_same(s, starts[0]) for s in starts):
        apart = next(r for r, s in enumerate(starts) if not _same(s, starts[0]))
        if all(_same(f["initial"], f["start"]) for f in ranks):
            return (
                f"rank {apart} started its first step from other weights than rank 0: every rank started from "
                "its own initial weights (the grader seeds each rank differently), so rank 0's weights were never "
                "broadcast",
                Cause("no_broadcast"),
            )
        difference = first_difference(starts[apart], starts[0])
        return f"rank {apart} started its first step from other weights than rank 0 ({difference})", ""
    if not _same(ranks[0]["initial"], starts[0]):
        source = next((r for r, f in enumerate(ranks) if _same(f["initial"], starts[0])), None)
        if source is not None:
            return (
                f"every rank started from rank {source}'s initial weights, not rank 0's: the broadcast's source is "
                "rank 0 (src=0)",
                Cause("broadcast_wrong_source"),
            )
        return "the ranks started from the same weights, but they are no rank's initial weights", ""
    return None


@check("matches_single_process")
def matches_single_process(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
    sources = _sources(ranks)
    if sources:
        raise ctx.fail(sources[0], hint=HintName("broadcast_first"), cause=sources[1])
    reference = _reference(ctx)

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
                raise ctx.fail(
                    f"synchronous all-reduce: step {step}, rank {rank}: {len(blocking)} of its {len(calls)} "
                    f"all-reduces were called with async_op=False ({during} of them inside backward), and each "
                    "blocks until its message is through: the numbers can be right, but backward waits for every "
                    "bucket, so nothing overlaps. Launch them with dist.all_reduce(flat, async_op=True) and wait "
                    "before optimizer.step()",
                    hint=HintName("async_buckets"),
                    cause=Cause("synchronous_all_reduce"),
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
                raise ctx.fail(
                    f"step {step}, rank {rank}: every all-reduce launched during backward was waited for at once, "
                    "before the next gradient was ready: async_op=True followed by wait() in the hook is a "
                    "synchronous all-reduce. Keep the handles and wait for them after loss.backward()",
                    hint=HintName("wait_then_average"),
                    cause=Cause("waited_in_hook"),
                )


def _pack(order: list[str], sizes: dict[str, int], cap: int, before: bool) -> tuple[int, ...]:
    """The elements of each bucket from `order`, sorted: a bucket is closed once it holds `cap` bytes, or
    (`before`) also just before it would pass it; what is left is the last bucket."""
    buckets: list[int] = []
    filled = 0
    for name in order:
        if before and filled and filled + sizes[name] > cap:
            buckets, filled = [*buckets, filled], 0
        filled += sizes[name]
        if filled >= cap:
            buckets, filled = [*buckets, filled], 0
    return tuple(sorted(size // 4 for size in [*buckets, *([filled] if filled else [])]))


def _accepted(comm: Comm, step: int) -> set[tuple[int, ...]]:
    """The buckets' elements the packing rules the stub accepts give: the order the gradients became
    ready, the parameters' order or its reverse; closed at bucket_bytes, or just before passing it."""
    orders = [comm["trained"], comm["trained"][::-1]]
    if len(comm["order"]) >= step:
        orders.append(list(dict.fromkeys(comm["order"][step - 1])))
    return {_pack(order, comm["sizes"], BUCKET_BYTES, before) for order in orders for before in (False, True)}


@check("buckets_by_size")
def buckets_by_size(ctx: CheckContext) -> None:
    ranks = _ranks(ctx)
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
                    raise ctx.fail(
                        f"{at}: {elements} of the {total} trained gradient elements were all-reduced; the "
                        f"{total - elements} missing are those of the last gradients to be ready: the last, "
                        "partly filled bucket was never launched. Launch it after loss.backward()",
                        hint=HintName("flush_last_bucket"),
                        cause=Cause("last_bucket_not_launched"),
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
                raise ctx.fail(
                    f"one all-reduce per parameter: {at}: {len(calls)} all-reduces, one for each trained "
                    f"parameter, where buckets of {BUCKET_BYTES} bytes give {_counts(counts)}; bucket_bytes is "
                    "ignored, and each message pays its latency",
                    hint=HintName("async_buckets"),
                    cause=Cause("one_per_parameter"),
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
    for rank, facts in enumerate(ranks):
        comm = facts["comm"]
        hooks = comm["registered"].get(TIED)
        total = _trained_elements(comm)
        tied = comm["sizes"][TIED] // 4
        extra = [sum(c["numel"] for c in _gradient_calls(comm, s)) - total for s in range(1, STEPS + 1)]
        registered = hooks["post_accumulate"] + hooks["tensor"] if hooks is not None else 0
        if registered > 1:
            measured = (
                f"all-reduced {extra[0]} elements more than the trained gradients hold at step 1"
                if extra[0] > 0
                else "registered on one tensor"
            )
            raise ctx.fail(
                f"tied weight reduced {registered} times: rank {rank} registered {registered} hooks on {TIED} "
                f"({TIED_ALSO} is the same tensor), {measured}. A tied weight is one parameter: one hook, one "
                "place in one bucket",
                hint=HintName("tied_and_frozen"),
                cause=Cause("tied_reduced_twice"),
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
            raise ctx.fail(
                f"frozen parameter given a gradient: at step {held}, rank {rank}, {FROZEN} (requires_grad=False) "
                f"had a .grad ({grads[held - 1]}) when optimizer.step() ran{also}. A frozen parameter has no "
                "gradient, no hook and no place in a bucket: its .grad stays None",
                hint=HintName("tied_and_frozen"),
                cause=Cause("frozen_reduced") if also else "",
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
    for rank, facts in enumerate(ranks):
        calls = facts["comm"]["calls"]
        touched = [c for c in calls if c.get("modified")]
        if touched:
            touched = [c for c in touched if c["step"] == touched[0]["step"]]
            raise ctx.fail(
                f"tensor changed before wait(): step {touched[0]['step']}, rank {rank}: {len(touched)} tensor(s) "
                "given to dist.all_reduce(..., async_op=True) were written in place after the call and before "
                "the handle was waited for. Until wait() returns the backend may still be reading and writing "
                "it: wait first, then divide (or divide before the call)",
                hint=HintName("wait_then_average"),
                cause=Cause("modified_before_wait"),
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
                raise ctx.fail(
                    f"optimizer.step() before wait(): {measured}; each was waited for only after the step. Wait for "
                    "every handle, then step",
                    hint=HintName("wait_then_average"),
                    cause=Cause("step_before_wait"),
                )
            raise ctx.fail(
                f"{measured}; {len(unwaited) - len(later)} of them were never waited for at all. Every handle is "
                "waited for (a finished later one does not finish the earlier ones)",
                hint=HintName("wait_then_average"),
                cause=Cause("handle_not_waited"),
            )
