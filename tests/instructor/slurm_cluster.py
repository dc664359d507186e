"""A private one-node Slurm cluster for a test: munged, slurmctld and slurmd on this machine, with
their own configuration, state, ports (chosen by the OS) and a node that offers 4 fake GPUs (device
files that are /dev/null), so a job script that asks for GPUs is scheduled as on a GPU cluster.

Needs root (slurmd runs jobs as their user; munged runs as `munge`) and Debian's slurmctld, slurmd,
slurm-client and munge packages; `unavailable()` says why not when something is missing.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PROGRAMS = ("munged", "slurmctld", "slurmd", "sbatch", "squeue", "sinfo", "runuser")
FAKE_GPUS = 4


def unavailable() -> str | None:
    if os.geteuid() != 0:
        return "a one-node Slurm cluster needs root (slurmd, munged)"
    missing = [p for p in PROGRAMS if shutil.which(p) is None and not Path("/usr/sbin", p).exists()]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} missing: "
            "apt-get install slurmctld slurmd slurm-client munge)"
        )
    if not Path("/etc/munge/munge.key").is_file():
        return "munge has no key (/etc/munge/munge.key)"
    return None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _program(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _config(root: Path, host: str) -> str:
    cpus = os.cpu_count() or 1
    return "\n".join(
        [
            "ClusterName=graderci",
            f"SlurmctldHost={host}(127.0.0.1)",
            f"SlurmctldPort={_free_port()}",
            f"SlurmdPort={_free_port()}",
            "SlurmUser=root",
            "AuthType=auth/munge",
            f"AuthInfo=socket={root / 'munge' / 'munge.socket'}",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SchedulerType=sched/backfill",
            "MpiDefault=none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "ReturnToService=2",
            "GresTypes=gpu",
            f"StateSaveLocation={root / 'state'}",
            f"SlurmdSpoolDir={root / 'spool'}",
            f"SlurmctldPidFile={root / 'slurmctld.pid'}",
            f"SlurmdPidFile={root / 'slurmd.pid'}",
            f"SlurmctldLogFile={root / 'slurmctld.log'}",
            f"SlurmdLogFile={root / 'slurmd.log'}",
            f"NodeName={host} NodeAddr=127.0.0.1 CPUs={cpus} Gres=gpu:{FAKE_GPUS} State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
            "",
        ]
    )


def _wait_idle(env: dict[str, str], timeout: float) -> None:
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        state = subprocess.run(["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True).stdout.strip()
        if state == "idle":
            return
        time.sleep(0.5)
    raise RuntimeError(f"the one-node Slurm cluster did not come up (node state {state!r})")


@contextmanager
def one_node_cluster() -> Iterator[dict[str, str]]:
    """The environment (SLURM_CONF) under which sbatch, squeue, ... talk to a fresh private cluster."""
    root = Path(tempfile.mkdtemp(prefix="grader-slurm-"))
    root.chmod(0o755)  # munged runs as the munge user and must reach its socket folder
    for name in ("state", "spool", "munge"):
        (root / name).mkdir()
    shutil.chown(root / "munge", "munge", "munge")
    for i in range(FAKE_GPUS):
        (root / f"gpu{i}").symlink_to("/dev/null")
    host = socket.gethostname().split(".")[0]
    (root / "slurm.conf").write_text(_config(root, host))
    (root / "gres.conf").write_text(f"NodeName={host} Name=gpu File={root}/gpu[0-{FAKE_GPUS - 1}]\n")
    env = {**os.environ, "SLURM_CONF": str(root / "slurm.conf")}
    daemons: list[subprocess.Popen[bytes]] = []
    try:
        munge = root / "munge"
        daemons.append(
            subprocess.Popen(
                [
                    "runuser",
                    "-u",
                    "munge",
                    "--",
                    _program("munged"),
                    "--foreground",
                    f"--socket={munge / 'munge.socket'}",
                    f"--pid-file={munge / 'munged.pid'}",
                    f"--log-file={munge / 'munged.log'}",
                    f"--seed-file={munge / 'seed'}",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        time.sleep(0.5)
        for program in ("slurmctld", "slurmd"):
            daemons.append(
                subprocess.Popen(
                    [_program(program), "-D", "-f", env["SLURM_CONF"]],
                    env=env,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
            time.sleep(1.0)
        _wait_idle(env, timeout=30)
        yield env
    finally:
        subprocess.run(["scancel", "--user=root"], env=env, capture_output=True, check=False)
        for daemon in reversed(daemons):
            daemon.terminate()
            try:
                daemon.wait(timeout=15)
            except subprocess.TimeoutExpired:
                daemon.kill()
                daemon.wait()
        shutil.rmtree(root, ignore_errors=True)


def wait_for_jobs(env: dict[str, str], timeout: float) -> None:
    """Until the queue is empty (every job and its dependents done)."""
    ends = time.monotonic() + timeout
    while time.monotonic() < ends:
        queue = subprocess.run(["squeue", "-h"], env=env, capture_output=True, text=True).stdout.strip()
        if not queue:
            return
        time.sleep(1.0)
    raise TimeoutError(f"Slurm jobs still queued after {timeout:g}s:\n{queue}")
