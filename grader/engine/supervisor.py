"""The grader's side of the engine: start ranks, collect what they report, enforce the deadline.

The types it shares with the other launchers and its callers (Job, RunResult...) are in contract.py.

One `Engine` owns one launcher process: a zygote that forks ranks (Linux) or the portable warm pool
(pool.py; macOS, Windows, or forced), chosen in platforms.py and reached through launchers.py.
`Engine.run(job)` has it start `job.world_size` fresh ranks,
drains their output (capped, so a flood cannot stall anything), reads their reports, and returns a
`RunResult` of raw outcomes. It fails closed: a deadline, a rank that dies or raises, and its peers
stuck waiting for it all end in a result that says which rank, at which stage, and where. A run
ends when the zygote says so: its ranks have exited and every process they left behind has been
killed and named (`RunResult.strays`). Output a stray still holds open is cut after a short grace,
never waited on.

The zygote may run inside a sandbox (`Confinement`): then its PIDs and paths are not the grader's,
so the grader never signals a rank or reads a rank's files itself; it asks the zygote, and reads
only the streams of the run. A sandbox always uses the fork launcher: it is Linux-only, and its
network namespace could not reach the grader's loopback listener.
"""

from __future__ import annotations

import itertools
import json
import os
import selectors
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from grader.engine import wire
from grader.engine.contract import (
    STACK_DUMP_BYTES,
    STACK_DUMP_CHARS,
    CappedOutput,
    Confinement,
    EngineError,
    Job,
    RankOutcome,
    RankSpec,
    RunResult,
    StrayProcess,
)
from grader.engine.launchers import LauncherProcess, Link, RunStreams, ZygoteLink, new_link
from grader.engine.platforms import LauncherError, chosen_launcher
from grader.engine.preload import BASE_PRELOAD

PEER_FAILURE_GRACE_S = 1.0  # how long healthy ranks may go on after a peer failed
STACK_DUMP_WAIT_S = 0.25
EXIT_WAIT_S = 5.0  # after the ranks were killed, how long the zygote may take to end the run
OUTPUT_GRACE_S = 0.5  # after a run ended, how long output still held open by a stray is read
WARM_UP_S = 120.0  # the launcher's first import of torch, on a loaded machine


@dataclass
class _Live:
    """One rank while its run goes on. What it sends is held within fixed bounds, whatever it sends:
    its output's head and tail (CappedOutput), the last STACK_DUMP_BYTES of its stack dumps, and a
    report of at most wire.MAX_REPORT_BYTES (wire.ReportReader); the rest is read and let go."""

    outcome: RankOutcome
    trusted: bool = False  # the job loads no student code (wire.report_reader)
    output: CappedOutput = field(default_factory=CappedOutput)
    stack: bytearray = field(default_factory=bytearray)
    report: wire.ReportReader = field(init=False)

    def __post_init__(self) -> None:
        self.report = wire.report_reader(f"rank {self.outcome.rank}'s report", self.trusted)

    @property
    def failed(self) -> bool:
        """Reported a failure, or exited without a complete report."""
        if self.report.complete:
            return not self.decode().ok
        return self.outcome.status is not None

    def add_stack(self, data: bytes) -> None:
        self.stack += data
        del self.stack[:-STACK_DUMP_BYTES]  # the latest dumps: a flood of them holds no more

    def decode(self) -> RankOutcome:
        outcome = self.outcome
        if outcome.report is None and not outcome.report_problem:
            try:
                outcome.report = _checked_report(self.report.decode())
            except wire.WireError as exc:  # wire.NO_REPORT included: the rank sent nothing after its opening
                outcome.report_problem = str(exc)
        return outcome


@dataclass
class _RunState:
    run_id: str
    ranks: list[_Live]
    stop_at: float | None = None  # when the ranks still running are stopped after a peer failed
    killed_at: float | None = None
    timed_out: bool = False
    ended: dict[str, Any] | None = None
    ended_at: float = 0.0


def launcher_env() -> dict[str, str]:
    """The environment a launcher (zygote or pool) starts in: this one, with the grader importable."""
    package_root = str(Path(__file__).resolve().parents[2])
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [package_root, env.get("PYTHONPATH")]))
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


