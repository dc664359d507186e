"""Sandboxes for untrusted submissions in `grader grade` (the threat model: docs/SECURITY.md).

A sandbox wraps one submission's zygote, so that everything a submission runs, every rank and
every process a rank starts, is confined: it sees only the rank side of the grader
(rank_view.py) and its own files, it cannot reach the grader, the judge, the references, another
submission or the results, and nothing of it outlives its grading.

Modes (`grader grade --sandbox MODE`):
- bubblewrap: namespaces (bubblewrap.py). The first choice.
- user: an unprivileged user per submission (unprivileged.py), for root without user namespaces.
- auto (default): bubblewrap where it works, else user where the grader is root, else refuse.
- none: no sandbox (`--no-sandbox`), for trusted code only; the grader says loudly what it gives up.
`grader check` never sandboxes: a student on their own machine needs no protection from themselves.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from grader.checks.manifest import ManifestError
from grader.engine.contract import Confinement
from grader.sandbox import bubblewrap, host_files, rank_view, unprivileged
from grader.sandbox.limits import DEFAULT_LIMITS, Limits

MODES = ("auto", "bubblewrap", "user", "none")
NO_SANDBOX_WARNING = (
    "WARNING: grading without a sandbox. Submissions run as the grader, with its files: any of them can read "
    "the solutions, the hidden checks and the other submissions, rewrite results.json and the gradebook, "
    "signal the grader, and leave processes running after the batch. Use --no-sandbox for trusted code only."
)


class SandboxError(Exception):
    """No sandbox of the requested kind can run here; the message says why and what to do."""


class CappedConfinement(Confinement, Protocol):
    @property
    def max_processes(self) -> int: ...

    def processes_refused(self) -> int:
        """Forks and threads the kernel has refused so far for going over the process cap."""
        ...


class Sandbox(Protocol):
    name: str
    concurrent: bool  # whether several submissions may be graded at once in it

    def confine(self, workspace: Path) -> CappedConfinement: ...


class SandboxSet:
    """A sandbox kind and the rank view its confinements share; remove the view with `close`."""

    def __init__(self, kind: Sandbox, view: Path) -> None:
        self.kind = kind
        self.view = view
        self._confined: dict[Path, CappedConfinement] = {}  # by workspace, until `limits_reached` is asked

    @property
    def name(self) -> str:
        return self.kind.name

    @property
    def concurrent(self) -> bool:
        return self.kind.concurrent

    def confine(self, workspace: Path) -> Confinement:
        confinement = self.kind.confine(workspace)
        self._confined[workspace] = confinement
        return confinement

    def limits_reached(self, workspace: Path) -> str | None:
        """What the submission graded in `workspace` ran into, for its results; asked once, before its
        sandbox closes (a cap's counter goes with it)."""
        confinement = self._confined.pop(workspace, None)
        refused = confinement.processes_refused() if confinement is not None else 0
        if confinement is None or not refused:
            return None
        return (
            f"the submission reached the sandbox's cap of {confinement.max_processes} processes and threads: "
            f"{refused} more were refused (an error such as 'Resource temporarily unavailable' in its code)"
        )

    def close(self) -> None:
        rank_view.remove(self.view)


def open_sandbox(
    mode: str,
    course_root: Path,
    out: Path,
    limits: Limits = DEFAULT_LIMITS,
    gpu: bool = False,
    submissions: Sequence[Path] = (),
) -> SandboxSet | None:
    """The sandbox to grade in (None for mode "none"), or SandboxError saying why there is none. The
    unprivileged-user sandbox also needs `submissions` (as handed in) closed to other users."""
    if mode not in MODES:
        raise SandboxError(f"unknown sandbox {mode!r} (one of {', '.join(MODES)})")
    if mode == "none":
        return None
    bwrap_problem = bubblewrap.unavailable() if mode in ("auto", "bubblewrap") else None
    user_problem = (
        unprivileged.unavailable(course_root, out, submissions)
        if mode == "user" or (mode == "auto" and bwrap_problem)
        else None
    )
    if mode == "bubblewrap" and bwrap_problem:
        raise SandboxError(f"cannot sandbox with bubblewrap: {bwrap_problem}")
    if mode == "user" and user_problem:
        raise SandboxError(f"cannot sandbox as an unprivileged user: {user_problem}")
    if mode == "auto" and bwrap_problem and user_problem:
        raise SandboxError(
            f"cannot sandbox the submissions here: {bwrap_problem}; and {user_problem}. "
            "Fix one of these, or grade with --no-sandbox if you trust every submission"
        )
    package = Path(__file__).resolve().parents[1]
    folder = Path(tempfile.mkdtemp(prefix="grader-view-"))
    try:
        view = rank_view.materialize(package, folder)
    except ManifestError as exc:
        rank_view.remove(folder)
        raise SandboxError(f"cannot draw the sandbox's view of the grader: {exc}") from exc
    use_bwrap = mode == "bubblewrap" or (mode == "auto" and bwrap_problem is None)
    try:
        kind: Sandbox = (
            bubblewrap.BubblewrapSandbox(view, limits, gpu)
            if use_bwrap
            else unprivileged.UserSandbox(view, limits, gpu)
        )
    except host_files.ProbeError as exc:
        rank_view.remove(view)
        raise SandboxError(f"cannot sandbox with bubblewrap: {exc}") from exc
    return SandboxSet(kind, view)
