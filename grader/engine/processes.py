"""Finding and stopping processes: the engine's only way to end anything.

A rank may start processes that leave its process group (`start_new_session=True`, `setsid`, a
double fork). Whoever starts ranks is a child subreaper, so such processes are re-parented to it
when their parent dies; `sweep` then finds them among its own children, names them, and kills
them, over and over until none is left (killing a stray re-parents its own children).

Linux only (prctl, /proc); what other systems do instead is in platforms.py.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import time
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
COMMAND_CHARS = 200
SWEEP_ROUNDS = 200
FDS_PER_RANK = 3  # streams a zygote gets for each rank it forks: output, report, stack dump
MULTIPROCESSING_HELPERS = (
    "from multiprocessing.resource_tracker import main",
    "from multiprocessing.forkserver import main",
)
RANK_LIMITS_VARIABLE = "GRADER_RANK_LIMITS"  # "fsize=BYTES,nofile=N,as=BYTES,nproc=N": rlimits the zygote sets on ranks


@dataclass(frozen=True)
class Stray:
    """A process the code under test left running; it was killed."""

    pid: int
    command: str

    def to_json(self) -> dict[str, object]:
        return {"pid": self.pid, "command": self.command}


def prctl(option: int, value: int) -> None:
    """Linux prctl; a no-op elsewhere."""
    if not sys.platform.startswith("linux"):
        return
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def send_signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_process(pid: int) -> None:
    """Kill one process, which may already be gone (SIGKILL; on Windows, TerminateProcess)."""
    send_signal(pid, getattr(signal, "SIGKILL", signal.SIGTERM))


def child_state(pid: int) -> str:
    """ "running", "unreaped" (exited, never waited for: a zombie) or "gone", for a process this one
    started (or one further down: then only running or gone). It never reaps: whoever started the
    process still can. Portable: waitid(WNOWAIT) on POSIX, the process handle on Windows."""
    if os.name == "nt":
        return "running" if _windows_running(pid) else "gone"
    if hasattr(os, "waitid"):
        try:
            exited = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            pass  # not a child of this process: it can only be seen to exist
        else:
            return "running" if exited is None else "unreaped"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "gone"
    except PermissionError:
        pass
    return "running"


def _windows_running(pid: int) -> bool:
    kernel32 = ctypes.WinDLL("kernel32")  # type: ignore[attr-defined]  # Windows only
    handle = kernel32.OpenProcess(0x1000, False, pid)  # PROCESS_QUERY_LIMITED_INFORMATION
    if not handle:
        return False
    try:
        code = ctypes.c_ulong()
        return bool(kernel32.GetExitCodeProcess(handle, ctypes.byref(code))) and code.value == 259  # STILL_ACTIVE
    finally:
        kernel32.CloseHandle(handle)


def killpg(pgid: int) -> None:
    """Kill a process group, which may already be gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def children(pid: int | None = None) -> list[int]:
    """The processes whose parent is `pid` (default: this one), zombies included."""
    pid = os.getpid() if pid is None else pid
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return []  # gone
    found: list[int] = []
    for task in tasks:
        try:
            found += [int(child) for child in (task / "children").read_text().split()]
        except FileNotFoundError:
            if task.exists():  # the thread is there but the file is not: no CONFIG_PROC_CHILDREN
                return _children_by_scan(pid)
        except OSError:
            continue
    return found


def _children_by_scan(pid: int) -> list[int]:
    """Fallback where /proc/PID/task/TID/children is missing (a kernel without CONFIG_PROC_CHILDREN)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat[stat.rfind(")") + 2 :].split()
            if len(fields) > 1 and int(fields[1]) == pid:
                found.append(int(entry.name))
    return found


def command_line(pid: int) -> str:
    """What a process is running, as `ps` would show it (empty if it is gone)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return ""
    text = raw.rstrip(b"\0").replace(b"\0", b" ").decode(errors="replace")
    if not text:  # a kernel thread or a process between fork and exec: use its name
        try:
            text = Path(f"/proc/{pid}/comm").read_text().strip()
        except OSError:
            return ""
    return text[:COMMAND_CHARS]


def reap_all() -> list[tuple[int, int]]:
    """Collect every child that has exited: [(pid, status as exit code or -signal)]."""
    reaped: list[tuple[int, int]] = []
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return reaped
        if pid == 0:
            return reaped
        reaped.append((pid, -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)))


def _descendants(roots: list[int]) -> list[int]:
    found, queue = [], list(roots)
    while queue:
        pid = queue.pop()
        found.append(pid)
        queue += children(pid)
    return found


def _alive(pid: int) -> bool:
    """Running, as opposed to gone or a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2 :][:1] not in ("Z", "X")


def _reap(spare: Collection[int]) -> None:
    """Collect exited children, never one of `spare` (whose owner waits for it itself)."""
    if not spare:
        reap_all()
        return
    for pid in children():
        if pid not in spare:
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass


def sweep(grace: float, poll: float = 0.01, spare: Collection[int] = frozenset()) -> list[Stray]:
    """Kill every process this (subreaper) process still has below it, except its children in
    `spare` and what is below them; return what was running.

    Processes that end by themselves within `grace` seconds are not strays, nor are the helpers
    multiprocessing itself starts and ends (its resource tracker, its forkserver), which exit once
    their parent has, but may take longer than the grace on a loaded machine: killed, not named.
    Command lines are read before the grace, while no process is half-way through exiting. Every
    other child that exits is reaped here, so call this only when no such child is still expected
    to report.
    """

    def below() -> list[int]:
        return [pid for pid in children() if pid not in spare]

    commands = {pid: command_line(pid) for pid in _descendants(below()) if _alive(pid)}
    give_up = time.monotonic() + grace
    while any(_alive(pid) for pid in below()) and time.monotonic() < give_up:
        _reap(spare)
        time.sleep(poll)
    _reap(spare)
    strays: dict[int, Stray] = {}
    for _ in range(SWEEP_ROUNDS):
        living = [pid for pid in _descendants(below()) if _alive(pid)]
        if not living:
            break
        for pid in living:
            command = commands.get(pid) or command_line(pid)
            if not any(helper in command for helper in MULTIPROCESSING_HELPERS):
                strays.setdefault(pid, Stray(pid, command))
            send_signal(pid, signal.SIGKILL)
        time.sleep(poll)  # their children are re-parented to us: the next round finds them
        _reap(spare)
    _reap(spare)
    return list(strays.values())
