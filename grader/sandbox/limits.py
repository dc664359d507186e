"""What one submission may use: memory, processes, scratch disk, open files (wall time is the batch's timeout).

Memory and processes are capped for the whole sandbox by a cgroup where this machine lets the
grader make one (cgroup v2, or v1's memory and pids controllers, as on a root container), else per
rank process with rlimits applied by the zygote after each fork (`rlimits_for_ranks`). Scratch
disk is a size-limited tmpfs inside a bubblewrap sandbox, and RLIMIT_FSIZE per file elsewhere. Open
files are capped per rank process (RLIMIT_NOFILE, inherited by what a rank starts) in every mode:
otherwise only the grader's own limit applies, and testers saw a rank hold 20,000 descriptors.
"""

from __future__ import annotations

import itertools
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


@dataclass(frozen=True)
class Limits:
    memory_bytes: int = 3 << 30  # the whole submission: the warm zygote and every rank it forks
    # processes and threads of the whole submission (a pids cgroup counts both). Every exercise's reference
    # solution, graded at the catalog's world sizes in bubblewrap, peaked at 44; a submission that starts
    # 200 processes is refused past this cap, and its results say so (`Cgroup.pids_refused`).
    max_processes: int = 160
    scratch_bytes: int = 512 << 20
    rank_address_space: int = 6 << 30  # per rank, only where no cgroup caps memory (no GPU in use)
    # Per rank process. Measured at W=4 with every exercise's reference solution: at most 33 open at a
    # rank's end (ex02, ex08; ex06 FSDP and ex07 torchrun 19 to 26), 46 at the peak sampled every 20 ms,
    # and every exercise still passes under a limit of 64. 1,024 leaves room for larger world sizes.
    open_files: int = 1024


DEFAULT_LIMITS = Limits()  # frozen: one instance serves every default


class Cgroup:
    """A cgroup for one sandbox with memory and process limits; a process joins it by writing its
    pid to each of `procs_files` before it starts anything."""

    _names = itertools.count()

    def __init__(self, folders: list[Path]) -> None:
        self.folders = folders

    @property
    def procs_files(self) -> list[Path]:
        return [folder / "cgroup.procs" for folder in self.folders]

    @classmethod
    def create(cls, limits: Limits) -> Cgroup | None:
        """A new cgroup with the limits set, or None where this machine does not allow it."""
        name = f"grader-{os.getpid()}-{next(cls._names)}"
        for attempt in (_v2, _v1):
            folders = attempt(name, limits)
            if folders:
                return cls(folders)
        return None

    def oom_kills(self) -> int:
        """How many processes the kernel killed for exceeding the memory limit."""
        for folder in self.folders:
            for name in ("memory.events", "memory.oom_control"):
                try:
                    for line in (folder / name).read_text().splitlines():
                        key, _, value = line.partition(" ")
                        if key == "oom_kill":
                            return int(value)
                except (OSError, ValueError):
                    continue
        return 0

    def pids_refused(self) -> int:
        """How many forks (or new threads) the kernel refused for going over the process cap."""
        for folder in self.folders:
            try:
                for line in (folder / "pids.events").read_text().splitlines():
                    key, _, value = line.partition(" ")
                    if key == "max":
                        return int(value)
            except (OSError, ValueError):
                continue
        return 0

    def remove(self) -> None:
        """Kill anything still in it and remove it."""
        for folder in self.folders:
            for _ in range(50):
                try:
                    pids = [int(p) for p in (folder / "cgroup.procs").read_text().split()]
                except OSError:
                    break
                if not pids:
                    break
                for pid in pids:
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                time.sleep(0.02)
            try:
                folder.rmdir()
            except OSError:
                pass


def _own_cgroup(controller: str) -> str | None:
    """This process's cgroup path for a v1 controller, or for the v2 hierarchy ("")."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            return path
    return None


def _write(path: Path, value: str) -> bool:
    try:
        path.write_text(value)
        return True
    except OSError:
        return False


def _make(folder: Path) -> bool:
    try:
        folder.mkdir()
        return True
    except OSError:
        return False


def _v2(name: str, limits: Limits) -> list[Path]:
    if not (CGROUP_ROOT / "cgroup.controllers").exists():
        return []
    own = _own_cgroup("")
    if own is None:
        return []
    folder = CGROUP_ROOT / own.lstrip("/") / name
    if not _make(folder):
        return []
    controllers = (
        (folder / "cgroup.controllers").read_text().split() if (folder / "cgroup.controllers").exists() else []
    )
    if (
        {"memory", "pids"} <= set(controllers)
        and _write(folder / "memory.max", str(limits.memory_bytes))
        and _write(folder / "pids.max", str(limits.max_processes))
    ):
        _write(folder / "memory.swap.max", "0")  # where swap is accounted at all
        return [folder]
    folder.rmdir()
    return []


def _v1(name: str, limits: Limits) -> list[Path]:
    made = []
    settings = {
        "memory": {"memory.limit_in_bytes": str(limits.memory_bytes)},
        "pids": {"pids.max": str(limits.max_processes)},
    }
    for controller, values in settings.items():
        own = _own_cgroup(controller)
        mount = CGROUP_ROOT / controller
        folder = mount / (own or "/").lstrip("/") / name
        if own is None or not mount.is_dir() or not _make(folder):
            break
        made.append(folder)
        if not all(_write(folder / key, value) for key, value in values.items()):
            break
    else:
        return made
    for folder in made:
        folder.rmdir()
    return []


def rank_limits(limits: Limits, capped_by_cgroup: bool, gpu: bool, processes: int | None = None) -> str:
    """The rlimits the zygote sets on each rank it forks (zygote.RANK_LIMITS_VARIABLE): a file's
    size and the open files always; the address space where no cgroup caps memory (not on a GPU,
    where CUDA reserves far more than it uses); the number of processes of the user where asked."""
    parts = [f"fsize={limits.scratch_bytes}", f"nofile={limits.open_files}"]
    if not capped_by_cgroup and not gpu:
        parts.append(f"as={limits.rank_address_space}")
    if processes is not None:
        parts.append(f"nproc={processes}")
    return ",".join(parts)
