"""`grader check` twice in one shell: the first starts cold, the second gets the warm daemon's zygote.

    python benchmarks/bench_warm.py [--rounds 3] [--pause 5] [-- check --solutions ex03]

Each round uses a daemon folder of its own (so the first check of the round is really the first),
runs the check, waits `--pause` seconds (a student reading the result and editing; the daemon's
next zygote imports torch meanwhile), runs it again, then ends the daemon. A third column runs it
with --no-warm for comparison. The load average is printed before and after: on a busy machine the
figures mean little without it.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
DAEMON = re.compile(r"from daemon (\d+)")


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, str]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grader", *argv, "-v"], cwd=REPO, env=env, capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    if "Traceback" in done.stderr:
        raise SystemExit(f"{' '.join(argv)} crashed:\n{done.stderr[-2000:]}")
    return seconds, done.stdout


def load() -> str:
    return " ".join(Path("/proc/loadavg").read_text().split()[:3]) if Path("/proc/loadavg").exists() else "?"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--pause", type=float, default=5.0, help="seconds between the two checks")
    parser.add_argument("command", nargs="*", default=["check", "--solutions", "ex03"])
    args = parser.parse_args()
    print(f"load average before: {load()} ({os.cpu_count()} CPUs)")
    rows: dict[str, list[float]] = {"first (cold)": [], "second (warm)": [], "--no-warm": []}
    for _ in range(args.rounds):
        with tempfile.TemporaryDirectory() as folder:
            warm_dir = Path(folder) / "warm"
            env = {**os.environ, "GRADER_WARM": "1", "GRADER_WARM_DIR": str(warm_dir), "PYTHONPATH": str(REPO)}
            env["NO_COLOR"] = "1"
            first, _ = timed(args.command, env)
            time.sleep(args.pause)
            second, out = timed(args.command, env)
            plain, _ = timed([*args.command, "--no-warm"], env)
            found = DAEMON.search(out)
            if found is None:
                print(f"the second check was not warm:\n{out[-1500:]}", file=sys.stderr)
                return 1
            os.kill(int(found.group(1)), signal.SIGTERM)
            time.sleep(1.0)  # the daemon ends its zygotes and removes its folder's socket
        for name, value in zip(rows, (first, second, plain)):
            rows[name].append(value)
    print(f"grader {' '.join(args.command)}, {args.rounds} rounds, {args.pause:g} s between the two checks")
    for name, values in rows.items():
        print(f"  {name:14} median {statistics.median(values):5.2f} s  (min {min(values):.2f}, max {max(values):.2f})")
    print(f"load average after: {load()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
