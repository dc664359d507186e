"""The bubblewrap sandbox (`bwrap`, the sandbox Flatpak uses; unprivileged through user namespaces).

One per submission, around its zygote. Inside: new PID, IPC, UTS, cgroup and network namespaces
(loopback only, enough for gloo), no capabilities, a fresh /dev, /proc and a size-limited /tmp for
scratch, a generated /etc (rank_view.etc_files, and the loader's cache), and a read-only view of
exactly four things: the Python environment, the host files a rank loads beyond it (measured when
the sandbox opens: host_files.py), the rank side of the grader (rank_view.py), and the submission's
own files. Nothing else of the host or the course: no /usr, /bin or /home, no other submission, no
results folder, no environment variable of the grader's. When the grader goes away, or the zygote
(PID 1's only child) ends, every process in it is killed.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from grader.engine.preload import BASE_PRELOAD
from grader.engine.processes import RANK_LIMITS_VARIABLE
from grader.sandbox import host_files
from grader.sandbox.limits import Cgroup, Limits, rank_limits

SCRATCH = "/tmp/grader"
# The loader's index of the host's libraries (names and paths, nothing else). Debian 12 needs none:
# every library a rank loads lies in a folder the loader searches anyway. Bound so that it finds
# them as outside on a machine where one lies in a folder only /etc/ld.so.conf names (/usr/local/lib,
# a GPU driver's folder).
LOADER_CACHE = Path("/etc/ld.so.cache")
PASSED_VARIABLES = ("CUDA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "LANG", "LC_ALL")
PASSED_PREFIXES = ("NCCL_",)


@functools.cache
def unavailable() -> str | None:
    """Why bubblewrap cannot sandbox here (None: it can), found by trying once."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return "bubblewrap is not installed (Debian/Ubuntu: apt-get install bubblewrap)"
    try:
        probe = subprocess.run(
            [
                bwrap,
                "--unshare-all",
                "--die-with-parent",
                "--ro-bind",
                "/",
                "/",
                "--proc",
                "/proc",
                "--dev",
                "/dev",
                "true",
            ],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"bubblewrap did not run: {exc}"
    if probe.returncode != 0:
        said = probe.stderr.decode(errors="replace").strip().splitlines()
        return f"bubblewrap cannot create namespaces here ({said[-1] if said else f'exit {probe.returncode}'})"
    return None


def _passed(base: Mapping[str, str]) -> dict[str, str]:
    """What of an environment enters the sandbox: what torch needs, nothing else of the grader's."""
    return {key: value for key, value in base.items() if key in PASSED_VARIABLES or key.startswith(PASSED_PREFIXES)}


def python_binds() -> list[Path]:
    """The folders the Python environment lives in: its prefixes and the folders of sys.path in them
    or named site-packages, never a folder merely on PYTHONPATH (which may be the course itself). A
    prefix in /usr (the system's Python) is not bound whole, only its folders of sys.path: the
    interpreter comes with the host files (host_files.py)."""
    prefixes = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix)}
    prefixes.add(Path(sys.executable).resolve().parent)
    folders = {p for p in prefixes if not p.is_relative_to("/usr")}
    for entry in sys.path:
        path = Path(entry or ".").resolve()
        if path.is_dir() and (
            any(path.is_relative_to(p) for p in prefixes) or path.name in ("site-packages", "dist-packages")
        ):
            folders.add(path)
    return sorted(f for f in folders if not any(f != g and f.is_relative_to(g) for g in folders))


def host_binds(view: Path, gpu: bool) -> tuple[dict[str, str], list[str]]:
    """The symlinks (where -> target) and files of the host a rank needs beyond the Python
    environment: what the probe loads importing what a zygote imports (host_files.py), the
    interpreter, and on a GPU the driver's libraries."""
    workers = [".".join(p.relative_to(view).with_suffix("").parts) for p in view.glob("grader/checks/*/workers.py")]
    env = {**_passed(os.environ), "PYTHONPATH": str(view), "PYTHONDONTWRITEBYTECODE": "1", "OMP_NUM_THREADS": "1"}
    needed = [sys.executable, *host_files.probe([*BASE_PRELOAD, *sorted(workers)], env)]
    # Never run on a GPU yet: torch's CUDA libraries come with its wheel (site-packages), the
    # driver's from the host, found through the loader's cache.
    if gpu:
        needed += host_files.driver_libraries()
    return host_files.routes(needed, [*python_binds(), view])


