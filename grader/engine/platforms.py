"""Everything the engine does differently per operating system, in one place.

The default launcher forks ranks from a warm zygote: fast, and on Linux safe. Where forking a
process that has imported torch is fragile (macOS: system frameworks may have started threads) or
impossible (native Windows), the portable launcher starts a warm pool of interpreters instead.
"""

from __future__ import annotations

import os
import sys

LAUNCHER_VARIABLE = "GRADER_LAUNCHER"  # "fork" or "portable": overrides the choice by platform
LAUNCHERS = ("fork", "portable")


class LauncherError(ValueError):
    """A launcher was asked for that cannot run here."""


def fork_is_safe() -> bool:
    """Whether this platform can fork a process that has imported torch, reliably."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def chosen_launcher() -> tuple[str, str]:
    """The launcher `grader check` uses here, and why: (name, reason)."""
    forced = os.environ.get(LAUNCHER_VARIABLE, "").strip()
    if forced:
        if forced not in LAUNCHERS:
            raise LauncherError(f"{LAUNCHER_VARIABLE}={forced!r}: the launchers are {', '.join(LAUNCHERS)}")
        if forced == "fork" and not hasattr(os, "fork"):
            raise LauncherError(f"{LAUNCHER_VARIABLE}=fork: this platform ({sys.platform}) cannot fork")
        return forced, f"{LAUNCHER_VARIABLE}={forced}"
    if fork_is_safe():
        return "fork", f"{sys.platform}: ranks are forked from a warm zygote"
    return "portable", f"{sys.platform}: forking after importing torch is unsafe or impossible here"
