"""Signalling processes that may already be gone: the engine's only way to stop anything."""

from __future__ import annotations

import os
import signal


def send_signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def killpg(pgid: int) -> None:
    """Kill a process group, which may already be gone."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