class Engine:
    """Runs jobs on fresh rank processes from one warm launcher (forked or from the portable pool).

    `launcher` ("fork" or "portable") overrides GRADER_LAUNCHER and the platform's default; a
    confined engine (a sandbox) always forks.
    """

    _ids = itertools.count()

    def __init__(
        self, preload: Iterable[str] = (), confinement: Confinement | None = None, launcher: str | None = None
    ) -> None:
        if confinement is not None and launcher == "portable":
            raise LauncherError("sandboxed grading starts ranks with the fork launcher (the sandbox is Linux-only)")
        self.launcher = "fork" if confinement is not None else chosen_launcher(launcher)[0]
        self._preload = list(dict.fromkeys([*BASE_PRELOAD, *preload]))
        self._confinement = confinement
        self._link: Link = new_link(self.launcher)
        self._process: LauncherProcess | None = None
        self._ready = False
        self._ready_at = 0.0  # when the launcher said it was ready (time.monotonic)
        self._serving = ""  # the run the launcher is running, as a report names it
        self._adopted = False  # its exit status is the warm daemon's, not ours
        self._lost = False  # the control channel broke or the zygote stopped answering
        self._log: IO[bytes] = tempfile.TemporaryFile()
        self._own_scratch = "" if confinement else tempfile.mkdtemp(prefix="grader-scratch-")
        self.scratch_root = confinement.scratch_root if confinement else self._own_scratch
        self.preload_errors: dict[str, str] = {}

    # --- lifecycle -------------------------------------------------------------------
    def start(self) -> None:
        """Start the launcher in the background; the first run waits for it to be warm."""
        if self._process is not None:
            return
        try:
            self._process = self._link.launch(
                [json.dumps(self._preload), self.scratch_root], launcher_env(), self._log, self._confinement
            )
        except OSError as exc:
            raise EngineError(f"cannot start the rank launcher: {exc}") from exc

    def adopt(self, sock: socket.socket, process: LauncherProcess, log: IO[bytes], scratch_root: str) -> None:
        """Take over a zygote another process of this user launched and warmed (grader/warm.py): its
        control socket, its process and its log; from here on it is this engine's, as if started here."""
        if self.launcher != "fork" or self._confinement is not None or self._process is not None:
            raise EngineError("only an unstarted, unconfined fork engine can adopt a zygote")
        assert isinstance(self._link, ZygoteLink)
        shutil.rmtree(self._own_scratch, ignore_errors=True)
        self._link.adopt(sock)
        self._process, self._log = process, log
        self._own_scratch = self.scratch_root = scratch_root
        self._adopted = True

    def wait_ready(self) -> None:
        if self._lost or (self._process is not None and self._process.poll() is not None):
            self.close(keep_scratch=True)  # the launcher died (killed by code under test?): a new one
        self.start()
        if not self._ready:
            assert self._process is not None
            try:
                self._link.connect(self._process, WARM_UP_S)
            except (TimeoutError, EOFError) as exc:
                self._lost = True
                raise EngineError(
                    f"the rank launcher never connected{self._how_it_ended()}:\n{self._zygote_log()}"
                ) from exc
            message = self._receive(timeout=WARM_UP_S)
            if message.get("event") != "ready":
                raise EngineError(f"unexpected first message from the rank launcher: {message}")
            self.preload_errors = message.get("preload_errors", {})
            self._ready, self._ready_at = True, time.monotonic()

    def wait_warm(self, timeout: float = 600.0) -> None:
        """Return once a run can start without waiting for its ranks: the zygote is ready, or the
        portable pool is full (benchmarks and timing tests measure runs, not refills)."""
        self.wait_ready()
        if self.launcher != "portable":
            return
        self._request({"op": "warm"})
        give_up = time.monotonic() + timeout
        while self._receive(timeout=max(0.0, give_up - time.monotonic())).get("event") != "warm":
            pass  # a late message about an earlier run

    def close(self, keep_scratch: bool = False) -> None:
        self._link.close()
        if self._process is not None:
            if not self._ready or self._lost:  # importing torch, or not answering: no need to wait
                self._process.kill()
            try:
                self._process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._process.kill()
                self._process.wait()
            self._process = None
        self._ready = False
        self._adopted = False
        self._lost = False
        if not keep_scratch:
            self._link.shutdown()
            if self._confinement is not None:
                self._confinement.close()
            if self._own_scratch:
                shutil.rmtree(self._own_scratch, ignore_errors=True)

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # --- scratch folders shared by the runs of one grading -------------------------------
    def new_scratch(self) -> str:
        """A folder name, as the ranks see it; the zygote makes it when a run first names it."""
        return f"{self.scratch_root}/grading-{next(self._ids)}"

    def discard_scratch(self, path: str) -> None:
        if self._ready and not self._lost:
            self._request({"op": "discard", "path": path})

    # --- control channel -------------------------------------------------------------
    def _zygote_log(self) -> str:
        self._log.seek(0)
        return self._log.read()[-4000:].decode(errors="replace")

    def _how_it_ended(self) -> str:
        try:
            code = self._process.wait(timeout=1.0) if self._process is not None else None
        except subprocess.TimeoutExpired:
            return ""
        if self._oom_kills():
            return " (killed: the submission's processes went over the sandbox's memory limit)"
        if self._adopted:
            return " (a zygote from the warm daemon: its exit status is the daemon's to read)"
        if code is not None and code < 0:
            return f" (killed by {signal.Signals(-code).name}: code under test may kill its parent)"
        return f" (exit code {code})" if code else ""

    def _when(self) -> str:
        """When its line ended, as measured here: how long after it was ready, and during which run."""
        if not self._ready:
            return ", before it was ready"
        during = f"during {self._serving}" if self._serving else "between runs"
        return f", {time.monotonic() - self._ready_at:.1f} s after it was ready, {during}"

    def _request(self, message: dict[str, Any], fds: Sequence[int] = ()) -> None:
        try:
            self._link.send(message, fds)
        except OSError as exc:
            self._lost = True
            raise EngineError(f"the rank launcher is gone: {exc}\n{self._zygote_log()}") from exc

    def _receive(self, timeout: float | None = None) -> dict[str, Any]:
        try:
            message = self._link.receive(timeout)
        except TimeoutError as exc:
            self._lost = True
            raise EngineError("the rank launcher did not answer in time") from exc
        except EOFError as exc:
            self._lost = True
            raise EngineError(
                f"the rank launcher stopped unexpectedly{self._how_it_ended()}{self._when()}:\n{self._zygote_log()}"
            ) from exc
        except OSError as exc:
            self._lost = True
            raise EngineError(f"the rank launcher's channel broke: {exc}") from exc
        except ValueError as exc:
            self._lost = True
            raise EngineError(f"the rank launcher sent a malformed message: {exc}") from exc
        if not isinstance(message, dict):
            self._lost = True
            raise EngineError("the rank launcher sent a malformed message")
        return message

    # --- one run ---------------------------------------------------------------------
    def run(self, job: Job) -> RunResult:
        result = self._run_once(job)
        if "MASTER_PORT" not in job.env and _lost_port_race(result):
            result = self._run_once(job)  # a port picked free up front was taken in between: retry once
        return result

    def _oom_kills(self) -> int:
        return self._confinement.oom_kills() if self._confinement is not None else 0

    def _run_once(self, job: Job) -> RunResult:
        self.wait_ready()
        run_id = f"run{next(self._ids)}"
        oom_before = self._oom_kills()
        asked = time.monotonic()
        self._serving = f"{run_id} ({job.target} on {job.world_size} ranks)"
        try:
            state, streams = self._spawn(run_id, job)
            try:
                self._await_start(state)
                started = time.monotonic()  # the deadline counts from here: a pool may have had to warm ranks
                self._supervise(job, state, streams, started)
            finally:
                streams.close()
        finally:
            self._serving = ""
        for live in state.ranks:
            self._finish(live)
        strays, count = _strays(state.ended)
        return RunResult(
            job,
            [live.outcome for live in state.ranks],
            time.monotonic() - started,
            state.timed_out,
            strays,
            count,
            self._oom_kills() > oom_before,
            started - asked,
        )

    def _spawn(self, run_id: str, job: Job) -> tuple[_RunState, RunStreams]:
        env = {"MASTER_ADDR": "127.0.0.1", **job.env}
        host_store = "MASTER_PORT" not in job.env  # rank 0 hosts the env:// store (rank_runtime)
        specs: list[RankSpec] = [
            {**job.rank_spec(env), "rank": rank, "host_store": host_store} for rank in range(job.world_size)
        ]
        streams = self._link.open_run(job.world_size)
        try:
            self._request(
                {"op": "spawn", "run": run_id, "ranks": specs, "scratch": job.scratch, **streams.spawn_fields},
                streams.to_pass,
            )
        except EngineError:
            streams.close()
            raise
        for fd in streams.to_pass:
            os.close(fd)
        streams.to_pass.clear()
        trusted = job.student_file is None
        return _RunState(run_id, [_Live(RankOutcome(rank), trusted) for rank in range(job.world_size)]), streams

    def _await_start(self, state: _RunState) -> None:
        while True:
            message = self._receive(timeout=self._link.start_timeout)
            if message.get("event") == "started" and message.get("run") == state.run_id:
                pids = message.get("pids")
                if isinstance(pids, list):
                    for live, pid in zip(state.ranks, pids):
                        live.outcome.pid = pid if isinstance(pid, int) else 0
                return
            if message.get("run") == state.run_id or message.get("event") not in ("exited", "ended"):
                raise EngineError(f"unexpected message from the rank launcher: {message}")
            # else: a late message about an earlier run; nothing waits for it any more

    def _supervise(self, job: Job, state: _RunState, streams: RunStreams, started: float) -> None:
        """Read the run's streams and the launcher's events until the run has ended and its
        streams are drained (a report until it is complete, output until its end)."""
        selector = selectors.DefaultSelector()
        open_streams: set[Any] = set()

        def admit(sources: dict[Any, tuple[str, int]]) -> None:
            for source, role in sources.items():
                selector.register(source, selectors.EVENT_READ, role)
                open_streams.add(source)

        admit(dict(streams.sources))
        if streams.listener is not None:
            selector.register(streams.listener, selectors.EVENT_READ, ("accept", -1))
        selector.register(self._link.selectable(), selectors.EVENT_READ, ("control", -1))
        deadline = started + job.deadline
        try:
            while True:
                while self._link.pending():
                    self._on_control(state)
                now = time.monotonic()
                if state.ended is not None:
                    admit(streams.admit())  # a rank that connected, wrote and exited before we looked
                if state.ended is not None and (not open_streams or now >= state.ended_at + OUTPUT_GRACE_S):
                    return
                if state.ended is None:
                    if state.killed_at is not None and now >= state.killed_at + EXIT_WAIT_S:
                        self._abandon()
                        return
                    if state.killed_at is None and now >= deadline:
                        state.timed_out = True
                        self._stop(state, "deadline")
                    elif state.killed_at is None and state.stop_at is not None and now >= state.stop_at:
                        self._stop(state, "peer failure")
                wait = 0.0 if self._link.pending() else max(0.0, self._next_wake(state, deadline) - time.monotonic())
                for key, _ in selector.select(wait):
                    role, rank = key.data
                    if role == "control":
                        self._on_control(state)
                        continue
                    if role == "accept":
                        admit(streams.admit())
                        continue
                    data = streams.read(key.fileobj)
                    if not data:
                        selector.unregister(key.fileobj)
                        open_streams.discard(key.fileobj)
                        continue
                    live = state.ranks[rank]
                    if role == "output":
                        live.output.add(data)
                    elif role == "stack":
                        live.add_stack(data)
                    else:
                        live.report.add(data)
                        if live.report.complete:
                            open_streams.discard(key.fileobj)  # a stray holding it cannot hold the run
                        self._note_failure(state, live)
        finally:
            selector.close()

    @staticmethod
    def _next_wake(state: _RunState, deadline: float) -> float:
        if state.ended is not None:
            return state.ended_at + OUTPUT_GRACE_S
        if state.killed_at is not None:
            return state.killed_at + EXIT_WAIT_S
        return min(deadline, state.stop_at) if state.stop_at is not None else deadline

    @staticmethod
    def _note_failure(state: _RunState, live: _Live) -> None:
        if state.stop_at is None and state.killed_at is None and live.failed:
            state.stop_at = time.monotonic() + PEER_FAILURE_GRACE_S

    def _on_control(self, state: _RunState) -> None:
        message = self._receive(timeout=5.0)
        if message.get("run") != state.run_id:
            return  # a late message about an earlier run
        if message.get("event") == "exited":
            rank = message.get("rank")
            if isinstance(rank, int) and 0 <= rank < len(state.ranks):
                state.ranks[rank].outcome.status = int(message.get("status", -1))
                self._note_failure(state, state.ranks[rank])
        elif message.get("event") == "ended":
            state.ended, state.ended_at = message, time.monotonic()

    def _stop(self, state: _RunState, reason: str) -> None:
        """Have the zygote dump the Python stack of every rank still running, then kill them."""
        for live in state.ranks:
            if live.outcome.status is None and not live.report.complete:
                live.outcome.stopped = reason
        self._request({"op": "signal", "run": state.run_id, "action": "stack"})
        time.sleep(STACK_DUMP_WAIT_S)
        self._request({"op": "signal", "run": state.run_id, "action": "kill"})
        state.killed_at = time.monotonic()

    def _abandon(self) -> None:
        """The zygote did not end a run it was told to kill: it is stuck or stopped. Kill it
        (with its sandbox, everything in it); the next run starts a new one."""
        self._lost = True
        if self._process is not None:
            self._process.kill()

    def _finish(self, live: _Live) -> None:
        outcome = live.decode()
        late = live.report.bytes_after()  # read after the report was decoded: a process the rank left wrote them
        if late and outcome.report is not None:
            outcome.report, outcome.report_problem = None, late
        live.outcome.output = live.output.text()
        live.outcome.output_dropped = live.output.dropped
        live.outcome.stack_dump = bytes(live.stack).decode(errors="replace")[-STACK_DUMP_CHARS:]


