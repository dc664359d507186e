"""Judging exercise 4 from what the launched functions left behind (signatures: DIAGNOSES.md)."""

from __future__ import annotations

from typing import Any

from grader.checks.ex04_launch.facts import LAUNCH_FAILING, LAUNCH_IDENTITY, Identity, LeftBehind, Observed, Stall
from grader.checks.ex04_launch.protocol import SLOW_RANK_SECONDS, digest, payload
from grader.judge.api import CheckContext, check
from grader.judge.explain import error_messages
from grader.judge.names import HintName
from grader.judge.wording import brief, shorten

START_METHOD = "fork"  # 'spawn' would re-import torch in every child: seconds per check
FINISH_STEP_S = 0.15  # between one rank's finish and the next, in an order drawn per grading (workers.py forces it)
# A launcher may start fresh interpreters (spawn), each importing torch: seconds each on a loaded
# two-core laptop (measured: 31 s for W=4 at load 12), on top of the deadline of a run.
START_ALLOWANCE_S = 30.0
PAYLOAD_CHARS = 1 << 20  # a result larger than any pipe's buffer (Linux 64 KiB, at most 1 MiB)


def _schedule(ctx: CheckContext) -> tuple[list[float], int]:
    """Each rank's delay before it returns, so that ranks finish out of rank order (rank 0 never
    first), and the size of every result; both drawn from the grading's seed."""
    draw = ctx.draw(f"schedule at W={ctx.world_size}")
    order = list(range(ctx.world_size))
    while ctx.world_size > 1 and order[0] == 0:
        draw.shuffle(order)
    delays = [0.0] * ctx.world_size
    for position, rank in enumerate(order):
        delays[rank] = round(FINISH_STEP_S * position, 3)
    return delays, PAYLOAD_CHARS + draw.randrange(PAYLOAD_CHARS // 2)


def _stall(stalled: Stall, size: int) -> str:
    at = f" (at {stalled['launcher_at'][0]})" if stalled.get("launcher_at") else ""
    return (
        f"results not drained before joining: the ranks had returned their results ({size / 1e6:.1f} MB each) "
        f"{stalled['seconds_after_return']:g} s earlier, yet ranks {', '.join(stalled['writing'])} were still "
        f"blocked writing them to the queue while launch_distributed waited for the processes to exit{at}. A "
        "process cannot exit until its result has been read: read the results, then join"
    )


def _identity(ctx: CheckContext) -> tuple[Identity, int]:
    delays, size = _schedule(ctx)
    [facts] = ctx.facts(
        LAUNCH_IDENTITY,
        nprocs=1,
        allowance=START_ALLOWANCE_S,
        world_size=ctx.world_size,
        start_method=START_METHOD,
        delays=delays,
        seed=ctx.seed,
        size=size,
    )
    stalled = facts["stalled"]
    if stalled:
        raise ctx.fail(_stall(stalled, size), hint=HintName("read_before_join"))
    return facts, size


def _order_problem(ranks: list[int], finish_order: list[int]) -> str:
    if ranks == finish_order:
        return (
            f"results in arrival order: the results are in the order the ranks finished, not by rank (the "
            f"grader made the ranks finish in the order {finish_order}, so position i holds the i-th rank to "
            "finish); place each result by its rank"
        )
    return f"results are not in rank order: the positions hold the results of ranks {ranks}"


def _what(value: Any) -> str:
    """A returned value in a few words: its type, and its start or its length."""
    if value is None:
        return "None"
    name = type(value).__name__
    article = "an" if name[0] in "aeiou" else "a"
    if isinstance(value, (list, dict)):
        return f"{article} {name} of {len(value)} item{'' if len(value) == 1 else 's'}: {brief(value)}"
    return f"{article} {name}, {shorten(str(value), 200)!r}"


def _is_identity(result: Any) -> bool:
    """Whether a result has the shape of what report_identity returns (a fact of its own otherwise)."""
    types = {"rank": int, "pid": int, "token": str, "world_size": int}
    return isinstance(result, dict) and all(type(result.get(key)) is kind for key, kind in types.items())


def _strangers(ctx: CheckContext, observed: Observed | None) -> None:
    """Fail where a rank's `started` marker names a process the launcher never started, as the kernel shows it
    (workers.ProcessWatch; Linux only, None elsewhere): the marker was not written by fn in a process of its own."""
    if observed is None or not observed["strangers"]:
        return
    rank = observed["strangers"][0]
    pid = observed["pids"].get(str(rank))
    raise ctx.fail(
        f"rank {rank} never ran in a process launch_distributed started: the grader's record of it names pid {pid}, "
        "which the kernel shows is neither the launcher nor a live process descended from it; start every rank "
        "in a process of its own and let fn run there",
        hint=HintName("start_processes"),
    )


@check("runs_every_rank")
def runs_every_rank(ctx: CheckContext) -> None:
    facts, size = _identity(ctx)
    results, world = facts["results"], ctx.world_size
    if not isinstance(results, list) or len(results) != world:
        early = len(facts["finished_at_return"]) < world
        why = " and returned before the processes had finished (join=False?)" if early else ""
        raise ctx.fail(
            f"launch_distributed returned {_what(results)} instead of a list of {world} results{why}",
            hint=HintName("result_queue"),
        )
    if not all(_is_identity(r) for r in results):
        raise ctx.fail(f"the results are not fn's return values: {brief(results)}", hint=HintName("result_queue"))
    ranks = [r["rank"] for r in results]
    if sorted(ranks) != list(range(world)):
        shifted = " (numbered from 1)" if sorted(ranks) == list(range(1, world + 1)) else ""
        raise ctx.fail(
            f"wrong rank numbering: fn was called with ranks {sorted(ranks)}{shifted}, expected 0..{world - 1}",
            hint=HintName("start_processes"),
        )
    if ranks != list(range(world)):
        raise ctx.fail(_order_problem(ranks, facts["finish_order"]), hint=HintName("result_queue"))
    for rank, result in enumerate(results):
        if result.get("payload_digest") != digest(payload(ctx.seed, rank, size)):
            raise ctx.fail(
                f"rank {rank}'s result did not come back intact: {result.get('payload_chars')} of the "
                f"{size} characters fn returned",
                hint=HintName("result_queue"),
            )
    if any(r["world_size"] != world or r["token"] != "token-42" for r in results):
        raise ctx.fail(f"fn did not receive (rank, world_size, *args): it got {results[0]}")
    pids = {r["pid"] for r in results}
    if facts["launcher_pid"] in pids or len(pids) != world:
        raise ctx.fail(
            f"fn ran in {len(pids - {facts['launcher_pid']})} new processes for {world} ranks: every rank "
            "needs its own process (no loop in the launcher)",
            hint=HintName("start_processes"),
        )
    observed = facts["observed"]
    _strangers(ctx, observed)
    for rank, result in enumerate(results):
        ran_in = observed["pids"].get(str(rank)) if observed is not None else None
        if ran_in is not None and result["pid"] != ran_in:
            raise ctx.fail(
                f"rank {rank}'s result reports pid {result['pid']}, but fn ran as rank {rank} in process {ran_in}: "
                "the results are not what fn returned",
                hint=HintName("result_queue"),
            )


def _left(left: LeftBehind) -> str:
    parts = []
    if left["running"]:
        parts.append(f"the processes of ranks {left['running']} were still running")
    if left["unreaped"]:
        whose = "those" if parts else "the processes"
        parts.append(f"{whose} of ranks {left['unreaped']} had exited but were never waited for (joined)")
    return " and ".join(parts)


@check("waits_for_processes")
def waits_for_processes(ctx: CheckContext) -> None:
    facts, _ = _identity(ctx)
    unfinished = ctx.world_size - len(facts["finished_at_return"])
    if unfinished:
        raise ctx.fail(
            f"join=False: launch_distributed returned while {unfinished} of its {ctx.world_size} "
            "processes were still running fn",
            hint=HintName("read_before_join"),
        )
    left = _left(facts["left_behind"])
    if left:
        raise ctx.fail(
            f"when launch_distributed returned, {left}: wait for every process you start",
            hint=HintName("read_before_join"),
        )


@check("propagates_errors")
def propagates_errors(ctx: CheckContext) -> None:
    [facts] = ctx.facts(
        LAUNCH_FAILING, nprocs=1, allowance=START_ALLOWANCE_S, world_size=ctx.world_size, start_method=START_METHOD
    )
    raised, failing = facts["raised"], ctx.world_size - 1
    if facts["seconds_after_raise"] is None:
        raise ctx.fail(
            f"fn never ran as rank {failing} (the rank the grader makes raise), so no error could surface",
            hint=HintName("start_processes"),
        )
    _strangers(ctx, facts["observed"])
    if raised is None:
        raise ctx.fail(
            f"swallowing a child's error: rank {failing} raised ValueError but launch_distributed returned normally",
            hint=HintName("join_raises"),
        )
    if "planted failure" not in error_messages(raised):  # anywhere in the chain: `raise ... from exc` keeps it
        raise ctx.fail(
            f"launch_distributed raised {raised['type']} without the failing rank's traceback "
            f"(message: {shorten(raised['message'], 200)!r})",
            hint=HintName("join_raises"),
        )
    if facts["slept_before_return"]:
        raise ctx.fail(
            f"the error surfaced {facts['seconds_after_raise']:.1f} s after rank {failing} raised it, "
            f"once ranks {facts['slept_before_return']} had finished their {SLOW_RANK_SECONDS:g} s of work: "
            "the launcher waited for the other ranks before looking at the failed one; wait on every "
            "process at once (context.join() raises as soon as one fails)",
            hint=HintName("join_raises"),
        )
    left = _left(facts["left_behind"])
    if left:
        raise ctx.fail(
            f"after rank {failing} failed, {left}: stop the other ranks when one fails", hint=HintName("join_raises")
        )
