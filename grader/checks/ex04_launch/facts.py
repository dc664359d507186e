"""What exercise 4's workers report: imported by checks.py (judge side); runs on the rank side too."""

from __future__ import annotations

from typing import Any, TypedDict

from grader.engine.facts import RankFacts, Worker


class Stall(TypedDict):
    """What the watchdog saw when the launcher joined processes still blocked writing their results."""

    seconds_after_return: float
    alive: list[int]
    writing: list[str]  # the ranks blocked writing, as the keys of their stack dumps
    launcher_at: list[str]  # the student's line the launcher waited at ("file:line in function()"), if seen


class LeftBehind(TypedDict):
    """The launched processes still there when the launcher returned, by rank."""

    running: list[int]
    unreaped: list[int]


class Observed(TypedDict):
    """What the kernel showed of the processes the `started` markers name (Linux /proc; None elsewhere)."""

    pids: dict[str, int]  # rank -> the pid its marker names when the launcher returned
    strangers: list[int]  # ranks whose pid was neither the launcher's nor a live process descended from it


class Identity(RankFacts):
    """The student's launch_distributed on report_identity (`launch_identity`)."""

    launcher_pid: int
    seconds: float
    stalled: Stall | None
    left_behind: LeftBehind
    finished_at_return: list[int]
    finish_order: list[int]
    results: Any  # whatever the launcher returned, made plain and bounded (workers._plain): judged by its shape
    observed: Observed | None


class Link(TypedDict):
    type: str
    message: str


class Raised(TypedDict):
    """The error launch_distributed raised, with the chain it was raised from."""

    type: str
    message: str
    chain: list[Link]


class Failing(RankFacts):
    """The student's launch_distributed on a function whose last rank raises (`launch_failing`)."""

    raised: Raised | None
    seconds_after_raise: float | None  # None: the failing rank never ran
    slept_before_return: list[int]
    left_behind: LeftBehind
    observed: Observed | None


LAUNCH_IDENTITY = Worker("launch_identity", Identity)
LAUNCH_FAILING = Worker("launch_failing", Failing)