def _checked_report(report: Any) -> dict[str, Any]:
    """A report in the shape judges read (facts a dict, error None or a dict of plain fields),
    or WireError: a rank runs untrusted code and may send anything that decodes."""
    if not isinstance(report, dict) or not isinstance(report.get("facts", {}), dict):
        raise wire.WireError("the report is not a mapping of facts")
    error = report.get("error")
    if error is None:
        return report
    if not isinstance(error, dict):
        raise wire.WireError("the report's error is not a mapping")
    frames = error.get("student_frames") or []
    if not isinstance(frames, list) or not all(isinstance(f, dict) for f in frames):
        raise wire.WireError("the report's student frames are malformed")
    clean: dict[str, Any] = {
        key: str(error.get(key, ""))[:20000] for key in ("type", "message", "grader_message", "traceback")
    }
    clean.update(
        not_implemented=error.get("not_implemented") is True,
        student_load_error=error.get("student_load_error") is True,
        student_frames=[
            {
                "file": str(f.get("file", "")),
                "line": f.get("line") if isinstance(f.get("line"), int) else 0,
                "function": str(f.get("function", "")),
                "code": str(f.get("code", "")),
            }
            for f in frames[:100]
        ],
    )
    chain = error.get("chain")
    if isinstance(chain, list):  # the errors it was raised from, which the judge searches too (explain.py)
        clean["chain"] = [
            {key: str(link.get(key, ""))[:4000] for key in ("type", "message", *(("who",) if "who" in link else ()))}
            for link in chain[:20]
            if isinstance(link, dict)
        ]
    phase = _checked_phase(error.get("phase"))
    if phase:
        clean["phase"] = phase
    return {**report, "error": clean}


