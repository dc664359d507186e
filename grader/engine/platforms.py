"""Everything the engine does differently per operating system, in one place.

The fork launcher forks ranks from a warm zygote: fast, and on Linux safe. Where forking a process
that has imported torch is fragile (macOS: system frameworks may have started threads) or
impossible (native Windows), the portable launcher starts a warm pool of interpreters instead
(pool.py), and every call it makes that differs by system is here:

| | Linux | macOS | Windows |
|---|---|---|---|
| a member's processes | its own session | its own session | a job object of its own |
| stack dump on request | SIGUSR1 (faulthandler) | SIGUSR1 (faulthandler) | a command line, read by a thread |
| stop a rank | SIGKILL to its group | SIGKILL to its group | TerminateJobObject |
| strays found | subreaper: all, however detached | its group + what Python started | the job: all |
| launcher gone | PDEATHSIG, and its commands end | its commands end | the job closes (kill on close) |
"""

from __future__ import annotations

import ctypes
import faulthandler
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from grader.engine import processes, spawn_log
from grader.engine.processes import Stray

LAUNCHER_VARIABLE = "GRADER_LAUNCHER"  # "fork" or "portable": overrides the choice by platform
LAUNCHERS = ("fork", "portable")
STACK_DUMP_SIGNAL: signal.Signals | None = getattr(signal, "SIGUSR1", None)  # none on Windows
STACK_COMMAND = b"stack\n"  # where there is no signal for it, a member dumps its stacks on this line
IS_WINDOWS = sys.platform == "win32"
IS_LINUX = sys.platform.startswith("linux")
UNTIED = "--untied"  # the last argument of a zygote that must outlive its parent, the warm daemon (zygote.py)


class LauncherError(ValueError):
    """A launcher was asked for that cannot run here."""


def fork_is_safe() -> bool:
    """Whether this platform can fork a process that has imported torch, reliably."""
    return IS_LINUX and hasattr(os, "fork")


def chosen_launcher(requested: str | None = None) -> tuple[str, str]:
    """The launcher to use here, and why: (name, reason). `requested` (a command-line option)
    wins over GRADER_LAUNCHER, which wins over the platform's default."""
    forced = requested or os.environ.get(LAUNCHER_VARIABLE, "").strip()
    source = f"--launcher {forced}" if requested else f"{LAUNCHER_VARIABLE}={forced}"
    if forced:
        if forced not in LAUNCHERS:
            raise LauncherError(f"{source}: the launchers are {', '.join(LAUNCHERS)}")
        if forced == "fork" and not hasattr(os, "fork"):
            raise LauncherError(f"{source}: this platform ({sys.platform}) cannot fork")
        return forced, source
    if fork_is_safe():
        return "fork", f"{sys.platform}: ranks are forked from a warm zygote"
    return (
        "portable",
        f"{sys.platform}: forking after importing torch is unsafe or impossible here, so ranks "
        "come from a warm pool of interpreters",
    )


# --- the portable launcher's pool host: starting, signalling and ending members -------------------


@dataclass
class Member:
    """One interpreter of the pool, as the operating system knows it."""

    popen: subprocess.Popen[bytes]
    job: int = 0  # Windows: the job object holding it and everything it starts

    @property
    def pid(self) -> int:
        return self.popen.pid


def become_reaper() -> None:
    """The pool host adopts what its members leave behind, and dies with the grader (Linux; elsewhere
    it ends when its line to the grader closes). Ctrl-C is the grader's to handle, as the zygote's."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if IS_LINUX:
        processes.prctl(processes.PR_SET_CHILD_SUBREAPER, 1)
        processes.prctl(processes.PR_SET_PDEATHSIG, signal.SIGKILL)


def start_member(argv: list[str], env: dict[str, str]) -> Member:
    """A new interpreter with a command pipe (stdin) and a ready pipe (stdout), its errors on the
    host's, in a process group (POSIX) or job object (Windows) of its own."""
    if IS_WINDOWS:
        # Windows-only names: mypy checks for the platform it runs on
        flags = subprocess.CREATE_NEW_PROCESS_GROUP | subprocess.CREATE_NO_WINDOW  # type: ignore[attr-defined]
        popen = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, creationflags=flags)
        return Member(popen, _windows_job(popen.pid))
    return Member(
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, start_new_session=True)
    )


