"""The warm template process: imports torch once, then forks fresh rank processes on request.

Importing torch and torch._dynamo costs seconds per process (DDP's lazy import of dynamo alone about
1.2 s: README, Design); forking a process that already holds them costs milliseconds, and every rank
still starts from a pristine state.
The zygote itself never runs student code and never computes with torch, so forking it is safe.

It is the only process that touches the ranks: it may live in a sandbox (its own PID and mount
namespaces) where the grader's PIDs and paths mean nothing, so the grader asks it to signal ranks,
and each run's folder is made and removed here. It is a child subreaper: whatever a rank starts,
however detached, ends up below it, and when the last rank of a run has exited it kills what is
left (`processes.sweep`) and names those processes in the run's `ended` event.

Protocol over a SOCK_SEQPACKET socket shared with the grader (one JSON message per packet):
  -> {"op": "spawn", "run": ID, "ranks": [SPEC, ...], "scratch": DIR}  three fds per rank
     (output, report, stack dump); DIR (or "") is a folder the run's checks share, made here
  -> {"op": "signal", "run": ID, "action": "stack" | "kill"}
  -> {"op": "discard", "path": DIR}  a grading's scratch folder is no longer needed
  <- {"event": "ready", "preload_errors": {...}}
  <- {"event": "started", "run": ID, "pids": [...]}
  <- {"event": "exited", "run": ID, "rank": R, "status": S}  (S: exit code, or -signal number)
  <- {"event": "ended", "run": ID, "strays": [{"pid", "command", "origin"}, ...]}
The next run may start once the previous one has ended. When the grader goes away the zygote
kills every process below it and exits: its line closes (or a message to it finds the line broken),
and a zygote the grader launched also dies with it (a parent-death signal). A zygote the warm daemon
launched (grader/warm.py) is handed to a check that is not its parent, so it has no parent-death
signal (UNTIED): it must not die with the daemon while a check runs on it, and its line ends it.
"""

from __future__ import annotations

import array
import json
import os
import resource
import selectors
import signal
import socket
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from grader.engine import preload, processes, run_folders
from grader.engine.contract import RankSpec
from grader.engine.platforms import STACK_DUMP_SIGNAL, UNTIED

_MAX_FDS = 3 * 256
STRAY_GRACE_S = 0.3  # a helper that ends by itself once its parent has (resource tracker) is no stray


@dataclass
class _Run:
    run_id: str
    run_dir: Path
    pgid: int = 0
    ranks: dict[int, int] = field(default_factory=dict)  # pid -> rank, while running


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _fork_rank(spec: RankSpec, fds: list[int], pgid: int, close_in_child: list[int]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, pgid)
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            for fd in close_in_child:
                os.close(fd)
            processes.prctl(processes.PR_SET_PDEATHSIG, signal.SIGKILL)
            processes.prctl(processes.PR_SET_DUMPABLE, 1)  # only the zygote hides its memory
            _limit(os.environ.get(processes.RANK_LIMITS_VARIABLE, ""))
            from grader.engine import rank_runtime

            out_fd, report_fd, stack_fd = fds
            rank_runtime.run_rank(spec, out_fd, report_fd, stack_fd)
        finally:
            os._exit(70)
    try:
        os.setpgid(pid, pgid or pid)
    except OSError:
        pass  # the child already did it, or has already exited
    return pid


FDS_PER_RANK = processes.FDS_PER_RANK


def _limit(spec: str) -> None:
    """Set a rank's rlimits, as the sandbox asked (grader/sandbox/limits.py)."""
    names = {
        "as": resource.RLIMIT_AS,
        "fsize": resource.RLIMIT_FSIZE,
        "nproc": resource.RLIMIT_NPROC,
        "nofile": resource.RLIMIT_NOFILE,
    }
    for item in filter(None, spec.split(",")):
        key, _, value = item.partition("=")
        resource.setrlimit(names[key], (int(value), int(value)))