def _checked_phase(phase: Any) -> dict[str, Any]:
    """A reported error's phase (rank_runtime.describe_exception) as plain, short values, or {}: wording for the
    judge, which never reads it as more than what the rank said."""
    if not isinstance(phase, dict):
        return {}
    calls = phase.get("calls")
    steps = phase.get("steps")
    checked: dict[str, Any] = {"calls": [str(c)[:300] for c in calls[:8]] if isinstance(calls, list) else []}
    if type(steps) is int and 0 <= steps < 10**9:
        checked["steps"] = steps
    if phase.get("by") in ("student", "grader"):
        checked["by"] = phase["by"]
    return checked


def _strays(ended: dict[str, Any] | None) -> tuple[list[StrayProcess], int]:
    """The strays the zygote named, read defensively (in a sandbox the zygote is not trusted)."""
    if not ended or not isinstance(ended.get("strays"), list):
        return [], 0
    strays = []
    for entry in ended["strays"][:50]:
        if isinstance(entry, dict) and isinstance(entry.get("pid"), int):
            strays.append(
                StrayProcess(entry["pid"], str(entry.get("command", ""))[:200], str(entry.get("origin", ""))[:300])
            )
    count = ended.get("stray_count")
    return strays, max(count, len(strays)) if isinstance(count, int) else len(strays)


def _lost_port_race(result: RunResult) -> bool:
    """True if a rank failed to listen on a port: one picked free up front (ex07's torchrun
    rendezvous) or chosen by the code under test. The grader's own env:// store cannot collide."""
    texts = [f"{(rank.error or {}).get('message', '')} {rank.output}" for rank in result.ranks]
    return any("EADDRINUSE" in text or "ddress already in use" in text for text in texts)


def free_port() -> int:
    """A port nobody holds right now, for launchers that need one up front (torchrun's static
    rendezvous). Another process may take it before it is bound: prefer a port held from the start."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]