def request_stacks(member: Member) -> None:
    """Have a rank write every thread's Python stack to its stack stream."""
    if STACK_DUMP_SIGNAL is not None:
        processes.send_signal(member.pid, STACK_DUMP_SIGNAL)
        return
    try:
        assert member.popen.stdin is not None
        member.popen.stdin.write(STACK_COMMAND)
        member.popen.stdin.flush()
    except (OSError, ValueError):
        pass  # it has exited


def kill_member(member: Member) -> None:
    """Stop a member at once, with every process it started that is still in its group or job."""
    if IS_WINDOWS:
        _kernel32().TerminateJobObject(member.job, 1)
        return
    processes.killpg(member.pid)
    processes.send_signal(member.pid, signal.SIGKILL)


def end_strays(run_members: Sequence[Member], spare: Iterable[int], run_dir: Path, grace: float) -> list[Stray]:
    """Once a run's members have exited: kill what they left running, and say what it was.
    `spare` are the pool's other members (never touched); processes that end by themselves
    within `grace` seconds are not strays."""
    if IS_WINDOWS:
        return _windows_strays(run_members, grace)
    if IS_LINUX:
        return processes.sweep(grace, spare=frozenset(spare))
    return posix_strays({m.pid for m in run_members}, set(spawn_log.read(run_dir)), grace)


def release_member(member: Member) -> None:
    """Free what is held for a member that has ended: its command pipe, its job object."""
    if member.popen.stdin is not None:
        try:
            member.popen.stdin.close()
        except OSError:
            pass
    if IS_WINDOWS and member.job:
        _kernel32().CloseHandle(member.job)
        member.job = 0


# --- inside a member -----------------------------------------------------------------------------


