"""Judging exercise 7 from what every process of the torchrun launch recorded (workers.py, shim.py).

One launch serves every check: three processes over two simulated nodes, RANK 0, 1, 2 with
LOCAL_RANK 0, 1, 0. The number of steps is drawn per grading. A launch that failed costs the checks
whose facts it cut short: the others are judged on facts proven complete before it (_processes).
Signatures: DIAGNOSES.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, cast

import numpy as np
from numpy.typing import ArrayLike

from grader.checks.ex07_torchrun.facts import REFERENCE, TORCHRUN, Env, Process, Query, Reference, Start, Torchrun
from grader.engine import RunResult
from grader.judge.api import CheckContext, CheckFailed, UpToFailure, check
from grader.judge.compare import ATOL, RTOL, near, scale_of
from grader.judge.diagnose import error_echo_phrase, meaning_line, stuck_frame, student_line
from grader.judge.names import Cause, HintName
from grader.judge.proof import structural
from grader.judge.tolerance import close_each

NODES = [2, 1]
WORLD = sum(NODES)
FEATURES = 4  # the exercise's model: nn.Linear(FEATURES, 1), a weight and a bias
MODEL_SHAPES = [[1, FEATURES], [1]]
LOCAL_RANKS = [local for size in NODES for local in range(size)]
STEP_CHOICES = (2, 4, 5)  # never the 3 of the docstring's example: a hard-coded count shows
BATCH, LR = 8, 0.1
MAX_LAUNCH_S = 15.0  # a correct launch takes about a second, two on a loaded machine


def _steps(ctx: CheckContext) -> int:
    return STEP_CHOICES[ctx.seed % len(STEP_CHOICES)]


def _at(error: dict[str, Any]) -> str:
    line = student_line(error)
    return f"\n  at {line}" if line else ""


def _named_init_mistake(processes: list[Process]) -> str:
    """A rank, world size or rendezvous of the code's own, read from init_process_group's arguments
    in every process: LOCAL_RANK or LOCAL_WORLD_SIZE where each process passed its own, else a
    value that is not the launcher's."""
    calls = sorted(  # by RANK: the first named is the same whatever order the processes reported in
        (
            (
                p,
                {name: int(p["env"][name]) for name in ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE")},
                p["init_calls"][0],
            )
            for p in processes
            if p["init_calls"]
        ),
        key=lambda found: found[1]["RANK"],
    )
    wrong_rank = [(p, env, call) for p, env, call in calls if call["rank"] is not None and call["rank"] != env["RANK"]]
    if wrong_rank:
        if all(call["rank"] == env["LOCAL_RANK"] for _, env, call in calls):
            _, env, call = wrong_rank[0]
            return (
                f"LOCAL_RANK used as the global rank: the process with RANK={env['RANK']} (LOCAL_RANK="
                f"{env['LOCAL_RANK']}) called init_process_group(rank={call['rank']}); the rank is RANK"
            )
        _, env, call = wrong_rank[0]
        return (
            f"hard-coded rank: the process torchrun started with RANK={env['RANK']} called "
            f"init_process_group(rank={call['rank']}); read RANK from the environment, or pass no rank "
            "and let env:// read it"
        )
    wrong_world = [
        (env, call)
        for _, env, call in calls
        if call["world_size"] is not None and call["world_size"] != env["WORLD_SIZE"]
    ]
    if wrong_world:
        env, call = wrong_world[0]
        if all(call["world_size"] == env["LOCAL_WORLD_SIZE"] for _, env, call in calls):
            return (
                f"LOCAL_WORLD_SIZE used where WORLD_SIZE is meant: init_process_group(world_size="
                f"{call['world_size']}) in a launch of WORLD_SIZE={env['WORLD_SIZE']} processes "
                f"({env['LOCAL_WORLD_SIZE']} on the node of RANK={env['RANK']})"
            )
        return (
            f"hard-coded world size: init_process_group(world_size={call['world_size']}) in a launch of "
            f"WORLD_SIZE={env['WORLD_SIZE']} processes; read WORLD_SIZE from the environment"
        )
    for process, env, call in calls:
        if call["init_method"] not in (None, "env://"):
            return (
                f"init_process_group(init_method={call['init_method']!r}): under torchrun use env:// (the "
                "default), which reads MASTER_ADDR and MASTER_PORT from the launcher"
            )
        if call["backend"] and "nccl" in str(call["backend"]) and process["error"]:
            return (
                f"the process with RANK={env['RANK']} asked for nccl on a machine without GPUs: choose gloo "
                "when no GPU is available (nccl only when pick_device() returned a GPU)"
            )
    return ""


def _hang(ctx: CheckContext, launch: Torchrun, timeout: float) -> str:
    """Where each process of a launch that did not finish was, from the stacks it dumped."""
    places = []
    for process in launch["processes"]:
        where = stuck_frame(process.get("stack", ""), ctx.student_file)
        if where and not process.get("script_finished"):
            places.append(f"the process with RANK={process['env']['RANK']} was at {where}")
    finished = [p for p in launch["processes"] if p.get("script_finished")]
    if finished:
        places.append(f"RANK {', '.join(p['env']['RANK'] for p in finished)} had finished the script")
    joining = [
        p["env"]["RANK"]
        for p in finished
        if "multiprocessing/util.py" in p.get("stack", "") and "_exit_function" in p.get("stack", "")
    ]
    if joining:
        places.append(
            f"the process{'es' if len(joining) > 1 else ''} of RANK {', '.join(joining)} did not exit: "
            "multiprocessing was waiting for a Process the script started and never joined (a Process that "
            "is not a daemon is joined at exit)"
        )
    located = ": " + "; ".join(places) if places else ""
    return (
        f"the torchrun launch did not finish within {timeout:g} s (a hang?){located}. "
        f"Node 0 ran `{launch['commands'][0]}`"
    )


def _launch(ctx: CheckContext) -> tuple[RunResult, Torchrun, float]:
    """The one launch every check reads: its run (the grader's worker, which ends well whatever the launch did), what
    it recorded, and the time it was given."""
    timeout = min(MAX_LAUNCH_S, ctx.deadline - 3.0)
    result = ctx.run(TORCHRUN.name, nprocs=1, nodes=NODES, script_args=["--steps", str(_steps(ctx))], timeout=timeout)
    [launch] = ctx.require(result, schema=Torchrun)
    return result, launch, timeout


def _telling_first(process: Process) -> tuple[bool, bool]:
    """A process that failed by itself first; then one that lost its connection (another's failure echoed); last
    one stopped by SIGTERM (torch's SignalException: torchrun or the grader stopping it once another process
    failed or time ran out)."""
    error = process["error"] or {}
    return error.get("type") == "SignalException", bool(error_echo_phrase(error))


def _failure(ctx: CheckContext, result: RunResult, launch: Torchrun, timeout: float) -> CheckFailed | None:
    """How the launch failed (a process raised, it did not finish in time, an agent failed), said as the failure of
    `result`; None where every process ended well."""
    processes = launch["processes"]
    for process in sorted(processes, key=_telling_first):
        error = process["error"]
        if error and error["stage"] == "running the script":
            return ctx.fail(
                f"the process with RANK={process['env']['RANK']} raised {error['type']}: "
                f"{error['message']}{_at(error)}{meaning_line(error)}",
                details=error.get("traceback", ""),
                explains=result,
            )
    if launch["timed_out"]:
        return ctx.fail(_hang(ctx, launch, timeout), details="\n".join(launch["agent_output"]), explains=result)
    if len(processes) < WORLD or any(code != 0 for code in launch["exit_codes"]):
        return ctx.fail(
            f"torchrun started {len(processes)} of {WORLD} processes and its agents exited with codes "
            f"{launch['exit_codes']}",
            details="\n".join(launch["agent_output"]),
            explains=result,
        )
    return None


# Proof that the facts a check reads were complete before the launch failed: what they cover, or None. It reads the
# processes the failure stopped cut to the facts the check reads (UpToFailure), the others whole.
Proof = Callable[[list[Process]], str | None]


def _processes(ctx: CheckContext, proven: tuple[str, ...] = (), proof: Proof | None = None) -> list[Process]:
    """Every process's facts after a launch in which all of them ended without error. Where the launch failed, the
    facts `proof` shows complete before the failure: a process the failure stopped (it never recorded `ended`) keeps
    only its `proven` facts, and reading another one fails the check with the failure. One failure then costs the
    checks whose facts it cut short, not every check of the launch (DIAGNOSES.md)."""
    result, launch, timeout = _launch(ctx)
    processes = launch["processes"]
    errors = [p["error"] for p in processes if p["error"]]
    stub = next((e for e in errors if e.get("not_implemented")), None)
    if stub is not None:
        function = (stub.get("student_frames") or [{}])[-1].get("function", "a function")
        raise ctx.fail(f"not implemented yet: {function}() still raises NotImplementedError")
    named = _named_init_mistake(processes)
    if named:
        raise ctx.fail(named, hint=HintName("rank_from_env"))
    failure = _failure(ctx, result, launch, timeout)
    if failure is None:
        return processes
    if proof is None or len(processes) < WORLD or _held_at_exit(launch):
        raise failure
    kept = [p if p.get("ended") else _cut(p, proven, failure) for p in processes]
    covered = proof(kept)
    if covered is None:
        raise failure
    ctx.judged_before(result, covered, failure.verdict)
    return kept


def _held_at_exit(launch: Torchrun) -> bool:
    """Every process finished its script, and the launch still did not end: what a script left behind held it (a
    Process it never joined). Exercise 7 forbids leaving anything behind (its checks' strays = "fail"): such a
    failure costs every check, as a stray the grader finds does."""
    return launch["timed_out"] and all(p.get("script_finished") for p in launch["processes"])


def _cut(process: Process, proven: tuple[str, ...], failure: CheckFailed) -> Process:
    """A process the launch's failure stopped, cut to its `proven` facts (UpToFailure)."""
    facts: dict[str, Any] = dict(process)
    return cast(Process, UpToFailure({key: facts[key] for key in proven}, failure))


def _stopped(process: Process) -> bool:
    """A process whose facts the launch's failure cut short (_processes)."""
    return isinstance(process, UpToFailure)


def _joined(processes: list[Process]) -> str | None:
    """Proof for joins_from_env: init_process_group had returned in every process (the shim records the group only
    then), so what each passed and the group it formed are known."""
    if all(p["init_calls"] and "group" in p["init_calls"][0] for p in processes):
        return "the process group every process had joined"
    return None


def _every_step(ctx: CheckContext) -> Proof:
    """Proof for trains_in_sync: every process took the drawn number of steps (--steps), each to its end."""

    def proof(processes: list[Process]) -> str | None:
        steps = _steps(ctx)
        if all(len(p["steps"]) == steps and all("params" in step for step in p["steps"]) for p in processes):
            return f"the {steps} optimizer steps every process took"
        return None

    return proof


def _every_output(processes: list[Process]) -> str | None:
    """Proof for logs_from_rank0: every process but rank 0 ended (a stopped one might have printed later), and rank 0
    had printed (more lines from it would change nothing)."""
    rank0, others = processes[0], processes[1:]
    if not any(_stopped(p) for p in others) and (not _stopped(rank0) or rank0["printed"].strip()):
        return "what every process printed (every one but RANK 0 ended its script; RANK 0 had printed)"
    return None


@check("joins_from_env")
def joins_from_env(ctx: CheckContext) -> None:
    for process in _processes(ctx, ("env", "init_calls"), _joined):
        env = process["env"]
        if not process["init_calls"]:
            raise ctx.fail(
                f"the process with RANK={env['RANK']} never called init_process_group: does the script "
                'call main() under `if __name__ == "__main__":`?',
                hint=HintName("main_guard"),
            )
        group = process["init_calls"][0].get("group")
        if group != {"rank": int(env["RANK"]), "world_size": int(env["WORLD_SIZE"])}:
            raise ctx.fail(
                f"the process with RANK={env['RANK']} of WORLD_SIZE={env['WORLD_SIZE']} joined the group as {group}",
                hint=HintName("rank_from_env"),
            )


def _reference(ctx: CheckContext, start: Start, batch_ranks: list[int], steps: int) -> Reference:
    """The trusted reference from the weights the processes started from, on the batches of `batch_ranks`."""
    facts = ctx.reference(REFERENCE, start=start, batch_ranks=batch_ranks, steps=steps)
    return facts


def _arrays(values: Sequence[ArrayLike]) -> dict[str, np.ndarray]:
    return {str(i): np.asarray(v) for i, v in enumerate(values)}


def _off_reference(ctx: CheckContext, rank0: Process, start: Start, step: int, want: Reference) -> str:
    """Why rank 0's weights after `step` (0-based; every earlier step matched) are not the reference's."""
    got, expected = rank0["steps"][step], want["steps"][step]
    number = step + 1
    if close_each(got["grads"], expected["grads"], rtol=RTOL, atol=ATOL):
        before = rank0["steps"][step - 1]["params"] if step else start["values"]
        moved = [np.subtract(a, b) for a, b in zip(got["params"], before)]
        meant = [np.subtract(a, b) for a, b in zip(expected["params"], before)]
        ratio = scale_of(_arrays(moved), _arrays(meant))
        if step == 0:
            return (
                f"step 1's gradient equals the reference's, but the update is {ratio:.3g} times plain SGD's: "
                f"a learning rate of {LR * ratio:.3g} where {LR:g} is asked"
            )
        return (
            f"the gradients equal the reference's and step 1 too, but step {number}'s update is {ratio:.3g} "
            f"times plain SGD's (lr {LR:g}): not plain SGD from step 2 on (momentum? another optimizer?)"
        )
    ratio = scale_of(_arrays(got["grads"]), _arrays(expected["grads"]))
    if step == 0 and near(ratio, BATCH):
        return (
            f"loss summed, not averaged: the first gradient is {ratio:.3g} times the reference, the batch size "
            f"{BATCH}; use the mean loss (F.mse_loss's default)"
        )
    if step == 0 and near(ratio, WORLD):
        return (
            f"gradients summed over the processes, not averaged: the first gradient is {ratio:.3g} times the "
            f"reference, the world size {WORLD}"
        )
    if step == 0:
        local = _reference(ctx, start, LOCAL_RANKS, 1)
        if close_each(got["grads"], local["steps"][0]["grads"], rtol=RTOL, atol=ATOL):
            return (
                "two nodes trained on the same data: the gradient is the one of the batches make_batch(LOCAL_RANK"
                ", step) (the process with RANK=2 used node 0's batch of LOCAL_RANK 0), not of make_batch(RANK, "
                "step); pick the batch by the global rank"
            )
    spread = max(float(np.max(np.abs(np.subtract(a, b)))) for a, b in zip(got["params"], expected["params"]))
    return (
        f"after step {number} the weights differ from one process training on the union of the ranks' batches "
        f"by up to {spread:.3g} (the gradient of step {number} is {ratio:.3g} times the reference's)"
    )


@check("trains_in_sync")
def trains_in_sync(ctx: CheckContext) -> None:
    processes, steps = _processes(ctx, ("env", "steps", "start"), _every_step(ctx)), _steps(ctx)
    counts = [len(p["steps"]) for p in processes]
    if counts != [steps] * WORLD:
        raise ctx.fail(
            f"the processes took {counts} optimizer steps; the script was run with --steps {steps}",
            hint=HintName("ddp_training"),
        )
    rank0 = processes[0]
    for process in processes[1:]:
        for step, (mine, theirs) in enumerate(zip(process["steps"], rank0["steps"]), 1):
            if not close_each(mine["params"], theirs["params"], rtol=RTOL, atol=ATOL):
                raise ctx.fail(
                    f"after step {step} the process with RANK={process['env']['RANK']} holds other weights "
                    "than rank 0: train the DistributedDataParallel wrapper, not the plain model",
                    hint=HintName("ddp_training"),
                )
    start = rank0["start"]
    shapes = [list(shape) for shape in start["shapes"]] if start else []
    if start is None or shapes != MODEL_SHAPES:
        raise ctx.fail(
            f"the model trained has parameters of shapes {shapes}; the exercise's nn.Linear({FEATURES}, 1) has "
            f"{MODEL_SHAPES} (a weight and a bias), which the reference trains",
            hint=HintName("ddp_training"),
        )
    want = _reference(ctx, start, list(range(WORLD)), steps)
    for step in range(steps):
        if not close_each(rank0["steps"][step]["params"], want["steps"][step]["params"], rtol=RTOL, atol=ATOL):
            raise ctx.fail(_off_reference(ctx, rank0, start, step, want), hint=HintName("ddp_training"))


def _place(env: Env) -> str:
    return (
        f"the process with RANK={env['RANK']} (node {env['GROUP_RANK']}, LOCAL_RANK={env['LOCAL_RANK']}, "
        f"{env['LOCAL_WORLD_SIZE']} GPUs on its node)"
    )


def _picked(process: Process) -> str:
    """What pick_device() did in one process, said as a predicate."""
    error = process["error"]
    return f"raised {error['type']}: {error['message']}" if error else f"returned {process['device']}"


def _what_each_did(processes: list[Process], wrong: list[Process]) -> str:
    """Every process's device, grouped by what it did, then what the wrong ones should have returned."""
    groups: dict[str, list[str]] = {}
    for process in processes:
        groups.setdefault(_picked(process), []).append(process["env"]["RANK"])
    said = "; ".join(
        f"{what} in the process{'es' if len(ranks) > 1 else ''} with RANK {', '.join(ranks)}"
        for what, ranks in groups.items()
    )
    expected = ", ".join(
        f"cuda:{p['env']['LOCAL_RANK']} for RANK {p['env']['RANK']} (LOCAL_RANK={p['env']['LOCAL_RANK']} on node "
        f"{p['env']['GROUP_RANK']})"
        for p in wrong
    )
    return f"pick_device() on nodes with simulated GPUs {said}; expected cuda:LOCAL_RANK: {expected}"


def _asked_before_binding(process: Process) -> Query | None:
    """The current_device() question whose answer pick_device() returned, asked before anything was
    bound, if the recorded facts show exactly that; else None."""
    if process["error"]:
        return None
    asked = next((q for q in process.get("queried") or [] if not q.get("after_bind")), None)
    if asked is None or process["device"] != f"cuda:{asked['answer']}":
        return None
    return asked


@check("device_from_local_rank")
def device_from_local_rank(ctx: CheckContext) -> None:
    processes = _processes(ctx)
    wrong = [p for p in processes if p["error"] or p["device"] != f"cuda:{p['env']['LOCAL_RANK']}"]
    for process in wrong:
        env, chosen = process["env"], process.get("set_device") or []
        rank, local = env["RANK"], env["LOCAL_RANK"]
        picked = process["device"] or (f"cuda:{chosen[-1]}" if chosen else None)
        if picked == f"cuda:{rank}" and rank != local:
            raise ctx.fail(
                f"RANK used where LOCAL_RANK is needed: on a node with simulated GPUs, {_place(env)} picked "
                f"cuda:{rank}; GPUs are numbered per node, use cuda:LOCAL_RANK",
                hint=HintName("local_rank_gpu"),
            )
    if wrong:
        message = _what_each_did(processes, wrong)
        asked = [_asked_before_binding(p) for p in wrong]
        unbound = structural(  # what current_device() answers before set_device: GPU 0, in every process
            Cause("current_device_before_set_device"),
            {f"process {i}": {"device": "cuda:0", "asked before binding": True} for i in range(len(wrong))},
            {
                f"process {i}": {"device": p["device"], "asked before binding": q is not None}
                for i, (p, q) in enumerate(zip(wrong, asked))
            },
        )
        if unbound is not None:
            apis = sorted({q["api"] for q in asked if q})
            message += (
                f". In each of them pick_device() returned what {' and '.join(apis)}() answered before anything "
                "was bound: the GPU a new process starts on, GPU 0 on every node, whatever its LOCAL_RANK. Read "
                "LOCAL_RANK from the environment, then torch.cuda.set_device(local_rank)"
            )
            raise ctx.fail(message, hint=HintName("local_rank_gpu"), proven=unbound)
        raise ctx.fail(message, hint=HintName("local_rank_gpu"))
    for process in processes:
        env, chosen = process["env"], process.get("set_device") or []
        local = env["LOCAL_RANK"]
        if process.get("bound") != int(local):
            bound = f"left GPU {process.get('bound')} bound" if chosen else "bound no GPU"
            raise ctx.fail(
                f"pick_device() in {_place(env)} returned cuda:{local} but {bound}; bind the process to its GPU "
                f"too: torch.cuda.set_device({local}) (or torch.accelerator.set_device_index)",
                hint=HintName("local_rank_gpu"),
            )


@check("logs_from_rank0")
def logs_from_rank0(ctx: CheckContext) -> None:
    processes = _processes(ctx, ("env", "printed"), _every_output)
    printing = [p for p in processes[1:] if p["printed"].strip()]
    per_node = {p["env"]["RANK"] for p in processes if p["env"]["LOCAL_RANK"] == "0"} - {"0"}
    if printing and processes[0]["printed"].strip() and {p["env"]["RANK"] for p in printing} == per_node:
        raise ctx.fail(
            f"one log per node: the processes with LOCAL_RANK 0 printed (RANK 0 and RANK "
            f"{', '.join(sorted(per_node))}, the first process of node 1); guard the print with the global "
            "rank, RANK == 0",
            hint=HintName("print_on_rank0"),
        )
    if printing:
        process = printing[0]
        line = process["printed"].strip().splitlines()[0]
        raise ctx.fail(
            f"every rank printing: the process with RANK={process['env']['RANK']} also printed "
            f"{line!r}; print (or log) only where RANK is 0",
            hint=HintName("print_on_rank0"),
        )
    if not processes[0]["printed"].strip():
        raise ctx.fail(
            "rank 0 printed nothing, on stdout or stderr (print or logging): log one line per step from rank 0",
            hint=HintName("print_on_rank0"),
        )


@check("destroys_group")
def destroys_group(ctx: CheckContext) -> None:
    for process in _processes(ctx):
        if not process["init_calls"]:  # no group formed, none destroyed: nothing here to give points for
            raise ctx.fail(
                f"the process with RANK={process['env']['RANK']} never called init_process_group, so it "
                "formed no process group to destroy",
                hint=HintName("main_guard"),
            )
        if process["initialized_at_end"]:
            raise ctx.fail(
                f"no destroy: the process with RANK={process['env']['RANK']} ended the script still in its "
                "process group; call dist.destroy_process_group() when training is done",
                hint=HintName("destroy_group"),
            )
