"""Judging exercise 4 from what the launched functions left behind."""

from __future__ import annotations

from typing import Any

from grader.checks.api import CheckContext, check

START_METHOD = "fork"  # 'spawn' would re-import torch in every child: seconds per check
PROMPT_SECONDS = 3.0


def _identity(ctx: CheckContext) -> dict[str, Any]:
    [facts] = ctx.facts("launch_identity", nprocs=1, world_size=ctx.world_size, start_method=START_METHOD)
    return facts


@check("runs_every_rank")
def runs_every_rank(ctx: CheckContext) -> None:
    facts = _identity(ctx)
    results, world = facts["results"], ctx.world_size
    if not isinstance(results, list) or len(results) != world:
        early = len(facts["finished_at_return"]) < world
        why = " and returned before the processes had finished (join=False?)" if early else ""
        raise ctx.fail(f"launch_distributed returned {str(results)[:200]!r} instead of a list of {world} results{why}",
                       hint=2)
    if not all(isinstance(r, dict) and {"rank", "pid", "token", "world_size"} <= set(r) for r in results):
        raise ctx.fail(f"the results are not fn's return values: {str(results)[:300]}", hint=2)
    ranks = [r["rank"] for r in results]
    if sorted(ranks) != list(range(world)):
        raise ctx.fail(f"wrong rank numbering: fn was called with ranks {sorted(ranks)}, expected 0..{world - 1}",
                       hint=1)
    if ranks != list(range(world)):
        raise ctx.fail(f"results are not in rank order: position i holds rank {ranks}", hint=2)
    if any(r["world_size"] != world or r["token"] != "token-42" for r in results):
        raise ctx.fail(f"fn did not receive (rank, world_size, *args): it got {results[0]}")
    pids = {r["pid"] for r in results}
    if facts["launcher_pid"] in pids or len(pids) != world:
        raise ctx.fail(f"fn ran in {len(pids - {facts['launcher_pid']})} new processes for {world} ranks: every rank "
                       "needs its own process (no loop in the launcher)", hint=1)


@check("waits_for_processes")
def waits_for_processes(ctx: CheckContext) -> None:
    facts = _identity(ctx)
    if len(facts["finished_at_return"]) < ctx.world_size:
        raise ctx.fail(f"join=False: launch_distributed returned while {ctx.world_size - len(facts['finished_at_return'])} "
                       "processes were still running", hint=4)
    if facts["children_after_return"]:
        raise ctx.fail(f"{facts['children_after_return']} processes were left running or unreaped after "
                       "launch_distributed returned: join them (join=True)", hint=4)


@check("propagates_errors")
def propagates_errors(ctx: CheckContext) -> None:
    [facts] = ctx.facts("launch_failing", nprocs=1, world_size=ctx.world_size, start_method=START_METHOD)
    raised = facts["raised"]
    if raised is None:
        raise ctx.fail("swallowing a child's error: rank "
                       f"{ctx.world_size - 1} raised ValueError but launch_distributed returned normally", hint=3)
    if "planted failure" not in raised["message"]:
        raise ctx.fail(f"launch_distributed raised {raised['type']} without the failing rank's traceback "
                       f"(message: {raised['message'][:200]!r})", hint=3)
    if facts["seconds"] > PROMPT_SECONDS:
        raise ctx.fail(f"the error surfaced only after {facts['seconds']:.1f}s: the launcher waited for the slow "
                       "ranks before looking at the failed one; join=True raises as soon as any rank fails", hint=3)
    if facts["children_after_return"]:
        raise ctx.fail(f"{facts['children_after_return']} processes were left running after the failure", hint=3)
