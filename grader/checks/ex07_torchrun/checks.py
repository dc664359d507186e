"""Judging exercise 7 from what every process of the torchrun launch recorded (workers.py, shim.py).

One launch serves every check: three processes over two simulated nodes, RANK 0, 1, 2 with
LOCAL_RANK 0, 1, 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from grader.checks.api import CheckContext, check
from grader.checks.diagnose import student_line

NODES = [2, 1]
WORLD = sum(NODES)
STEPS = 3
MAX_LAUNCH_S = 15.0  # a correct launch takes about a second


def _at(error: dict[str, Any]) -> str:
    line = student_line(error)
    return f"\n  at {line}" if line else ""


def _named_init_mistake(processes: list[dict[str, Any]]) -> str:
    """A hard-coded rank, world size or rendezvous, read from init_process_group's arguments."""
    for process in processes:
        env, calls = process["env"], process["init_calls"]
        if not calls:
            continue
        call, rank, world = calls[0], int(env["RANK"]), int(env["WORLD_SIZE"])
        if call["rank"] is not None and call["rank"] != rank:
            return (f"hard-coded rank: the process torchrun started with RANK={rank} called "
                    f"init_process_group(rank={call['rank']}); read RANK from the environment, or pass no rank "
                    "and let env:// read it")
        if call["world_size"] is not None and call["world_size"] != world:
            return (f"hard-coded world size: init_process_group(world_size={call['world_size']}) in a launch of "
                    f"WORLD_SIZE={world} processes; read WORLD_SIZE from the environment")
        if call["init_method"] not in (None, "env://"):
            return (f"init_process_group(init_method={call['init_method']!r}): under torchrun use env:// (the "
                    "default), which reads MASTER_ADDR and MASTER_PORT from the launcher")
    return ""


def _processes(ctx: CheckContext) -> list[dict[str, Any]]:
    """Every process's facts after a launch in which all of them finished without error."""
    timeout = min(MAX_LAUNCH_S, ctx.deadline - 3.0)
    [launch] = ctx.facts("torchrun", nprocs=1, nodes=NODES, script_args=["--steps", str(STEPS)], timeout=timeout)
    processes = launch["processes"]
    errors = [p["error"] for p in processes if p["error"]]
    stub = next((e for e in errors if e.get("not_implemented")), None)
    if stub is not None:
        function = (stub.get("student_frames") or [{}])[-1].get("function", "a function")
        raise ctx.fail(f"not implemented yet: {function}() still raises NotImplementedError")
    named = _named_init_mistake(processes)
    if named:
        raise ctx.fail(named, hint=2)
    for process in processes:
        error = process["error"]
        if error and error["stage"] == "running the script":
            raise ctx.fail(f"the process with RANK={process['env']['RANK']} raised {error['type']}: "
                           f"{error['message']}{_at(error)}", details=error.get("traceback", ""))
    command = launch["commands"][0]
    if launch["timed_out"]:
        raise ctx.fail(f"the torchrun launch did not finish within {timeout:g} s (a hang?); node 0 ran `{command}`",
                       details="\n".join(launch["agent_output"]))
    if len(processes) < WORLD or any(code != 0 for code in launch["exit_codes"]):
        raise ctx.fail(f"torchrun started {len(processes)} of {WORLD} processes and its agents exited with codes "
                       f"{launch['exit_codes']}", details="\n".join(launch["agent_output"]))
    return processes


@check("joins_from_env")
def joins_from_env(ctx: CheckContext) -> None:
    for process in _processes(ctx):
        env = process["env"]
        if not process["init_calls"]:
            raise ctx.fail(f"the process with RANK={env['RANK']} never called init_process_group: does the script "
                           "call main() under `if __name__ == \"__main__\":`?", hint=1)
        group = process["init_calls"][0].get("group")
        if group != {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"])}:
            raise ctx.fail(f"the process with RANK={env['RANK']} of WORLD_SIZE={env['WORLD_SIZE']} joined the group "
                           f"as {group}", hint=2)


@check("trains_in_sync")
def trains_in_sync(ctx: CheckContext) -> None:
    processes = _processes(ctx)
    counts = [len(p["steps"]) for p in processes]
    if counts != [STEPS] * WORLD:
        raise ctx.fail(f"the processes took {counts} optimizer steps; the script was run with --steps {STEPS}", hint=4)
    first = processes[0]["steps"]
    for process in processes[1:]:
        for step, (mine, theirs) in enumerate(zip(process["steps"], first), 1):
            if any(not np.allclose(a, b, rtol=1e-6, atol=1e-7) for a, b in zip(mine, theirs)):
                raise ctx.fail(f"after step {step} the process with RANK={process['env']['RANK']} holds other weights "
                               "than rank 0: train the DistributedDataParallel wrapper, not the plain model", hint=4)


@check("device_from_local_rank")
def device_from_local_rank(ctx: CheckContext) -> None:
    for process in _processes(ctx):
        env, error = process["env"], process["error"]
        rank, local = env["RANK"], env["LOCAL_RANK"]
        place = f"the process with RANK={rank} (node {env['GROUP_RANK']}, LOCAL_RANK={local}, " \
                f"{env['LOCAL_WORLD_SIZE']} GPUs on its node)"
        chosen = process.get("set_device") or []
        if error or process["device"] != f"cuda:{local}":
            picked = process["device"] or (f"cuda:{chosen[-1]}" if chosen else None)
            if picked == f"cuda:{rank}":
                raise ctx.fail(f"RANK used where LOCAL_RANK is needed: on a node with faked GPUs, {place} picked "
                               f"cuda:{rank}; GPUs are numbered per node, use cuda:LOCAL_RANK", hint=3)
            shown = f"raised {error['type']}: {error['message']}" if error else f"returned {process['device']}"
            raise ctx.fail(f"pick_device() on a node with faked GPUs, in {place}, {shown}; expected cuda:{local}",
                           hint=3)
        if chosen != [int(local)]:
            raise ctx.fail(f"pick_device() in {place} called torch.cuda.set_device with {chosen or 'nothing'}; "
                           f"bind the process to its GPU with torch.cuda.set_device({local})", hint=3)


@check("logs_from_rank0")
def logs_from_rank0(ctx: CheckContext) -> None:
    processes = _processes(ctx)
    for process in processes[1:]:
        if process["printed"].strip():
            line = process["printed"].strip().splitlines()[0]
            raise ctx.fail(f"every rank printing: the process with RANK={process['env']['RANK']} also printed "
                           f"{line!r}; print only where RANK is 0", hint=5)
    if not processes[0]["printed"].strip():
        raise ctx.fail("rank 0 printed nothing: log one line per step from rank 0", hint=5)
