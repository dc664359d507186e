"""The one way `grader check`, `grader grade` and `grader doctor` make an engine, so each gets the
same launcher choice and preload from the same options."""

from __future__ import annotations

from collections.abc import Iterable

from grader.engine.contract import Confinement
from grader.engine.supervisor import Engine


def open_engine(
    preload: Iterable[str] = (), launcher: str | None = None, confinement: Confinement | None = None
) -> Engine:
    """An engine, started: its launcher warms up in the background while the caller goes on.

    `preload`: modules imported before any rank runs (the exercises' workers), besides the base set.
    `launcher`: "fork" or "portable", else GRADER_LAUNCHER or the platform's. `confinement`: a
    sandbox for the launcher (which then forks). The caller closes it.
    """
    engine = Engine(preload=preload, confinement=confinement, launcher=launcher)
    engine.start()
    return engine
