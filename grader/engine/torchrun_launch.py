"""The torchrun mode: ranks started by `torchrun` (a cluster's own launcher) instead of the zygote.

`TorchrunEngine.run(job)` has the zygote engine's interface and result (`RunResult` of
`RankOutcome`s), so checks are unchanged. The parent writes the job as a spec file and runs
`python -m torch.distributed.run --standalone --nproc-per-node W -m grader.engine.torchrun_launch SPEC`;
inside each rank this module's `main` reads RANK/WORLD_SIZE from torchrun and hands over to the same
`rank_runtime.run_rank` as a zygote rank, its output and report going to files in the run folder
(there is no zygote to pass pipes). Each run pays torchrun's start-up (about 3 s, far more on a
loaded node): a job's deadline counts from the moment every rank has imported torch, which may take
up to START_ALLOWANCE_S.

With a `Cluster` (several nodes, see cluster.py) the run folder is in the shared folder, the
followers start their agents on the announced spec, and the ranks form their group at torchrun's
MASTER_ADDR/MASTER_PORT; a run in which ranks never started (a follower missing) fails at the
deadline with an EngineError naming the ranks and nodes.
"""

from __future__ import annotations

import faulthandler
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import IO, Any

from grader.engine import wire
from grader.engine.cluster import Announcer, Cluster, ClusterError
from grader.engine.contract import (
    STACK_DUMP_BYTES,
    STACK_DUMP_CHARS,
    CappedOutput,
    EngineError,
    Job,
    RankOutcome,
    RankSpec,
    RunResult,
    StrayProcess,
    read_tail,
)
from grader.engine.platforms import STACK_DUMP_SIGNAL
from grader.engine.processes import killpg, send_signal
from grader.engine.reaper import read_strays

START_ALLOWANCE_S = 20.0
READY_POLL_S = 0.05
STACK_DUMP_WAIT_S = 0.25
STACK_DUMP_LIMIT_S = 5.0
FOLLOWER_STACK_WAIT_S = 1.0  # followers poll for the request to dump their ranks' stacks
REAPER_WAIT_S = 5.0
NODE_RANK_VARIABLE = "GRADER_NODE_RANK"  # tags each rank's pid file with its node


def start_agent(
    torchrun_args: list[str], nproc_per_node: int, spec_file: Path, node_rank: int, log: IO[bytes]
) -> subprocess.Popen[bytes]:
    """One torchrun agent running this module on every rank of this node, under a reaper (which
    ends what the ranks leave behind), in a process group of its own."""
    command = [
        sys.executable,
        "-m",
        "grader.engine.reaper",
        str(spec_file.parent),
        str(node_rank),
        "--",
        sys.executable,
        "-m",
        "torch.distributed.run",
        *torchrun_args,
        "--nproc-per-node",
        str(nproc_per_node),
        "-m",
        __name__,
        str(spec_file),
    ]
    package_root = str(Path(__file__).resolve().parents[2])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
        "OMP_NUM_THREADS": "1",
        NODE_RANK_VARIABLE: str(node_rank),
    }
    try:
        return subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            env=env,
            cwd=spec_file.parent,
            start_new_session=True,
        )
    except OSError as exc:
        raise EngineError(f"cannot start torchrun: {exc}") from exc


def ranks_of_node(run_dir: Path, node_rank: int) -> set[int]:
    """The pids of a run's ranks on one node (a pid means nothing on another node)."""
    pids = set()
    for pid_file in run_dir.glob("rank*.pid"):
        try:
            node, _, pid = pid_file.read_text().partition(" ")
        except FileNotFoundError:  # node 0 has just removed the run folder
            continue
        if pid and int(node) == node_rank:
            pids.add(int(pid))
    return pids


def dump_stacks(run_dir: Path, node_rank: int) -> None:
    if STACK_DUMP_SIGNAL is None:  # no SIGUSR1 (Windows): no stacks to ask for
        return
    for pid in ranks_of_node(run_dir, node_rank):
        send_signal(pid, STACK_DUMP_SIGNAL)


def end_run(agent: subprocess.Popen[bytes], rank_pids: set[int]) -> None:
    """Leave nothing of a node's run: torchrun starts each rank in its own session, and an agent
    that fails (its rendezvous store gone with node 0's agent) may exit without ending them. The
    ranks go first; then the reaper stops the agent and kills what is left below it."""
    for pid in rank_pids:
        killpg(pid)
    if agent.poll() is None:
        agent.terminate()
        try:
            agent.wait(timeout=REAPER_WAIT_S)
        except subprocess.TimeoutExpired:
            killpg(agent.pid)
            agent.wait()


