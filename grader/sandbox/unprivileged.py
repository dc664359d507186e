"""The fallback sandbox: ranks run as an unprivileged user of their own (the grader must be root).

For machines without user namespaces (some Docker containers, hardened HPC nodes) where the grader
runs as root, as on Gradescope. Each submission's zygote runs (through `setpriv`) as a user id
that owns nothing, with no supplementary groups and no way to gain privileges. What that gives, and
what it does not:

- it reads only what other users may read: the course, the results folder and every submission as
  handed in must be closed to other users (checked before grading, `exposed`; the message says how),
  the Python environment open to them. The grader's private copies of a submission are its user's alone (0700);
- where the machine allows a PID namespace (root with CAP_SYS_ADMIN: `unshare`), the zygote runs in
  one of its own with a private /proc and IPC namespace: it sees no other process, the grader's
  command line included. Elsewhere every process and its command line stay visible (docs/SECURITY.md);
- it cannot signal or trace the grader (another user), nor write anything of the grader's;
- when its submission is done, every process of that user is killed (`kill -1` as that user), and
  every file it owns in the places it could write is removed (`UserConfinement.close`); a cgroup
  caps memory and processes where the machine allows, rlimits (address space, processes of its own
  user id, file size) elsewhere;
- it shares the machine's network: a submission could reach another's ports, so submissions are
  graded one at a time in this mode.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
import stat
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from grader.engine.processes import RANK_LIMITS_VARIABLE
from grader.sandbox.bubblewrap import PASSED_PREFIXES, PASSED_VARIABLES, python_binds
from grader.sandbox.limits import Cgroup, Limits, rank_limits

FIRST_UID = 61000  # user ids 61000-61999: no account owns them on a usual system
UIDS = 1000
# where a sandbox user may write beside its scratch and workspace: swept at close, at any depth
SHARED_WRITABLE = ("/tmp", "/var/tmp", "/dev/shm", "/run/lock", "/var/lock", "/dev/mqueue")
KILL_WAIT_S = 10.0  # how long close waits for the kernel to reap the user's killed processes
PRIVATE_PIDS = ["unshare", "--pid", "--fork", "--mount-proc", "--ipc", "--kill-child"]


def _sandbox_id(number: int) -> bool:
    return FIRST_UID <= number < FIRST_UID + UIDS


def exposed(path: Path) -> str | None:
    """Why a sandbox user could read `path` (a submission as handed in), or None when it cannot: a
    folder on the way or the submission itself belongs to a sandbox user id, or every folder on the
    way lets others through and the submission lets them in (a folder: through it, whose files'
    names every student knows; a file: read it)."""
    path = Path(os.path.abspath(path))
    try:
        chain = [path, *path.parents]
        for place in chain:
            info = place.lstat()
            if _sandbox_id(info.st_uid) or _sandbox_id(info.st_gid):
                return f"{place} belongs to a sandbox user id ({FIRST_UID}-{FIRST_UID + UIDS - 1})"
        if not all(place.stat().st_mode & stat.S_IXOTH for place in path.parents):
            return None
        mode = path.lstat().st_mode
    except OSError:
        return None  # what the grader cannot see, prepare reports
    need = stat.S_IXOTH if stat.S_ISDIR(mode) else stat.S_IROTH
    return f"other users can read {path}" if mode & need else None


def processes_of(uid: int) -> list[int]:
    """The processes whose real user id is `uid` (zombies included: not yet reaped)."""
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError, StopIteration, ValueError):
                with open(f"/proc/{entry.name}/status") as status:
                    line = next(line for line in status if line.startswith("Uid:"))
                if int(line.split()[1]) == uid:
                    found.append(int(entry.name))
    return found


def private_pids_available() -> bool:
    """Whether this machine lets the grader give each sandbox a PID namespace with a /proc of its own."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run([*PRIVATE_PIDS, "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def remove_owned(uid: int, roots: list[Path]) -> None:
    """Remove every file and folder `uid` owns below `roots`, at any depth, never following a link: a
    folder of another owner is entered only where others may pass through it (where `uid` could reach)."""
    folders = [root for root in roots if root.is_dir() and not root.is_symlink()]
    while folders:
        folder = folders.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if info.st_uid == uid:
                if stat.S_ISDIR(info.st_mode):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(OSError):
                        os.unlink(entry.path)
            elif stat.S_ISDIR(info.st_mode) and info.st_mode & stat.S_IXOTH:
                folders.append(Path(entry.path))


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


def unavailable(course_root: Path, out: Path, submissions: Sequence[Path] = ()) -> str | None:
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
    for submission in submissions:
        if (why := exposed(submission)) is not None:
            folder = Path(os.path.abspath(submission)).parent
            return (
                f"another submission could read and run {submission}: {why}; close the submissions' folder first "
                f"with `chmod o-rwx {folder}` (and give it to the grader's user)"
            )
    return None


class UserSandbox:
    name = "unprivileged user"
    concurrent = False  # no network isolation: one submission at a time

    def __init__(self, view: Path, limits: Limits, gpu: bool = False) -> None:
        self.view = view
        self.limits = limits
        self.gpu = gpu
        self._uids = itertools.cycle(range(FIRST_UID, FIRST_UID + UIDS))
        self.private_pids = private_pids_available()

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
        hidden = [*PRIVATE_PIDS, *user] if self.sandbox.private_pids else user
        if self.cgroup is None:
            return hidden
        joins = "; ".join(f'echo $$ > "${i + 1}" || exit 97' for i in range(len(self.cgroup.procs_files)))
        return [
            "/bin/sh",
            "-c",
            f'{joins}; shift {len(self.cgroup.procs_files)}; exec "$@"',
            "sh",
            *map(str, self.cgroup.procs_files),
            *hidden,
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
        """Nothing of this user survives: every process it owns is killed (`kill -1` as the user, its
        cgroup emptied), then every file and folder it owns is removed, at any depth, from its scratch,
        its workspace, the temporary folder and each of SHARED_WRITABLE (/tmp, /var/tmp, /dev/shm,
        /run/lock, /var/lock, /dev/mqueue): the places a user who owns nothing can write. The scratch
        goes whole; the workspace folder itself goes back to the grader's user."""
        ends = time.monotonic() + KILL_WAIT_S
        while True:  # until the kernel has reaped them all: a process being killed still owns its files
            subprocess.run(
                ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--", "kill", "-9", "-1"],
                capture_output=True,
            )
            if not processes_of(self.uid) or time.monotonic() > ends:
                break
            time.sleep(0.05)
        if self.cgroup is not None:
            self.cgroup.remove()
        places = [Path(self.scratch_root), self.workspace, Path(tempfile.gettempdir()), *map(Path, SHARED_WRITABLE)]
        remove_owned(self.uid, places)
        shutil.rmtree(self.scratch_root, ignore_errors=True)
        with contextlib.suppress(OSError):  # the workspace's caller removes it; until then it is the grader's
            os.chown(self.workspace, os.getuid(), os.getgid(), follow_symlinks=False)
