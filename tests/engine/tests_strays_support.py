"""Three ways code under test leaves a process behind, each writing its pid to a folder."""

from __future__ import annotations

import multiprocessing
import os
import signal
import subprocess
import time
from pathlib import Path

SECONDS = 137


def _ignore_sigterm_and_sleep(pid_dir: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    Path(pid_dir, str(os.getpid())).touch()
    time.sleep(SECONDS)


def start_stray(kind: str, pid_dir: str) -> None:
    if kind == "new_session":
        child = subprocess.Popen(["sleep", str(SECONDS)], start_new_session=True)
        Path(pid_dir, str(child.pid)).touch()
    elif kind == "double_fork":
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                Path(pid_dir, str(os.getpid())).touch()
                time.sleep(SECONDS)
            os._exit(0)
    elif kind == "multiprocessing":
        multiprocessing.get_context("fork").Process(target=_ignore_sigterm_and_sleep, args=(pid_dir,)).start()
    else:
        raise ValueError(kind)