class TorchrunEngine:
    """Runs each job under torchrun; same `run(job) -> RunResult` as `Engine`.

    Without a cluster every run is on this node (`torchrun_args`, `--standalone` by default). With
    one, this is node 0: a run of W ranks is announced to the followers and W/N ranks start per node,
    except one-rank runs (the grader's trusted references), which stay on this node.
    """

    def __init__(
        self,
        torchrun_args: tuple[str, ...] = ("--standalone",),
        cluster: Cluster | None = None,
        start_allowance: float = START_ALLOWANCE_S,
    ) -> None:
        self.torchrun_args = torchrun_args
        self.cluster = cluster
        self.start_allowance = start_allowance
        self.scratch_root = cluster.shared_dir / "scratch" if cluster else None  # ranks of every node write there
        self._announcer = Announcer(cluster) if cluster else None

    def start(self) -> None:
        """Nothing to warm: every run starts its own ranks. A cluster's session is opened."""
        if self._announcer is not None and self.scratch_root is not None:
            self._announcer.open()
            self.scratch_root.mkdir(exist_ok=True)

    def new_scratch(self) -> str:
        """A folder the runs of one grading share (on the shared folder when there are several nodes)."""
        return tempfile.mkdtemp(prefix="grader-scratch-", dir=self.scratch_root)

    def discard_scratch(self, path: str) -> None:
        shutil.rmtree(path, ignore_errors=True)

    def close(self) -> None:
        """Nothing outlives a run; the followers of a cluster are told to stop."""
        if self._announcer is not None:
            self._announcer.close()

    def __enter__(self) -> TorchrunEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _spec(self, job: Job, run_dir: Path, multinode: bool) -> RankSpec:
        # torchrun's MASTER_ADDR/MASTER_PORT stay as torchrun set them. Several nodes meet there
        # (env://), as any torchrun program does: a file store would need file locks that work
        # across nodes on the shared filesystem.
        return {**job.rank_spec(job.env), "run_dir": str(run_dir), "init_method": "env://" if multinode else None}

    def run(self, job: Job) -> RunResult:
        if self._announcer is None or self.cluster is None or job.world_size == 1:
            with tempfile.TemporaryDirectory(prefix="grader-torchrun-") as folder:
                return self._run(job, Path(folder), list(self.torchrun_args), job.world_size, None)
        try:
            nproc = self.cluster.procs_per_node(job.world_size)
        except ClusterError as exc:
            raise EngineError(str(exc)) from exc
        name, run_dir = self._announcer.new_run()
        try:
            return self._run(job, run_dir, self.cluster.rendezvous_args(name, 0), nproc, name)
        finally:
            self._announcer.finish(name)
            shutil.rmtree(run_dir, ignore_errors=True)

    def _run(self, job: Job, run_dir: Path, torchrun_args: list[str], nproc: int, name: str | None) -> RunResult:
        started = time.monotonic()
        spec_file = run_dir / "spec.json"
        spec_file.write_text(json.dumps(self._spec(job, run_dir, name is not None)))
        if name is not None and self._announcer is not None:
            # the latest node 0 can end it: ready just before allowance + deadline, then a deadline more
            self._announcer.announce(name, spec_file, nproc, self.start_allowance + 2 * job.deadline)
        with open(run_dir / "torchrun.log", "wb") as log:
            launcher = start_agent(torchrun_args, nproc, spec_file, 0, log)
            timed_out = self._wait(launcher, job, run_dir, name)
        trusted = job.student_file is None
        ranks = [self._outcome(rank, run_dir, timed_out, trusted) for rank in range(job.world_size)]
        log_text = read_tail(run_dir / "torchrun.log", 16000).decode(errors="replace")[-4000:]
        if not any(r.report for r in ranks) and not timed_out and launcher.returncode != 0:
            raise EngineError(f"torchrun failed (exit {launcher.returncode}) before any rank reported:\n{log_text}")
        never = [r for r in range(job.world_size) if not (run_dir / f"rank{r}.pid").exists()]
        if name is not None and timed_out and never:
            raise EngineError(self._not_started(name, never, log_text))
        starting = [r for r in range(job.world_size) if not (run_dir / f"rank{r}.ready").exists()]
        if timed_out and starting:
            raise EngineError(
                f"rank(s) {', '.join(map(str, starting))} were still importing torch after the "
                f"{self.start_allowance:g} s start allowance: the node is overloaded or its disk slow "
                "(nothing of the submission had run yet)"
            )
        strays = [
            StrayProcess(int(s.get("pid", 0)), str(s.get("command", "")), str(s.get("origin", "")))
            for s in read_strays(run_dir, 0)
        ]
        return RunResult(job, ranks, time.monotonic() - started, timed_out, strays, len(strays))

    def _not_started(self, name: str, never: list[int], log_text: str) -> str:
        assert self._announcer is not None and self.cluster is not None
        ranks = ", ".join(map(str, never))
        absent = self._announcer.absent_nodes(name)
        if absent:
            nodes = ", ".join(map(str, absent))
            return (
                f"ranks {ranks} never started: node(s) {nodes} of {self.cluster.nnodes} never took up the run "
                f"(is `grader node --node-rank N ... --shared-dir {self.cluster.shared_dir}` running there?)"
            )
        return (
            f"ranks {ranks} never started: the torchrun agents did not meet at {self.cluster.rdzv_endpoint}; "
            f"node 0's torchrun said:\n{log_text}"
        )

    def _wait(self, launcher: subprocess.Popen[bytes], job: Job, run_dir: Path, name: str | None) -> bool:
        """Wait for the launch; the job's deadline counts from the moment every rank has imported
        torch (its `.ready` file), so a loaded node's slow start-up is never taken for a hang. Until
        then the run may take the start allowance plus the deadline; True when time ran out."""
        end = time.monotonic() + self.start_allowance + job.deadline
        ready = False
        while launcher.poll() is None:
            now = time.monotonic()
            if not ready and all((run_dir / f"rank{r}.ready").exists() for r in range(job.world_size)):
                ready, end = True, now + job.deadline
            if now >= end:
                if name is not None and self._announcer is not None:
                    self._announcer.ask_for_stacks(name)
                dump_stacks(run_dir, 0)
                _await_stacks(run_dir, job.world_size, STACK_DUMP_WAIT_S if name is None else FOLLOWER_STACK_WAIT_S)
                end_run(launcher, ranks_of_node(run_dir, 0))
                return True
            time.sleep(READY_POLL_S)
        if name is not None:
            end_run(launcher, ranks_of_node(run_dir, 0))
        return False

    @staticmethod
    def _outcome(rank: int, run_dir: Path, timed_out: bool, trusted: bool) -> RankOutcome:
        outcome = RankOutcome(rank)
        report = run_dir / f"rank{rank}.report"
        if _reported(report):
            try:
                outcome.report = _read_report(report, rank, trusted)
                outcome.status = 0
            except wire.WireError as exc:
                outcome.report_problem = str(exc)
        else:
            outcome.report_problem = "no report"
            outcome.stopped = "deadline" if timed_out else ""
        output = CappedOutput()
        out_file = run_dir / f"rank{rank}.out"
        if out_file.is_file():
            output.add_file(out_file)
        outcome.output, outcome.output_dropped = output.text(), output.dropped
        stack = run_dir / f"rank{rank}.stack"
        if stack.is_file():
            outcome.stack_dump = read_tail(stack, STACK_DUMP_BYTES).decode(errors="replace")[-STACK_DUMP_CHARS:]
        return outcome


