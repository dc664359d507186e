"""The grader's side of the engine: start ranks, collect what they report, enforce the deadline.

One `Engine` owns one zygote. `Engine.run(job)` forks `job.world_size` fresh ranks from it, drains
their output (capped, so a flood cannot stall anything), reads their reports, and returns a
`RunResult` of raw outcomes. It fails closed: a deadline, a rank that dies or raises, and its
peers stuck waiting for it all end in a result that says which rank, at which stage, and where;
the whole process group of the run is killed before `run` returns.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from grader.engine import wire
from grader.engine.rank_runtime import STACK_DUMP_SIGNAL
from grader.engine.processes import killpg, send_signal

# Imported by the zygote before it forks anything: the expensive part of every rank's start-up.
BASE_PRELOAD = (
    "numpy",
    "torch",
    "torch.distributed",
    "torch.nn.parallel",
    "torch.multiprocessing",
    "torch._dynamo",
    "torch.distributed.fsdp",
    "grader.engine.rank_runtime",
)
PEER_FAILURE_GRACE_S = 1.0  # how long healthy ranks may go on after a peer failed
STACK_DUMP_WAIT_S = 0.25
EXIT_WAIT_S = 3.0
OUTPUT_HEAD = OUTPUT_TAIL = 16 * 1024
MAX_REPORT_BYTES = 64 * 1024 * 1024


class EngineError(RuntimeError):
    """The engine itself failed (not the code under test)."""


@dataclass(frozen=True)
class Job:
    """One run: `target` ("module:function") called on each of `world_size` fresh ranks."""

    target: str
    world_size: int
    kwargs: dict[str, Any] = field(default_factory=dict)
    student_file: Path | None = None
    backend: str = "gloo"
    deadline: float = 30.0
    env: dict[str, str] = field(default_factory=dict)
    # TORCH_DISTRIBUTED_DEBUG=DETAIL: mismatched collectives fail at once instead of hanging.
    # Off for DDP: in torch 2.13 DDP over the DETAIL wrapper process group segfaults.
    debug_collectives: bool = True

    def rank_spec(self, run_dir: Path, env: dict[str, str]) -> dict[str, Any]:
        """What `rank_runtime.run_rank` needs, less the rank itself (the launcher adds it)."""
        return {
            "world_size": self.world_size,
            "backend": self.backend,
            "target": self.target,
            "kwargs": self.kwargs,
            "student_file": str(self.student_file.resolve()) if self.student_file else None,
            "run_dir": str(run_dir),
            "env": env,
            "collective_timeout": max(2.0, self.deadline - 2.0),
            "debug_collectives": self.debug_collectives,
        }


class CappedOutput:
    """Keeps the first and last bytes of a stream and counts what it dropped in between."""

    def __init__(self, head: int = OUTPUT_HEAD, tail: int = OUTPUT_TAIL) -> None:
        self._head_limit, self._tail_limit = head, tail
        self._head = bytearray()
        self._tail = bytearray()
        self.dropped = 0

    def add(self, data: bytes) -> None:
        room = self._head_limit - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        excess = len(self._tail) - self._tail_limit
        if excess > 0:
            del self._tail[:excess]
            self.dropped += excess

    def text(self) -> str:
        middle = f"\n[... {self.dropped} bytes of output not shown ...]\n" if self.dropped else ""
        return (bytes(self._head).decode(errors="replace") + middle
                + bytes(self._tail).decode(errors="replace"))


@dataclass
class RankOutcome:
    """Everything known about one rank after its run: raw facts, no judgement."""

    rank: int
    pid: int = 0
    report: dict[str, Any] | None = None
    report_problem: str = ""
    status: int | None = None  # exit code, or -signal; None if it was never seen to exit
    output: str = ""
    output_dropped: int = 0
    stack_dump: str = ""
    stopped: str = ""  # "deadline" or "peer failure" when the grader killed it

    @property
    def facts(self) -> dict[str, Any]:
        return (self.report or {}).get("facts") or {}

    @property
    def error(self) -> dict[str, Any] | None:
        return (self.report or {}).get("error")

    @property
    def ok(self) -> bool:
        return self.report is not None and self.error is None


@dataclass
class RunResult:
    job: Job
    ranks: list[RankOutcome]
    seconds: float
    timed_out: bool

    @property
    def ok(self) -> bool:
        return all(rank.ok for rank in self.ranks)


@dataclass
class _Live:
    outcome: RankOutcome
    output: CappedOutput = field(default_factory=CappedOutput)
    report: bytearray = field(default_factory=bytearray)
    open_pipes: int = 2

    @property
    def finished(self) -> bool:
        return self.open_pipes == 0 and self.outcome.status is not None


class Engine:
    """Runs jobs on fresh rank processes forked from one warm zygote."""

    _ids = itertools.count()
    scratch_root: Path | None = None  # where checks' scratch folders go (None: the system's temp folder)

    def __init__(self, preload: Iterable[str] = ()) -> None:
        self._preload = list(dict.fromkeys([*BASE_PRELOAD, *preload]))
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._ready = False
        self._lost = False  # the control socket broke: the zygote is gone or going
        self._log = tempfile.TemporaryFile()
        self.preload_errors: dict[str, str] = {}

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Start the zygote in the background; the first run waits for it to be warm."""
        if self._process is not None:
            return
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        package_root = str(Path(__file__).resolve().parents[2])
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
        env.setdefault("OMP_NUM_THREADS", "1")
        self._process = subprocess.Popen(
            [sys.executable, "-m", "grader.engine.zygote", str(theirs.fileno()), json.dumps(self._preload)],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=self._log,
            env=env,
        )
        theirs.close()
        self._sock = ours

    def wait_ready(self) -> None:
        if self._lost or (self._process is not None and self._process.poll() is not None):
            self.close()  # the zygote died (killed by code under test?): the next run gets a new one
        self.start()
        if not self._ready:
            message = self._receive(timeout=120.0)
            if message.get("event") != "ready":
                raise EngineError(f"unexpected first message from the rank launcher: {message}")
            self.preload_errors = message.get("preload_errors", {})
            self._ready = True

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if self._process is not None:
            if not self._ready:  # still importing torch, nothing started yet: no need to wait
                self._process.kill()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        self._ready = False
        self._lost = False

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- control channel -------------------------------------------------------------
    def _zygote_log(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:].decode(errors="replace")

    def _receive(self, timeout: float | None = None) -> dict[str, Any]:
        assert self._sock is not None
        self._sock.settimeout(timeout)
        try:
            data = self._sock.recv(1 << 16)
        except TimeoutError as exc:
            raise EngineError("the rank launcher did not answer in time") from exc
        finally:
            self._sock.settimeout(None)
        if not data:
            self._lost = True
            raise EngineError(f"the rank launcher stopped unexpectedly:\n{self._zygote_log()}")
        return json.loads(data)

    # --- one run ---------------------------------------------------------------------
    def run(self, job: Job) -> RunResult:
        result = self._run_once(job)
        if "MASTER_PORT" not in job.env and _lost_port_race(result):
            result = self._run_once(job)  # a port picked free up front was taken in between: retry once
        return result

    def _run_once(self, job: Job) -> RunResult:
        self.wait_ready()
        assert self._sock is not None
        run_id = f"run{next(self._ids)}"
        started = time.monotonic()
        with tempfile.TemporaryDirectory(prefix="grader-run-") as run_dir:
            ranks, pipes = self._spawn(run_id, job, Path(run_dir))
            pgid = self._await_start(run_id, ranks)
            try:
                timed_out = self._supervise(job, ranks, pipes, started)
            finally:
                killpg(pgid)
                for fd in pipes:
                    _close_quietly(fd)
            self._await_exits(ranks)
            for live in ranks:
                self._finish(live, Path(run_dir))
        return RunResult(job, [live.outcome for live in ranks], time.monotonic() - started, timed_out)

    def _spawn(self, run_id: str, job: Job, run_dir: Path) -> tuple[list[_Live], dict[int, tuple[str, int]]]:
        env = {"MASTER_ADDR": "127.0.0.1", **job.env}
        host_store = "MASTER_PORT" not in job.env  # rank 0 hosts the env:// store (rank_runtime)
        specs, send_fds, child_ends = [], [], []
        pipes: dict[int, tuple[str, int]] = {}
        for rank in range(job.world_size):
            out_r, out_w = os.pipe()
            rep_r, rep_w = os.pipe()
            pipes[out_r] = ("output", rank)
            pipes[rep_r] = ("report", rank)
            send_fds += [out_w, rep_w]
            child_ends += [out_w, rep_w]
            specs.append({**job.rank_spec(run_dir, env), "rank": rank, "host_store": host_store})
        message = json.dumps({"op": "spawn", "run": run_id, "ranks": specs}).encode()
        try:
            socket.send_fds(self._sock, [message], send_fds)
        except OSError as exc:
            self._lost = True
            raise EngineError(f"the rank launcher is gone: {exc}\n{self._zygote_log()}") from exc
        finally:
            for fd in child_ends:
                os.close(fd)
        return [_Live(RankOutcome(rank)) for rank in range(job.world_size)], pipes

    def _await_start(self, run_id: str, ranks: list[_Live]) -> int:
        message = self._receive(timeout=30.0)
        if message.get("event") != "started" or message.get("run") != run_id:
            raise EngineError(f"unexpected message from the rank launcher: {message}")
        for live, pid in zip(ranks, message["pids"]):
            live.outcome.pid = pid
        return int(message["pgid"])

    def _supervise(self, job: Job, ranks: list[_Live], pipes: dict[int, tuple[str, int]], started: float) -> bool:
        selector = selectors.DefaultSelector()
        for fd, role in pipes.items():
            selector.register(fd, selectors.EVENT_READ, role)
        selector.register(self._sock, selectors.EVENT_READ, ("control", -1))
        deadline = started + job.deadline
        stop_at: float | None = None
        timed_out = False
        try:
            while not all(live.finished for live in ranks):
                now = time.monotonic()
                if now >= deadline and not timed_out:
                    timed_out = True
                    self._stop_live(ranks, "deadline")
                    deadline = now + EXIT_WAIT_S  # only waits for the killed ranks to be reaped
                elif stop_at is not None and now >= stop_at:
                    stop_at = None
                    self._stop_live(ranks, "peer failure")
                elif now >= deadline:
                    break
                wake = min(deadline, stop_at) if stop_at is not None else deadline
                for key, _ in selector.select(max(0.0, wake - time.monotonic())):
                    role, rank = key.data
                    if role == "control":
                        self._on_control(ranks)
                        continue
                    live = ranks[rank]
                    data = _read(key.fd)
                    if data:
                        if role == "output":
                            live.output.add(data)
                        elif len(live.report) < MAX_REPORT_BYTES:
                            live.report += data
                        continue
                    selector.unregister(key.fd)
                    live.open_pipes -= 1
                    if role == "report" and stop_at is None and not timed_out:
                        if not self._decode_report(live).ok:
                            stop_at = time.monotonic() + PEER_FAILURE_GRACE_S
        finally:
            selector.close()
        return timed_out

    def _on_control(self, ranks: list[_Live], timeout: float = 5.0) -> None:
        message = self._receive(timeout=timeout)
        if message.get("event") == "exited":
            ranks[message["rank"]].outcome.status = int(message["status"])

    def _stop_live(self, ranks: list[_Live], reason: str) -> None:
        """Ask every rank still running for its Python stack, then kill the run's group."""
        live = [r for r in ranks if r.outcome.status is None and r.outcome.report is None]
        for rank in live:
            rank.outcome.stopped = reason
            send_signal(rank.outcome.pid, STACK_DUMP_SIGNAL)
        time.sleep(STACK_DUMP_WAIT_S)
        for rank in ranks:
            if rank.outcome.status is None:
                send_signal(rank.outcome.pid, signal.SIGKILL)

    def _await_exits(self, ranks: list[_Live]) -> None:
        give_up = time.monotonic() + EXIT_WAIT_S
        while any(r.outcome.status is None for r in ranks) and time.monotonic() < give_up:
            try:
                self._on_control(ranks, timeout=max(0.01, give_up - time.monotonic()))
            except EngineError:
                break

    def _decode_report(self, live: _Live) -> RankOutcome:
        outcome = live.outcome
        if outcome.report is None and not outcome.report_problem:
            if not live.report:
                outcome.report_problem = "no report"
            else:
                try:
                    outcome.report = wire.decode(bytes(live.report))
                except wire.WireError as exc:
                    outcome.report_problem = str(exc)
        return outcome

    def _finish(self, live: _Live, run_dir: Path) -> None:
        self._decode_report(live)
        live.outcome.output = live.output.text()
        live.outcome.output_dropped = live.output.dropped
        stack_file = run_dir / f"rank{live.outcome.rank}.stack"
        if stack_file.exists():
            live.outcome.stack_dump = stack_file.read_text(errors="replace")[-20000:]


def _lost_port_race(result: RunResult) -> bool:
    """True if a rank failed to listen on a port: one picked free up front (ex07's torchrun
    rendezvous) or chosen by the code under test. The grader's own env:// store cannot collide."""
    texts = [f"{(rank.error or {}).get('message', '')} {rank.output}" for rank in result.ranks]
    return any("EADDRINUSE" in text or "ddress already in use" in text for text in texts)


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, 1 << 16)
    except OSError:
        return b""


def _close_quietly(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def free_port() -> int:
    """A port nobody holds right now, for launchers that need one up front (torchrun's static
    rendezvous). Another process may take it before it is bound: prefer a port held from the start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