def die_with_parent(parent: int) -> None:
    """A member never outlives its pool host: on Linux the kernel sees to it; elsewhere the member
    ends when its command pipe closes (see `end_self`)."""
    if IS_LINUX:
        processes.prctl(processes.PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:
            os._exit(1)  # the host died before the line above took effect


def end_self() -> None:
    """The pool host is gone: end this member and what it started in its group (POSIX)."""
    if not IS_WINDOWS:
        try:
            os.killpg(0, signal.SIGKILL)
        except OSError:
            pass
    os._exit(1)


def rank_fds(streams: Sequence[Any]) -> tuple[list[int], Callable[[], None]]:
    """File descriptors for a rank's output, report and stack dump, from its three connected
    sockets, and what to call before the rank exits so that nothing written is lost.

    POSIX writes into the sockets themselves (output from C code and child processes included).
    Windows cannot: a socket is not a file descriptor there, so each stream is a pipe that a
    thread copies into its socket; output written after the rank exits is lost there.
    """
    if not IS_WINDOWS:
        return [sock.detach() for sock in streams], lambda: None
    return relayed_fds(streams)


def relayed_fds(streams: Sequence[Any]) -> tuple[list[int], Callable[[], None]]:
    """Windows' way (see `rank_fds`): a pipe per stream and a thread copying it into the socket."""
    fds, relays = [], []
    for sock in streams:
        read_end, write_end = os.pipe()
        relay = threading.Thread(target=_relay, args=(read_end, sock), daemon=True)
        relay.start()
        fds.append(write_end)
        relays.append(relay)

    def drain() -> None:
        for fd in (1, 2):
            os.close(fd)  # the output relay sees its end unless a child process still holds the pipe
        for relay in relays[:2]:
            relay.join(timeout=0.5)

    return fds, drain


def _relay(fd: int, sock: Any) -> None:
    with sock:
        while data := os.read(fd, 1 << 16):
            sock.sendall(data)


def dump_stacks_on_request(commands: IO[bytes], stack_fd: int) -> None:
    """Serve the pool host's command pipe for the rest of the rank's life (a daemon thread)."""
    for line in commands:
        if line == STACK_COMMAND:
            faulthandler.dump_traceback(file=stack_fd, all_threads=True)
    end_self()


# --- strays where no subreaper exists (macOS, other POSIX): the group and what Python started ---


def _process_table() -> dict[int, tuple[int, int, str, str]]:
    """pid -> (parent pid, process group, state, command), from ps (POSIX)."""
    try:
        listing = subprocess.run(
            ["ps", "-A", "-o", "pid=,ppid=,pgid=,state=,command="], capture_output=True, text=True, timeout=10
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return {}
    table = {}
    for line in listing.splitlines():
        fields = line.split(None, 4)
        if len(fields) >= 4 and all(f.isdigit() for f in fields[:3]):
            table[int(fields[0])] = (int(fields[1]), int(fields[2]), fields[3], fields[4] if len(fields) > 4 else "")
    return table


def posix_strays(groups: set[int], started: set[int], grace: float) -> list[Stray]:
    """Kill every live process in the process groups `groups`, every live process among `started`
    (the pids a run's Python code started, from its spawn log) and all their descendants."""

    def living() -> dict[int, str]:
        table = _process_table()
        found = {pid for pid, (_, pgid, _, _) in table.items() if pgid in groups} | (started & set(table))
        queue = list(found)
        while queue:
            parent = queue.pop()
            for pid, (ppid, _, _, _) in table.items():
                if ppid == parent and pid not in found:
                    found.add(pid)
                    queue.append(pid)
        found.discard(os.getpid())
        return {pid: table[pid][3][: processes.COMMAND_CHARS] for pid in found if not table[pid][2].startswith("Z")}

    give_up = time.monotonic() + grace
    left = living()
    while left and time.monotonic() < give_up:
        time.sleep(0.05)
        left = living()
    strays: dict[int, Stray] = {}
    for _ in range(20):
        if not left:
            break
        for pid, command in left.items():
            strays.setdefault(pid, Stray(pid, command))
            processes.send_signal(pid, signal.SIGKILL)
        time.sleep(0.02)
        left = living()
    return list(strays.values())


# --- Windows job objects -------------------------------------------------------------------------
# A job holds a member and every process it starts (unless one is created to break away, which the
# job does not allow); closing or terminating the job ends them all. Written against the Win32
# documentation; not run by this project's CI (see README, "Platforms").

_JOB_LIMIT_KILL_ON_JOB_CLOSE = 0x2000
_JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION = 0x400  # no error dialog waiting for a click
_JOB_EXTENDED_LIMIT_INFORMATION = 9
_JOB_BASIC_PROCESS_ID_LIST = 3
_PROCESS_TERMINATE = 0x1
_PROCESS_SET_QUOTA = 0x100
_PROCESS_QUERY_LIMITED_INFORMATION = 0x1000
_MAX_JOB_PROCESSES = 1024


def _kernel32() -> Any:
    from ctypes import wintypes

    kernel32 = ctypes.WinDLL("kernel32", use_last_error=True)  # type: ignore[attr-defined]  # Windows only
    kernel32.CreateJobObjectW.restype = wintypes.HANDLE
    kernel32.OpenProcess.restype = wintypes.HANDLE
    kernel32.OpenProcess.argtypes = (wintypes.DWORD, wintypes.BOOL, wintypes.DWORD)
    for name in (
        "TerminateJobObject",
        "CloseHandle",
        "AssignProcessToJobObject",
        "SetInformationJobObject",
        "QueryInformationJobObject",
        "QueryFullProcessImageNameW",
    ):
        getattr(kernel32, name).restype = wintypes.BOOL
    kernel32.TerminateJobObject.argtypes = (wintypes.HANDLE, wintypes.UINT)
    kernel32.CloseHandle.argtypes = (wintypes.HANDLE,)
    kernel32.AssignProcessToJobObject.argtypes = (wintypes.HANDLE, wintypes.HANDLE)
    return kernel32


class _IoCounters(ctypes.Structure):
    _fields_ = [
        (name, ctypes.c_ulonglong)
        for name in (
            "ReadOperationCount",
            "WriteOperationCount",
            "OtherOperationCount",
            "ReadTransferCount",
            "WriteTransferCount",
            "OtherTransferCount",
        )
    ]


class _BasicLimits(ctypes.Structure):
    _fields_ = [
        ("PerProcessUserTimeLimit", ctypes.c_int64),
        ("PerJobUserTimeLimit", ctypes.c_int64),
        ("LimitFlags", ctypes.c_uint32),
        ("MinimumWorkingSetSize", ctypes.c_size_t),
        ("MaximumWorkingSetSize", ctypes.c_size_t),
        ("ActiveProcessLimit", ctypes.c_uint32),
        ("Affinity", ctypes.c_size_t),
        ("PriorityClass", ctypes.c_uint32),
        ("SchedulingClass", ctypes.c_uint32),
    ]


class _ExtendedLimits(ctypes.Structure):
    _fields_ = [
        ("BasicLimitInformation", _BasicLimits),
        ("IoInfo", _IoCounters),
        ("ProcessMemoryLimit", ctypes.c_size_t),
        ("JobMemoryLimit", ctypes.c_size_t),
        ("PeakProcessMemoryUsed", ctypes.c_size_t),
        ("PeakJobMemoryUsed", ctypes.c_size_t),
    ]


class _ProcessIdList(ctypes.Structure):
    _fields_ = [
        ("NumberOfAssignedProcesses", ctypes.c_uint32),
        ("NumberOfProcessIdsInList", ctypes.c_uint32),
        ("ProcessIdList", ctypes.c_size_t * _MAX_JOB_PROCESSES),
    ]


def _windows_job(pid: int) -> int:
    """A job that kills everything in it when its last handle closes, holding process `pid`.
    A member has imported nothing yet when it is assigned: it has started no process to miss."""
    kernel32 = _kernel32()
    job = kernel32.CreateJobObjectW(None, None)
    limits = _ExtendedLimits()
    limits.BasicLimitInformation.LimitFlags = _JOB_LIMIT_KILL_ON_JOB_CLOSE | _JOB_LIMIT_DIE_ON_UNHANDLED_EXCEPTION
    kernel32.SetInformationJobObject(job, _JOB_EXTENDED_LIMIT_INFORMATION, ctypes.byref(limits), ctypes.sizeof(limits))
    process = kernel32.OpenProcess(_PROCESS_SET_QUOTA | _PROCESS_TERMINATE, False, pid)
    kernel32.AssignProcessToJobObject(job, process)
    kernel32.CloseHandle(process)
    return int(job)


def _windows_job_pids(job: int) -> list[int]:
    listing = _ProcessIdList()
    if not _kernel32().QueryInformationJobObject(
        job, _JOB_BASIC_PROCESS_ID_LIST, ctypes.byref(listing), ctypes.sizeof(listing), None
    ):
        return []
    return [int(pid) for pid in listing.ProcessIdList[: listing.NumberOfProcessIdsInList]]


def _windows_image(pid: int) -> str:
    kernel32 = _kernel32()
    process = kernel32.OpenProcess(_PROCESS_QUERY_LIMITED_INFORMATION, False, pid)
    if not process:
        return ""
    try:
        size = ctypes.c_uint32(1024)
        name = ctypes.create_unicode_buffer(size.value)
        return name.value if kernel32.QueryFullProcessImageNameW(process, 0, name, ctypes.byref(size)) else ""
    finally:
        kernel32.CloseHandle(process)


def _windows_strays(run_members: Sequence[Member], grace: float) -> list[Stray]:
    give_up = time.monotonic() + grace
    left = [pid for m in run_members for pid in _windows_job_pids(m.job)]
    while left and time.monotonic() < give_up:
        time.sleep(0.05)
        left = [pid for m in run_members for pid in _windows_job_pids(m.job)]
    strays = [Stray(pid, _windows_image(pid)) for pid in left]
    for member in run_members:
        kill_member(member)
    return strays
