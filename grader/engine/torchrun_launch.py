"""The torchrun mode: ranks started by `torchrun` (a cluster's own launcher) instead of the zygote.

`TorchrunEngine.run(job)` has the zygote engine's interface and result (`RunResult` of
`RankOutcome`s), so checks are unchanged. The parent writes the job as a spec file and runs
`python -m torch.distributed.run --standalone --nproc-per-node W -m grader.engine.torchrun_launch SPEC`;
inside each rank this module's `main` reads RANK/WORLD_SIZE from torchrun and hands over to the same
`rank_runtime.run_rank` as a zygote rank, its output and report going to files in the run folder
(there is no zygote to pass pipes). Each run pays torchrun's start-up (about 3 s), so the deadline
of a job gets START_ALLOWANCE_S on top.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from grader.engine import wire
from grader.engine.processes import killpg, send_signal
from grader.engine.rank_runtime import STACK_DUMP_SIGNAL
from grader.engine.supervisor import CappedOutput, EngineError, Job, RankOutcome, RunResult

START_ALLOWANCE_S = 20.0
STACK_DUMP_WAIT_S = 0.25


class TorchrunEngine:
    """Runs each job under torchrun on this node; same `run(job) -> RunResult` as `Engine`."""

    def __init__(self, torchrun_args: tuple[str, ...] = ("--standalone",)) -> None:
        self.torchrun_args = torchrun_args

    def start(self) -> None:
        """Nothing to warm: every run starts its own ranks."""

    def close(self) -> None:
        """Nothing outlives a run."""

    def __enter__(self) -> TorchrunEngine:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _spec(self, job: Job, run_dir: Path) -> dict:
        return {
            "world_size": job.world_size,
            "backend": job.backend,
            "target": job.target,
            "kwargs": job.kwargs,
            "student_file": str(job.student_file.resolve()) if job.student_file else None,
            "run_dir": str(run_dir),
            "env": job.env,  # torchrun's MASTER_ADDR/MASTER_PORT stay as torchrun set them
            "collective_timeout": max(2.0, job.deadline - 2.0),
            "debug_collectives": job.debug_collectives,
        }

    def run(self, job: Job) -> RunResult:
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grader-torchrun-") as folder:
            run_dir = Path(folder)
            spec_file = run_dir / "spec.json"
            spec_file.write_text(json.dumps(self._spec(job, run_dir)))
            command = [sys.executable, "-m", "torch.distributed.run", *self.torchrun_args,
                       "--nproc-per-node", str(job.world_size), "-m", __name__, str(spec_file)]
            package_root = str(Path(__file__).resolve().parents[2])
            env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])),
                   "OMP_NUM_THREADS": "1"}
            with open(run_dir / "torchrun.log", "wb") as log:
                try:
                    launcher = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env,
                                                cwd=run_dir, start_new_session=True)
                except OSError as exc:
                    raise EngineError(f"cannot start torchrun: {exc}") from exc
                timed_out = self._wait(launcher, job, run_dir)
            ranks = [self._outcome(rank, run_dir, timed_out) for rank in range(job.world_size)]
            if not any(r.report for r in ranks) and not timed_out and launcher.returncode != 0:
                log_text = (run_dir / "torchrun.log").read_text(errors="replace")[-4000:]
                raise EngineError(f"torchrun failed (exit {launcher.returncode}) before any rank reported:\n{log_text}")
        return RunResult(job, ranks, time.monotonic() - started, timed_out)

    def _wait(self, launcher: subprocess.Popen[bytes], job: Job, run_dir: Path) -> bool:
        try:
            launcher.wait(timeout=job.deadline + START_ALLOWANCE_S)
            return False
        except subprocess.TimeoutExpired:
            for pid_file in run_dir.glob("rank*.pid"):
                send_signal(int(pid_file.read_text()), STACK_DUMP_SIGNAL)
            time.sleep(STACK_DUMP_WAIT_S)
            killpg(launcher.pid)
            launcher.wait()
            return True

    @staticmethod
    def _outcome(rank: int, run_dir: Path, timed_out: bool) -> RankOutcome:
        outcome = RankOutcome(rank)
        report = run_dir / f"rank{rank}.report"
        if report.is_file() and report.stat().st_size:
            try:
                outcome.report = wire.decode(report.read_bytes())
                outcome.status = 0
            except wire.WireError as exc:
                outcome.report_problem = str(exc)
        else:
            outcome.report_problem = "no report"
            outcome.stopped = "deadline" if timed_out else ""
        output = CappedOutput()
        out_file = run_dir / f"rank{rank}.out"
        if out_file.is_file():
            output.add(out_file.read_bytes())
        outcome.output, outcome.output_dropped = output.text(), output.dropped
        stack = run_dir / f"rank{rank}.stack"
        if stack.is_file():
            outcome.stack_dump = stack.read_text(errors="replace")[-20000:]
        return outcome


def main(spec_file: str) -> None:
    """Inside one torchrun rank: become a grader rank, reporting into files of the run folder."""
    from grader.engine.rank_runtime import run_rank

    spec = json.loads(Path(spec_file).read_text())
    rank = int(os.environ["RANK"])
    if int(os.environ["WORLD_SIZE"]) != spec["world_size"]:
        raise SystemExit(f"torchrun started {os.environ['WORLD_SIZE']} ranks, the job wants {spec['world_size']}")
    run_dir = Path(spec["run_dir"])
    (run_dir / f"rank{rank}.pid").write_text(str(os.getpid()))
    out_fd = os.open(run_dir / f"rank{rank}.out", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    report_fd = os.open(run_dir / f"rank{rank}.report", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    run_rank({**spec, "rank": rank}, out_fd, report_fd)


if __name__ == "__main__":
    main(sys.argv[1])
