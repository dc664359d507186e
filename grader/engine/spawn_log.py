"""Where the processes a rank started came from, so that a stray can be named by the line that
started it ("sleep 137, started from cleanup_ddp() at ex01_process_group.py:31").

The rank runtime hooks the ways Python starts processes (os.fork and everything built on it,
subprocess.Popen, os.posix_spawn, multiprocessing's spawn) and appends one line per new process
to a log in the run's folder: its pid and the innermost line of the student's file on the stack.
The zygote reads the log when it names a run's strays. The log is written beside student code:
it only ever words a message, it is never evidence for a verdict.
"""

from __future__ import annotations

import json
import linecache
import multiprocessing.util
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

from grader.engine import tamper

LOG_NAME = "spawned.jsonl"
MAX_LOG_BYTES = 1 << 20


class _Log:
    def __init__(self, path: Path, student_file: str | None) -> None:
        self.path = path
        self.student_file = student_file
        self.pending = ""  # the origin of a fork in progress, for the child to record

    def origin(self, frame: FrameType | None) -> str:
        while frame is not None and self.student_file:
            if frame.f_code.co_filename == self.student_file:
                code = linecache.getline(self.student_file, frame.f_lineno).strip()
                where = f"{frame.f_code.co_name}() at {Path(self.student_file).name}:{frame.f_lineno}"
                return where + (f": `{code}`" if code else "")
            frame = frame.f_back
        return ""

    def append(self, pid: int, origin: str) -> None:
        if not origin:
            return
        try:
            with open(self.path, "a") as log:
                if log.tell() < MAX_LOG_BYTES:
                    log.write(json.dumps({"pid": pid, "origin": origin}) + "\n")
        except OSError:
            pass


def _recorded(log: _Log, start: Callable[..., Any], pid_of: Callable[[Any], int]) -> Callable[..., Any]:
    def started(*args: Any, **kwargs: Any) -> Any:
        origin = log.origin(sys._getframe(1))
        result = start(*args, **kwargs)
        log.append(pid_of(result), origin)
        return result

    return started


def install(run_dir: Path, student_file: str | None) -> None:
    """Record every process started from here on (in this process and its forks)."""
    log = _Log(run_dir / LOG_NAME, student_file)

    def before_fork() -> None:
        log.pending = log.origin(sys._getframe(1))

    if hasattr(os, "register_at_fork"):  # not on Windows
        os.register_at_fork(before=before_fork, after_in_child=lambda: log.append(os.getpid(), log.pending))
    popen_init = subprocess.Popen.__init__

    def popen(self: subprocess.Popen, *args: Any, **kwargs: Any) -> None:
        origin = log.origin(sys._getframe(1))
        popen_init(self, *args, **kwargs)
        log.append(self.pid, origin)

    tamper.install(subprocess.Popen, "__init__", popen)
    if hasattr(os, "posix_spawn"):
        tamper.install(os, "posix_spawn", _recorded(log, os.posix_spawn, int))
        tamper.install(os, "posix_spawnp", _recorded(log, os.posix_spawnp, int))
    tamper.install(multiprocessing.util, "spawnv_passfds", _recorded(log, multiprocessing.util.spawnv_passfds, int))


def read(run_dir: Path) -> dict[int, str]:
    """pid -> where it was started, from a run's log (bounded; malformed lines are skipped)."""
    origins: dict[int, str] = {}
    try:
        with open(run_dir / LOG_NAME, "rb") as log:
            text = log.read(MAX_LOG_BYTES).decode(errors="replace")
    except OSError:
        return origins
    for line in text.splitlines():
        try:
            entry = json.loads(line)
            origins.setdefault(int(entry["pid"]), str(entry["origin"])[:300])
        except (ValueError, KeyError, TypeError):
            continue
    return origins
