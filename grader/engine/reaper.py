"""A child subreaper around one command: when the command ends (or is told to stop), whatever it
left running below it is killed and named.

The torchrun launcher has no zygote; its agent starts each rank in a session of its own, and a rank
may start processes that detach further. Run as
    python -m grader.engine.reaper RUN_DIR NODE_RANK -- COMMAND...
this process starts COMMAND in a new session, waits for it, and on its end or on SIGTERM kills the
command's group, sweeps every process left below it (`processes.sweep`), writes the strays to
RUN_DIR/strays.nodeN.json with where the ranks started them (`spawn_log`), and exits with the
command's exit code.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from grader.engine import processes, spawn_log

STRAY_GRACE_S = 0.3
POLL_S = 0.02


def strays_file(run_dir: Path, node_rank: int) -> Path:
    return run_dir / f"strays.node{node_rank}.json"


def read_strays(run_dir: Path, node_rank: int) -> list[dict[str, Any]]:
    """What a reaper wrote (bounded; a missing or damaged file means none are known)."""
    try:
        with open(strays_file(run_dir, node_rank), "rb") as file:
            entries = json.loads(file.read(1 << 20))
    except (OSError, ValueError):
        return []
    return [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []


def main(argv: list[str]) -> int:
    run_dir, node_rank, separator, *command = argv
    if separator != "--" or not command:
        raise SystemExit("usage: python -m grader.engine.reaper RUN_DIR NODE_RANK -- COMMAND...")
    processes.prctl(processes.PR_SET_CHILD_SUBREAPER, 1)
    processes.prctl(processes.PR_SET_PDEATHSIG, signal.SIGKILL)
    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    child = subprocess.Popen(command, start_new_session=True)
    while child.poll() is None and not stop:
        time.sleep(POLL_S)
    if child.poll() is None:
        processes.killpg(child.pid)
        child.wait()
    strays = processes.sweep(0.0 if stop else STRAY_GRACE_S)
    origins = spawn_log.read(Path(run_dir))
    staged = strays_file(Path(run_dir), int(node_rank)).with_suffix(".staged")
    staged.write_text(json.dumps([{**s.to_json(), "origin": origins.get(s.pid, "")} for s in strays]))
    staged.rename(strays_file(Path(run_dir), int(node_rank)))
    return child.returncode if child.returncode >= 0 else 128 - child.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