class Zygote:
    """The ranks of at most one run at a time, and what happens to them."""

    def __init__(self, sock: socket.socket, scratch_root: Path, wakeup: tuple[int, int]) -> None:
        self.sock = sock
        self.scratch_root = scratch_root
        self.wakeup = wakeup  # the SIGCHLD wake-up pipe: no rank may keep it
        self.run: _Run | None = None

    def spawn(self, request: dict, fds: array.array) -> None:
        run_dir = run_folders.new_run(self.scratch_root, request.get("scratch", ""))
        run = _Run(request["run"], run_dir)
        pids = []
        specs: list[RankSpec] = request["ranks"]
        for rank, spec in enumerate(specs):
            own = list(fds[FDS_PER_RANK * rank : FDS_PER_RANK * (rank + 1)])
            # A rank holding a peer's pipe would hide that peer's death (no EOF): close them all.
            others = [fd for fd in fds if fd not in own]
            pid = _fork_rank(
                {**spec, "run_dir": str(run_dir)}, own, run.pgid, [self.sock.fileno(), *self.wakeup, *others]
            )
            run.pgid = run.pgid or pid
            run.ranks[pid] = rank
            pids.append(pid)
        for fd in fds:
            os.close(fd)
        self.run = run
        _send(self.sock, {"event": "started", "run": run.run_id, "pids": pids})

    def signal(self, request: dict) -> None:
        run = self.run
        if run is None or run.run_id != request.get("run"):
            return  # a late request for a run that has already ended
        if request.get("action") == "stack":
            assert STACK_DUMP_SIGNAL is not None  # POSIX has SIGUSR1, and a zygote forks: POSIX only
            for pid in run.ranks:
                processes.send_signal(pid, STACK_DUMP_SIGNAL)
        elif request.get("action") == "kill":
            for pid in run.ranks:
                processes.send_signal(pid, signal.SIGKILL)
            processes.killpg(run.pgid)

    def reap(self) -> None:
        for pid, status in processes.reap_all():
            run = self.run
            if run is not None and pid in run.ranks:
                _send(self.sock, {"event": "exited", "run": run.run_id, "rank": run.ranks.pop(pid), "status": status})
        if self.run is not None and not self.run.ranks:
            self._end(self.run)

    def _end(self, run: _Run) -> None:
        """Every rank has exited: stop what they left behind, say what it was, clean up."""
        self.run = None
        _send(self.sock, run_folders.ended(run.run_id, run.run_dir, processes.sweep(STRAY_GRACE_S)))


def serve(sock: socket.socket, modules: list[str], scratch_root: Path, tied: bool = True) -> NoReturn:
    """Serve the grader over `sock` until its line closes, then end every process below and exit.
    `tied`: die with the parent process too (see the module docstring)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if tied:
        processes.prctl(processes.PR_SET_PDEATHSIG, signal.SIGKILL)
    processes.prctl(processes.PR_SET_CHILD_SUBREAPER, 1)
    try:
        _serve(sock, modules, scratch_root)
    except (BrokenPipeError, ConnectionResetError):
        pass  # the grader went away while we told it something: the same end as a closed line
    processes.sweep(0.0)
    os._exit(0)  # nothing to flush; a normal shutdown with torch loaded takes a second


def _serve(sock: socket.socket, modules: list[str], scratch_root: Path) -> None:
    """Return when the grader closes its line."""
    processes.prctl(processes.PR_SET_DUMPABLE, 0)  # code under test (same user) cannot read or poke its memory
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"event": "ready", "preload_errors": preload.import_all(modules)})

    zygote = Zygote(sock, scratch_root, (wake_r, wake_w))
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "control")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                os.read(wake_r, 4096)
                zygote.reap()
                continue
            fds = array.array("i")
            message, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
            if not message:
                return
            request = json.loads(message)
            if request.get("op") == "spawn":
                zygote.spawn(request, fds)
                zygote.reap()
            elif request.get("op") == "signal":
                zygote.signal(request)
            elif request.get("op") == "discard":
                run_folders.discard(scratch_root, request.get("path", ""))


def main() -> None:
    fd = int(sys.argv[1])
    modules = json.loads(sys.argv[2])
    scratch_root = Path(sys.argv[3])
    scratch_root.mkdir(parents=True, exist_ok=True)
    serve(socket.socket(fileno=fd), modules, scratch_root, tied=UNTIED not in sys.argv[4:])


if __name__ == "__main__":
    main()
