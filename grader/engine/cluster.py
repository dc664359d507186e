"""Several torchrun nodes: how node 0 (the grader) and its followers meet, through a shared folder.

Node 0 announces every run as `jobs/NNNN.json` in a folder all nodes see; each follower (`grader
node`) starts its torchrun agent for it and leaves `jobs/NNNN.nodeI` to say so; node 0 writes
`jobs/NNNN.stacks` when it runs out of time (followers then dump their ranks' stacks) and
`jobs/NNNN.done` when the run is over (followers then end their agent, whatever state it is in) and
`stop` when its grading ends. The agents meet by torchrun's c10d rendezvous at node 0's endpoint,
under an id unique to the run. Run folders (spec, rank reports) live in `runs/` of the same folder,
so every node's ranks report where node 0 reads.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class ClusterError(ValueError):
    """Options that cannot describe a cluster (reported in one line)."""


@dataclass(frozen=True)
class Cluster:
    nnodes: int
    rdzv_endpoint: str  # HOST:PORT on node 0, where its agent hosts the rendezvous store
    shared_dir: Path

    def __post_init__(self) -> None:
        if self.nnodes < 2:
            raise ClusterError(f"--nnodes {self.nnodes}: a cluster has at least 2 nodes")
        host, _, port = self.rdzv_endpoint.rpartition(":")
        if not host or not port.isdigit():
            raise ClusterError(f"--rdzv-endpoint {self.rdzv_endpoint!r}: expected HOST:PORT")
        if not self.shared_dir.is_dir():
            raise ClusterError(f"--shared-dir {self.shared_dir}: not a directory (it must be one all nodes see)")

    @property
    def jobs(self) -> Path:
        return self.shared_dir / "jobs"

    @property
    def runs(self) -> Path:
        return self.shared_dir / "runs"

    @property
    def stop_marker(self) -> Path:
        return self.shared_dir / "stop"

    def procs_per_node(self, world_size: int) -> int:
        if world_size % self.nnodes:
            raise ClusterError(
                f"world size {world_size} cannot be split over {self.nnodes} nodes: use a multiple of {self.nnodes}"
            )
        return world_size // self.nnodes

    def rendezvous_args(self, run_name: str, node_rank: int) -> list[str]:
        """torchrun's options for one node of one run; node 0 hosts the rendezvous store."""
        rdzv_id = f"grader-{run_name}"  # unique per run: agents of different runs never meet
        return [
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(node_rank),
            "--rdzv-backend",
            "c10d",
            "--rdzv-endpoint",
            self.rdzv_endpoint,
            "--rdzv-id",
            rdzv_id,
            "--rdzv-conf",
            f"is_host={int(node_rank == 0)}",
        ]


class Announcer:
    """Node 0's side: a fresh run folder and an announcement per run, a stop marker at the end."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self._session = uuid.uuid4().hex[:12]
        self._count = 0

    def open(self) -> None:
        """Start a session: no stale stop marker, and no job left by an earlier session is taken up."""
        self.cluster.jobs.mkdir(exist_ok=True)
        self.cluster.runs.mkdir(exist_ok=True)
        self.cluster.stop_marker.unlink(missing_ok=True)
        for job in self.cluster.jobs.glob("*.json"):
            job.with_suffix(".done").touch()

    def new_run(self) -> tuple[str, Path]:
        """A name and an empty run folder (in the shared folder) for the next run."""
        self._count += 1
        name = f"{self._session}-{self._count:04d}"
        run_dir = self.cluster.runs / name
        run_dir.mkdir()
        return name, run_dir

    def announce(self, name: str, spec_file: Path, nproc_per_node: int, seconds: float) -> None:
        """Publish a run for the followers; `seconds` bounds how long their agents may run."""
        entry = {"spec_file": str(spec_file), "nproc_per_node": nproc_per_node, "seconds": seconds}
        _write_atomically(self.cluster.jobs / f"{name}.json", json.dumps(entry))

    def ask_for_stacks(self, name: str) -> None:
        """The run is out of time: followers dump their ranks' stacks before node 0 ends it."""
        (self.cluster.jobs / f"{name}.stacks").touch()

    def finish(self, name: str) -> None:
        (self.cluster.jobs / f"{name}.done").touch()

    def absent_nodes(self, name: str) -> list[int]:
        """Followers that never took up the run."""
        return [i for i in range(1, self.cluster.nnodes) if not (self.cluster.jobs / f"{name}.node{i}").exists()]

    def close(self) -> None:
        self.cluster.stop_marker.touch()


def pending_jobs(cluster: Cluster, taken: set[str]) -> list[tuple[str, dict[str, Any]]]:
    """Announced runs not over yet and not taken by this follower, oldest first."""
    found = []
    for path in sorted(cluster.jobs.glob("*.json")):
        name = path.stem
        if name not in taken and not path.with_suffix(".done").exists():
            found.append((name, json.loads(path.read_text())))
    return found


def _write_atomically(path: Path, text: str) -> None:
    """Followers poll the folder: they must never read half an announcement."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.{time.monotonic_ns()}")
    partial.write_text(text)
    os.replace(partial, path)
