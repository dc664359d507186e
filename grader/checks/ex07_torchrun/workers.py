"""Rank side of exercise 7: run the student's script under torchrun and collect what each of its
processes recorded (see shim.py).

Layout: two simulated nodes on this machine, one torchrun agent per node (`--nnodes 2 --node-rank
i`, static rendezvous on a free port), two processes on node 0 and one on node 1. The processes
have RANK 0, 1, 2 but LOCAL_RANK 0, 1, 0: reading RANK where LOCAL_RANK is meant shows, and a
hard-coded world size of 2 does not fit.

How: each agent is a fork of this (warm) process that parses its torchrun command line with
torchrun's own parser (`torch.distributed.run.parse_args`, `config_from_args`) and runs torchrun's
launcher (`elastic_launch`: rendezvous, agent, environment, monitoring) with `--start-method fork`
and the shim as the entrypoint. The only difference from `python -m torch.distributed.run
SCRIPT`: the processes are forks that execute the script as __main__, not fresh interpreters,
which saves importing torch (and dynamo, for DDP) in five processes, 15-20 s of CPU on this
machine for a launch that now takes under a second. Agents run in their own sessions and die with
this process; their processes die with them; on timeout every process is asked for its Python
stacks, then both sessions are killed.

The rendezvous port is held from the start: this process binds and listens on a port the OS
assigns, and node 0's agent serves torchrun's store on that very socket (TCPStore's
master_listen_fd). No other launch can take the port, or join this launch's store.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import socket
import time
import traceback
from pathlib import Path
from typing import Any

from grader.checks.ex07_torchrun import shim
from grader.engine.platforms import STACK_DUMP_SIGNAL
from grader.engine.processes import send_signal
from grader.engine.rank_runtime import RankContext

OUTPUT_TAIL = 6000
POLL_S = 0.02
FAILED_GRACE_S = 1.0
STACK_DUMP_WAIT_S = 0.3


def torchrun_arguments(node_rank: int, nodes: list[int], port: int, script: str, script_args: list[str]) -> list[str]:
    """The torchrun command line of one simulated node (after `torchrun`)."""
    return [
        "--nnodes",
        str(len(nodes)),
        "--node-rank",
        str(node_rank),
        "--nproc-per-node",
        str(nodes[node_rank]),
        "--master-addr",
        "127.0.0.1",
        "--master-port",
        str(port),
        "--max-restarts",
        "0",
        "--start-method",
        "fork",
        script,
        *script_args,
    ]


def _serve_store_on(listener: socket.socket) -> None:
    """Node 0's agent: torchrun's static rendezvous store listens on the socket held for it."""
    from torch.distributed.elastic.rendezvous import static_tcp_rendezvous

    # a monkeypatch: mypy refuses to assign to a class
    setattr(
        static_tcp_rendezvous,
        "TCPStore",
        functools.partial(static_tcp_rendezvous.TCPStore, master_listen_fd=listener.fileno()),
    )


def _agent(
    arguments: list[str], log: Path, facts_dir: Path, group_timeout: float, listener: socket.socket, node_rank: int
) -> None:
    """Child side of the fork: one torchrun agent. Never returns."""
    code = 2
    try:
        os.setsid()
        shim.die_with_parent()
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        os.dup2(out, 1)
        os.dup2(out, 2)
        os.environ[shim.FACTS_ENV] = str(facts_dir)
        os.environ[shim.TIMEOUT_ENV] = str(group_timeout)
        from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
        from torch.distributed.launcher.api import elastic_launch
        from torch.distributed.run import config_from_args, parse_args

        if node_rank == 0:
            _serve_store_on(listener)
        else:
            listener.close()
        config, _, script_args = config_from_args(parse_args(arguments))
        try:
            elastic_launch(config, entrypoint=shim.run)(*script_args[script_args.index("-u") + 1 :])
            code = 0
        except ChildFailedError as exc:
            print(exc)
            code = 1
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)


def _wait(pids: list[int], until: float) -> dict[int, int]:
    """Exit codes of the agents that finished before `until`. Once one agent has failed, the others
    get FAILED_GRACE_S: an agent whose own processes succeeded would otherwise wait minutes at
    torchrun's exit barrier for the failed one."""
    codes: dict[int, int] = {}
    while len(codes) < len(pids) and time.perf_counter() < until:
        for pid in pids:
            if pid not in codes:
                done, status = os.waitpid(pid, os.WNOHANG)
                if done:
                    codes[pid] = os.waitstatus_to_exitcode(status)
                    if codes[pid] != 0:
                        until = min(until, time.perf_counter() + FAILED_GRACE_S)
        time.sleep(POLL_S)
    return codes


