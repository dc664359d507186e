"""Judging exercise 1 from what the ranks recorded."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from grader.checks.api import CheckContext, check


def _port_overridden(facts: dict[str, Any]) -> str | None:
    grader_port = facts.get("grader_port")
    for call in facts.get("init_calls", []):
        init_method = call.get("init_method") or ""
        if init_method.startswith("tcp://"):
            port = urlparse(init_method).port
            if str(port) != grader_port:
                return f"init_method={init_method!r} uses port {port}"
        if init_method in ("", "env://") and call.get("master_port") != grader_port:
            return f"MASTER_PORT was {call.get('master_port')} at init_process_group, not the {grader_port} the launcher set"
    return None


def _joined(ctx: CheckContext) -> list[dict[str, Any]]:
    """The shared run, with the named mistakes checked before any generic failure."""
    result = ctx.run("join_and_leave")
    for outcome in result.ranks:
        facts = outcome.facts
        overridden = _port_overridden(facts)
        if overridden:
            raise ctx.fail(
                f"hard-coded rendezvous on rank {outcome.rank}: {overridden}. setup_ddp must take "
                "MASTER_ADDR/MASTER_PORT from the environment (a fixed port collides when two jobs share a machine)",
                hint=1,
            )
        backends = {call.get("backend") for call in facts.get("init_calls", [])}
        if ctx.backend == "gloo" and ("nccl" in backends or facts.get("set_device_calls")):
            raise ctx.fail(
                f"rank {outcome.rank} asked for the nccl backend on a machine without a GPU: "
                "NCCL needs GPUs; choose gloo when torch.cuda.is_available() is False",
                hint=2,
            )
    ranks = ctx.require(result)
    if not all(f.get("init_calls") for f in ranks):
        raise ctx.fail("setup_ddp returned without calling dist.init_process_group")
    return ranks


@check("joins_group")
def joins_group(ctx: CheckContext) -> None:
    for rank, facts in enumerate(_joined(ctx)):
        group = facts.get("group")
        if not facts.get("initialized") or group is None:
            raise ctx.fail(f"after setup_ddp, rank {rank} is not in a process group")
        expected = {"rank": rank, "world_size": ctx.world_size, "backend": ctx.backend}
        wrong = {k: group[k] for k in expected if group[k] != expected[k]}
        if wrong:
            details = ", ".join(f"{k} {wrong[k]!r} (expected {expected[k]!r})" for k in wrong)
            raise ctx.fail(f"process {rank} joined with {details}")


@check("collectives_work")
def collectives_work(ctx: CheckContext) -> None:
    expected_sum = ctx.world_size * (ctx.world_size + 1) / 2
    expected_broadcast = 100.0 + ctx.world_size - 1
    for rank, facts in enumerate(_joined(ctx)):
        got_sum = float(facts["all_reduce"][0])
        if got_sum != expected_sum:
            raise ctx.fail(f"all_reduce of rank+1 gave {got_sum:g} on rank {rank}, expected {expected_sum:g}: "
                           "are the ranks in one group with the right world size?")
        got = float(facts["broadcast"][0])
        if got != expected_broadcast:
            raise ctx.fail(f"broadcast from the last rank gave {got:g} on rank {rank}, expected {expected_broadcast:g}")


@check("nccl_setup")
def nccl_setup(ctx: CheckContext) -> None:
    for rank, facts in enumerate(ctx.facts("simulated_gpu_node")):
        events = facts["events"]
        inits = [e for e in events if e["call"] == "init_process_group"]
        devices = [e["device"] for e in events if e["call"] == "set_device"]
        if not inits:
            raise ctx.fail("setup_ddp did not call dist.init_process_group")
        if inits[0]["backend"] != "nccl":
            raise ctx.fail(f"on a GPU node setup_ddp chose {inits[0]['backend']!r} when no backend was "
                           "given; default to nccl when torch.cuda.is_available()", hint=2)
        if not devices:
            raise ctx.fail("set_device missing under nccl: without torch.cuda.set_device(local_rank) "
                           "every rank uses GPU 0", hint=3)
        if devices[-1] != rank:
            raise ctx.fail(f"rank {rank} bound GPU {devices[-1]}, expected GPU {rank} (its local rank)", hint=3)


@check("cleans_up")
def cleans_up(ctx: CheckContext) -> None:
    for rank, facts in enumerate(_joined(ctx)):
        if facts.get("initialized_after_cleanup"):
            raise ctx.fail(f"no destroy: after cleanup_ddp rank {rank} is still in a process group; "
                           "call dist.destroy_process_group()", hint=4)
