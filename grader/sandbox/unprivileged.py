"""The fallback sandbox: ranks run as an unprivileged user of their own (the grader must be root).

For machines without user namespaces (some Docker containers, hardened HPC nodes) where the grader
runs as root, as on Gradescope. Each submission's zygote runs (through `setpriv`) as a user id
that owns nothing, with no supplementary groups and no way to gain privileges. What that gives, and
what it does not:

- it reads only what other users may read: the course and the results folder must be closed to
  other users (checked before grading; the message says how), the Python environment open to them;
- it cannot signal or trace the grader (another user), nor write anything of the grader's;
- when its submission is done, every process of that user is killed (`kill -1` as that user), so
  nothing outlives it; a cgroup caps memory and processes where the machine allows, rlimits
  (address space, processes of the user, file size) elsewhere;
- it shares the machine's network: a submission could reach another's ports, so submissions are
  graded one at a time in this mode.
"""

from __future__ import annotations

import itertools
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from grader.engine.processes import RANK_LIMITS_VARIABLE
from grader.sandbox.bubblewrap import PASSED_PREFIXES, PASSED_VARIABLES, python_binds
from grader.sandbox.limits import Cgroup, Limits, rank_limits

FIRST_UID = 61000  # user ids 61000-61999: no account owns them on a usual system
UIDS = 1000


def open_to_others(path: Path, need: int = stat.S_IROTH) -> bool:
    """Whether a user who is neither the owner nor in the group can reach `path` and has `need` on it."""
    path = path.resolve()
    try:
        if not all(p.stat().st_mode & stat.S_IXOTH for p in path.parents):
            return False
        return bool(path.stat().st_mode & need)
    except OSError:
        return False


def closed_to_others(path: Path) -> bool:
    """Whether no such user can reach anything below `path` (some folder on the way is closed)."""
    path = path.resolve()
    try:
        return not all(p.stat().st_mode & stat.S_IXOTH for p in (path, *path.parents))
    except OSError:
        return True


def unavailable(course_root: Path, out: Path) -> str | None:
    """Why this fallback cannot grade safely here (None: it can)."""
    if os.geteuid() != 0:
        return "running ranks as another user needs root"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is not installed"
    for folder in python_binds():
        if (folder / "grader" / "checks").is_dir():
            return (
                f"the course is installed into {folder}, where the sandbox user could read its checks: install "
                "it editable (pip install -e COURSE) or run it from its folder"
            )
        if not open_to_others(folder, stat.S_IROTH | stat.S_IXOTH):
            return (
                f"the sandbox user cannot reach the Python environment at {folder}: install it where every "
                "user can read it (for example the system's Python, or a virtual environment outside the course)"
            )
    for secret, what in ((course_root, "the course (solutions, hidden checks)"), (out, "the results folder")):
        if not closed_to_others(secret):
            return f"the sandbox user could read {what} at {secret}: close it first with `chmod o-rwx {secret}`"
    return None


class UserSandbox:
    name = "unprivileged user"
    concurrent = False  # no network isolation: one submission at a time

    def __init__(self, view: Path, limits: Limits, gpu: bool = False) -> None:
        self.view = view
        self.limits = limits
        self.gpu = gpu
        self._uids = itertools.cycle(range(FIRST_UID, FIRST_UID + UIDS))

    def confine(self, workspace: Path) -> UserConfinement:
        return UserConfinement(self, workspace, next(self._uids))


class UserConfinement:
    """One submission run as user `uid`. Implements the engine's `Confinement`."""

    def __init__(self, sandbox: UserSandbox, workspace: Path, uid: int) -> None:
        self.sandbox = sandbox
        self.uid = uid
        self.workspace = workspace
        self.cgroup = Cgroup.create(sandbox.limits)
        scratch = Path(tempfile.mkdtemp(prefix="grader-scratch-"))
        for path in (workspace, *workspace.rglob("*"), scratch):
            os.chown(path, uid, uid, follow_symlinks=False)
        workspace.chmod(0o700)
        self.scratch_root = str(scratch)

    def command(self, argv: list[str]) -> list[str]:
        python, *rest = argv
        user = [
            "setpriv",
            f"--reuid={self.uid}",
            f"--regid={self.uid}",
            "--clear-groups",
            "--no-new-privs",
            "--pdeathsig=KILL",
            "--",
            python,
            "-s",
            *rest,
        ]
        if self.cgroup is None:
            return user
        joins = "; ".join(f'echo $$ > "${i + 1}" || exit 97' for i in range(len(self.cgroup.procs_files)))
        return [
            "/bin/sh",
            "-c",
            f'{joins}; shift {len(self.cgroup.procs_files)}; exec "$@"',
            "sh",
            *map(str, self.cgroup.procs_files),
            *user,
        ]

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        env = {key: value for key, value in base.items() if key in PASSED_VARIABLES or key.startswith(PASSED_PREFIXES)}
        processes = None if self.cgroup is not None else self.sandbox.limits.max_processes
        env.update(
            PATH="/usr/local/bin:/usr/bin:/bin",
            HOME=self.scratch_root,
            TMPDIR=self.scratch_root,
            USER="student",
            LOGNAME="student",
            PYTHONPATH=str(self.sandbox.view),
            PYTHONDONTWRITEBYTECODE="1",
            OMP_NUM_THREADS="1",
            **{
                RANK_LIMITS_VARIABLE: rank_limits(
                    self.sandbox.limits, self.cgroup is not None, self.sandbox.gpu, processes
                )
            },
        )
        return env

    def oom_kills(self) -> int:
        return self.cgroup.oom_kills() if self.cgroup else 0

    @property
    def max_processes(self) -> int:
        return self.sandbox.limits.max_processes

    def processes_refused(self) -> int:
        return self.cgroup.pids_refused() if self.cgroup else 0  # RLIMIT_NPROC keeps no count

    def close(self) -> None:
        """Nothing of this user survives: every process it owns is killed, its files removed."""
        subprocess.run(
            ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--", "kill", "-9", "-1"],
            capture_output=True,
        )
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.scratch_root, ignore_errors=True)
