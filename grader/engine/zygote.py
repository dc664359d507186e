"""The warm template process: imports torch once, then forks fresh rank processes on request.

Importing torch and torch._dynamo costs seconds per process (ENGINE_NOTES.md); forking a process
that already holds them costs milliseconds, and every rank still starts from a pristine state.
The zygote itself never runs student code and never computes with torch, so forking it is safe.

Protocol over a SOCK_SEQPACKET socket shared with the grader (one JSON message per packet):
  -> {"op": "spawn", "run": ID, "ranks": [SPEC, ...]}  with two fds per rank (output, report)
  <- {"event": "ready", "preload_errors": {...}}
  <- {"event": "started", "run": ID, "pids": [...], "pgid": PGID}
  <- {"event": "exited", "run": ID, "rank": R, "status": S}  (S: exit code, or -signal number)
Ranks of one run share a process group, which is killed once they have all exited so that
nothing a student started outlives its run. When the grader goes away the zygote kills every
group it started and exits.
"""

from __future__ import annotations

import array
import ctypes
import importlib
import json
import os
import selectors
import signal
import socket
import sys
from dataclasses import dataclass, field
from typing import NoReturn

from grader.engine.processes import killpg

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36
_MAX_FDS = 512


def prctl(option: int, value: int) -> None:
    """Linux prctl; a no-op where it is unavailable."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


@dataclass
class _Run:
    pgid: int
    ranks: dict[int, int] = field(default_factory=dict)  # pid -> rank


def _send(sock: socket.socket, message: dict) -> None:
    sock.send(json.dumps(message).encode())


def _preload(modules: list[str]) -> dict[str, str]:
    errors = {}
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:  # reported to the grader; the rank will fail on it visibly
            errors[name] = f"{type(exc).__name__}: {exc}"
    return errors


def _fork_rank(spec: dict, out_fd: int, report_fd: int, pgid: int, close_in_child: list[int]) -> int:
    pid = os.fork()
    if pid == 0:
        try:
            os.setpgid(0, pgid)
            signal.set_wakeup_fd(-1)
            for signum in (signal.SIGCHLD, signal.SIGINT, signal.SIGTERM):
                signal.signal(signum, signal.SIG_DFL)
            for fd in close_in_child:
                os.close(fd)
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            from grader.engine import rank_runtime

            rank_runtime.run_rank(spec, out_fd, report_fd)
        finally:
            os._exit(70)
    try:
        os.setpgid(pid, pgid or pid)
    except OSError:
        pass  # the child already did it, or has already exited
    return pid


def serve(sock: socket.socket, modules: list[str]) -> NoReturn:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    prctl(PR_SET_CHILD_SUBREAPER, 1)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _send(sock, {"event": "ready", "preload_errors": _preload(modules)})

    runs: dict[str, _Run] = {}
    selector = selectors.DefaultSelector()
    selector.register(sock, selectors.EVENT_READ, "control")
    selector.register(wake_r, selectors.EVENT_READ, "child")
    while True:
        for key, _ in selector.select():
            if key.data == "child":
                os.read(wake_r, 4096)
                _reap(sock, runs)
                continue
            fds = array.array("i")
            message, ancdata, _, _ = sock.recvmsg(1 << 20, socket.CMSG_SPACE(_MAX_FDS * fds.itemsize))
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[: len(data) - (len(data) % fds.itemsize)])
            if not message:
                _kill_all(runs)
                os._exit(0)  # nothing to flush; a normal shutdown with torch loaded takes a second
            request = json.loads(message)
            run_id = request["run"]
            pids: list[int] = []
            run = _Run(pgid=0)
            for rank, spec in enumerate(request["ranks"]):
                out_fd, report_fd = fds[2 * rank], fds[2 * rank + 1]
                # A rank holding a peer's pipe would hide that peer's death (no EOF): close them all.
                others = [fd for fd in fds if fd not in (out_fd, report_fd)]
                pid = _fork_rank(spec, out_fd, report_fd, run.pgid, [sock.fileno(), wake_r, wake_w, *others])
                run.pgid = run.pgid or pid
                run.ranks[pid] = rank
                pids.append(pid)
            for fd in fds:
                os.close(fd)
            runs[run_id] = run
            _send(sock, {"event": "started", "run": run_id, "pids": pids, "pgid": run.pgid})
            _reap(sock, runs)


def _reap(sock: socket.socket, runs: dict[str, _Run]) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        for run_id, run in list(runs.items()):
            if pid in run.ranks:
                code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
                _send(sock, {"event": "exited", "run": run_id, "rank": run.ranks.pop(pid), "status": code})
                if not run.ranks:
                    killpg(run.pgid)
                    del runs[run_id]
                break


def _kill_all(runs: dict[str, _Run]) -> None:
    for run in runs.values():
        killpg(run.pgid)


def main() -> None:
    fd = int(sys.argv[1])
    modules = json.loads(sys.argv[2])
    serve(socket.socket(fileno=fd), modules)


if __name__ == "__main__":
    main()