class BubblewrapSandbox:
    """Makes one confinement per submission; holds what they share (the rank view, the limits, the
    host files to bind, measured once here)."""

    name = "bubblewrap"
    concurrent = True

    def __init__(self, view: Path, limits: Limits, gpu: bool = False) -> None:
        self.view = view
        self.limits = limits
        self.gpu = gpu
        self.links, self.files = host_binds(view, gpu)

    def confine(self, workspace: Path) -> BubblewrapConfinement:
        return BubblewrapConfinement(self, workspace)


class BubblewrapConfinement:
    """One submission's sandbox: see the module docstring. Implements the engine's `Confinement`."""

    scratch_root = SCRATCH

    def __init__(self, sandbox: BubblewrapSandbox, workspace: Path) -> None:
        self.sandbox = sandbox
        self.workspace = workspace
        self.cgroup = Cgroup.create(sandbox.limits)

    def _mounts(self) -> list[str]:
        # /tmp first: the view and the workspace may live below the host's /tmp, and are bound on top
        args = ["--size", str(self.sandbox.limits.scratch_bytes), "--tmpfs", "/tmp"]
        for folder in python_binds():
            args += ["--ro-bind", str(folder), str(folder)]
            if (folder / "grader").is_dir():  # a course installed into site-packages: hide all of it
                args += ["--tmpfs", str(folder / "grader")]
        for where, target in self.sandbox.links.items():
            args += ["--symlink", target, where]
        for path in self.sandbox.files:
            args += ["--ro-bind", path, path]
        for etc in sorted((self.sandbox.view / "etc").iterdir()):
            args += ["--ro-bind", str(etc), f"/etc/{etc.name}"]
        if LOADER_CACHE.is_file():
            args += ["--ro-bind", str(LOADER_CACHE), str(LOADER_CACHE)]
        args += [
            "--ro-bind",
            str(self.sandbox.view),
            str(self.sandbox.view),
            "--ro-bind",
            str(self.workspace),
            str(self.workspace),
            "--dev",
            "/dev",
            "--proc",
            "/proc",
        ]
        if self.sandbox.gpu:
            args += [
                arg
                for device in sorted(Path("/dev").glob("nvidia*"))
                for arg in ("--dev-bind", str(device), str(device))
            ]
            args += ["--ro-bind-try", "/sys", "/sys", "--ro-bind-try", "/proc/driver/nvidia", "/proc/driver/nvidia"]
        return args

    def command(self, argv: list[str]) -> list[str]:
        python, *rest = argv
        inner = [python, "-s", *rest]
        bwrap = [
            shutil.which("bwrap") or "bwrap",
            "--unshare-all",
            "--die-with-parent",
            "--new-session",
            "--cap-drop",
            "ALL",
            "--hostname",
            "localhost",
            *self._mounts(),
            "--chdir",
            "/tmp",
            "--",
            *inner,
        ]
        if self.cgroup is None:
            return bwrap
        joins = "; ".join(f'echo $$ > "${i + 1}" || exit 97' for i in range(len(self.cgroup.procs_files)))
        return [
            "/bin/sh",
            "-c",
            f'{joins}; shift {len(self.cgroup.procs_files)}; exec "$@"',
            "sh",
            *map(str, self.cgroup.procs_files),
            *bwrap,
        ]

    def environment(self, base: dict[str, str]) -> dict[str, str]:
        """The sandbox's whole environment: nothing of the grader's but what torch needs."""
        env = _passed(base)
        # without a cgroup, RLIMIT_NPROC: it counts the processes of the sandbox's own user namespace
        # (Linux 5.14 and later), but never binds root, so a root grader's sandboxes have no process cap
        uncapped = self.cgroup is not None or os.geteuid() == 0
        processes = None if uncapped else self.sandbox.limits.max_processes
        env.update(
            PATH=str(Path(sys.executable).parent),  # no /usr/bin inside: the Python environment's bin
            HOME="/tmp",
            TMPDIR="/tmp",
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
        if self.cgroup is not None:
            self.cgroup.remove()