def _dump_stacks(facts_dir: Path) -> None:
    """Ask every process of the launch still running for its Python stacks (see shim.py); Windows
    has no signal for it."""
    if STACK_DUMP_SIGNAL is None:
        return
    for path in facts_dir.glob("rank*.json"):
        try:
            pid = json.loads(path.read_text()).get("pid")
        except (OSError, ValueError):
            continue
        if isinstance(pid, int):
            send_signal(pid, STACK_DUMP_SIGNAL)
    time.sleep(STACK_DUMP_WAIT_S)


def _kill(pids: list[int], finished: dict[int, int]) -> None:
    for pid in pids:
        if pid not in finished:
            try:
                os.killpg(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            os.waitpid(pid, 0)


def _process_facts(facts_dir: Path) -> list[dict[str, Any]]:
    """Every process's facts, in rank order, each with the stacks it dumped (if asked to)."""
    processes = []
    for path in sorted(facts_dir.glob("rank*.json"), key=lambda path: int(path.stem[4:])):
        facts = json.loads(path.read_text())
        stack = facts_dir / shim.STACK_FILE.format(rank=path.stem[4:])
        facts["stack"] = stack.read_text(errors="replace")[-OUTPUT_TAIL:] if stack.exists() else ""
        processes.append(facts)
    return processes


def torchrun(ctx: RankContext, nodes: list[int], script_args: list[str], timeout: float) -> dict[str, Any]:
    """Launch the student's script on the simulated nodes; every process's facts, in rank order."""
    if ctx.student_file is None:
        raise ValueError("exercise 7 needs the student's script")
    facts_dir = ctx.run_dir / "torchrun-facts"
    facts_dir.mkdir()
    listener = socket.create_server(("127.0.0.1", 0))
    port = listener.getsockname()[1]
    commands = [
        torchrun_arguments(i, nodes, port, str(ctx.student_file.resolve()), script_args) for i in range(len(nodes))
    ]
    ctx.facts["commands"] = [" ".join(["torchrun", *command]) for command in commands]
    logs = [ctx.run_dir / f"node{i}.log" for i in range(len(nodes))]
    started = time.perf_counter()
    pids = []
    for node_rank, (command, log) in enumerate(zip(commands, logs)):
        pid = os.fork()
        if pid == 0:
            _agent(command, log, facts_dir, max(2.0, timeout - 2.0), listener, node_rank)
        pids.append(pid)
    listener.close()
    finished = _wait(pids, started + timeout)
    if len(finished) < len(pids):
        _dump_stacks(facts_dir)
    _kill(pids, finished)
    ctx.facts["seconds"] = time.perf_counter() - started
    failed = any(code != 0 for code in finished.values())
    ctx.facts["timed_out"] = len(finished) < len(pids) and not failed  # else: stopped after another failed
    ctx.facts["exit_codes"] = [finished.get(pid) for pid in pids]
    ctx.facts["agent_output"] = [log.read_text(errors="replace")[-OUTPUT_TAIL:] if log.exists() else "" for log in logs]
    ctx.facts["processes"] = _process_facts(facts_dir)
    return {}


# --- the trusted reference (one fresh process, never the student's code) ---------------------
FEATURES, BATCH, LR = 4, 8, 0.1


def make_batch(rank: int, step: int) -> tuple[Any, Any]:
    """The grader's own copy of the batch the exercise gives every rank at every step."""
    import torch

    generator = torch.Generator().manual_seed(1000 * step + rank)
    inputs = torch.randn(BATCH, FEATURES, generator=generator)
    return inputs, inputs.sum(dim=1, keepdim=True)


def reference(ctx: RankContext, start: dict[str, Any], batch_ranks: list[int], steps: int) -> dict[str, Any]:
    """What DDP computes, in one process: from the weights the processes started from, each step's
    gradient of the mean loss over the batches make_batch(r, step) for r in `batch_ranks` (the
    processes' batches, stacked), then plain SGD with the exercise's learning rate."""
    import torch
    import torch.nn.functional as F
    from torch import nn

    model = nn.Linear(FEATURES, 1)
    with torch.no_grad():
        for param, values, shape in zip(model.parameters(), start["values"], start["shapes"]):
            param.copy_(torch.tensor(values).reshape(shape))
    optimizer = torch.optim.SGD(model.parameters(), lr=LR)
    recorded = []
    for step in range(steps):
        batches = [make_batch(rank, step) for rank in batch_ranks]
        inputs, targets = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        optimizer.zero_grad()
        F.mse_loss(model(inputs), targets).backward()
        grads = []
        for p in model.parameters():
            assert p.grad is not None  # the loss is a function of every parameter of the model
            grads.append(p.grad.detach().reshape(-1).tolist())
        optimizer.step()
        recorded.append({"grads": grads, "params": [p.detach().reshape(-1).tolist() for p in model.parameters()]})
    return {"steps": recorded}