def _read_report(path: Path, rank: int, trusted: bool) -> Any:
    """A rank's report file, read as the zygote's stream is (wire.ReportReader): never more than the frame
    and one chunk past it, refused from its header when that announces more than the grader's limit."""
    reader = wire.report_reader(f"rank {rank}'s report", trusted)
    with open(path, "rb") as file:
        while not reader.complete and (chunk := file.read(1 << 16)):
            reader.add(chunk)
        reader.add(file.read(1 << 16))  # stray bytes, if any
    return reader.decode()


def _written(path: Path) -> bool:
    """A rank's file that holds something (a stack dump)."""
    return path.is_file() and path.stat().st_size > 0


def _reported(path: Path) -> bool:
    """A rank's report file that holds more than the opening its runtime writes first (wire.sealed_encoder)."""
    return path.is_file() and path.stat().st_size > wire.OPENING_BYTES


def _await_stacks(run_dir: Path, world_size: int, least: float) -> None:
    """Give the ranks `least` seconds to write their stacks, and up to STACK_DUMP_LIMIT_S while the
    file of a started rank that has not reported is still empty (a loaded node answers late)."""
    started = time.monotonic()
    time.sleep(least)
    stacks = [
        run_dir / f"rank{rank}.stack"
        for rank in range(world_size)
        if (run_dir / f"rank{rank}.ready").exists() and not _reported(run_dir / f"rank{rank}.report")
    ]
    while time.monotonic() - started < STACK_DUMP_LIMIT_S:
        if all(_written(path) for path in stacks):
            time.sleep(STACK_DUMP_WAIT_S)  # the last one may still be writing
            return
        time.sleep(READY_POLL_S)


def main(spec_file: str) -> None:
    """Inside one torchrun rank: become a grader rank, reporting into files of the run folder."""
    from grader.engine.rank_runtime import run_rank

    spec: RankSpec = json.loads(Path(spec_file).read_text())
    rank = int(os.environ["RANK"])
    if int(os.environ["WORLD_SIZE"]) != spec["world_size"]:
        raise SystemExit(f"torchrun started {os.environ['WORLD_SIZE']} ranks, the job wants {spec['world_size']}")
    run_dir = Path(spec["run_dir"])
    out_fd = os.open(run_dir / f"rank{rank}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    report_fd = os.open(run_dir / f"rank{rank}.report", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    stack_fd = os.open(run_dir / f"rank{rank}.stack", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    if STACK_DUMP_SIGNAL is not None:  # from now on the signal dumps stacks, never ends the rank
        faulthandler.register(STACK_DUMP_SIGNAL, file=stack_fd, all_threads=True)
    (run_dir / f"rank{rank}.pid").write_text(f"{os.environ.get(NODE_RANK_VARIABLE, '0')} {os.getpid()}")
    import torch.distributed  # noqa: F401, PLC0415 - the start-up the allowance covers, before the deadline runs

    (run_dir / f"rank{rank}.ready").touch()
    run_rank({**spec, "rank": rank, "local_rank": int(os.environ["LOCAL_RANK"])}, out_fd, report_fd, stack_fd)


if __name__ == "__main__":
    main(sys.argv[1])
