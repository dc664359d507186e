"""A follower node of a torchrun cluster (`grader node`): starts this node's agent for every run
node 0 announces in the shared folder, until node 0 writes its stop marker (see cluster.py).

A run it cannot start is left alone: node 0's deadline still ends that run, naming the ranks that
never started. Its agent never outlives the run: it is ended when node 0 marks the run done or
when the announced time is over.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from grader.engine.cluster import Cluster, ClusterError, pending_jobs
from grader.engine.contract import EngineError
from grader.engine.torchrun_launch import dump_stacks, end_run, ranks_of_node, start_agent

POLL_S = 0.2


def follow(cluster: Cluster, node_rank: int, say: Callable[[str], None] = print) -> None:
    """Serve node 0's runs until it stops; `say` reports each run taken up."""
    if not 1 <= node_rank < cluster.nnodes:
        raise ClusterError(f"--node-rank {node_rank}: a follower is node 1 to {cluster.nnodes - 1} (node 0 grades)")
    cluster.jobs.mkdir(exist_ok=True)
    alive = cluster.shared_dir / f"node{node_rank}.alive"
    alive.touch()  # a stop marker older than this is an earlier session's (same filesystem clock)
    taken: set[str] = set()
    say(f"node {node_rank} of {cluster.nnodes}: waiting for runs in {cluster.jobs}")
    while not _stopped(cluster, alive):
        for name, entry in pending_jobs(cluster, taken):
            taken.add(name)
            say(f"run {name}: {entry['nproc_per_node']} rank(s) on this node")
            _serve(cluster, node_rank, name, entry, alive, say)
        time.sleep(POLL_S)
    alive.unlink(missing_ok=True)
    say("node 0 has finished grading: stopping")


def _stopped(cluster: Cluster, alive: Path) -> bool:
    try:
        return cluster.stop_marker.stat().st_mtime >= alive.stat().st_mtime
    except FileNotFoundError:
        return False


def _serve(
    cluster: Cluster, node_rank: int, name: str, entry: dict[str, Any], alive: Path, say: Callable[[str], None]
) -> None:
    spec_file = Path(entry["spec_file"])
    ends = time.monotonic() + float(entry["seconds"])
    try:
        with open(spec_file.parent / f"torchrun.node{node_rank}.log", "wb") as log:
            agent = start_agent(
                cluster.rendezvous_args(name, node_rank), int(entry["nproc_per_node"]), spec_file, node_rank, log
            )
    except (OSError, EngineError) as exc:
        say(f"run {name}: cannot start torchrun here: {exc}")
        return
    (cluster.jobs / f"{name}.node{node_rank}").touch()
    stacks_dumped = False
    rank_pids: set[int] = set()  # remembered: node 0 removes the run folder once the run is over
    while agent.poll() is None:
        rank_pids |= ranks_of_node(spec_file.parent, node_rank)
        if not stacks_dumped and (cluster.jobs / f"{name}.stacks").exists():
            dump_stacks(spec_file.parent, node_rank)
            stacks_dumped = True
        if (cluster.jobs / f"{name}.done").exists() or time.monotonic() > ends or _stopped(cluster, alive):
            break
        time.sleep(POLL_S)
    end_run(agent, rank_pids | ranks_of_node(spec_file.parent, node_rank))
