"""`grader check --solutions --all` wall time, this checkout beside another, in one run.

    python benchmarks/bench_check.py --baseline DIR [--rounds 3]

DIR is another checkout of the course (`git worktree add DIR COMMIT`). The two run alternately,
round after round, each as a fresh `python -m grader` with its own checkout on PYTHONPATH, so
both meet the same machine load; the table gives each one's median and range. Each command's
first lines are printed when it fails, and a failing run is not timed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
COMMAND = ("check", "--solutions", "--all")


def timed(course: Path) -> float | None:
    """Seconds one `grader check --solutions --all` of `course` took, or None where it failed."""
    env = {**os.environ, "PYTHONPATH": str(course), "GRADER_COURSE": str(course), "NO_COLOR": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grader", *COMMAND], cwd=course, env=env, capture_output=True, text=True
    )
    seconds = time.monotonic() - started
    if done.returncode != 0:
        print(f"{course}: exit {done.returncode}\n{(done.stdout + done.stderr)[-2000:]}", file=sys.stderr)
        return None
    return seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", type=Path, required=True, help="another checkout of the course")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not (args.baseline / "grader").is_dir():
        parser.error(f"{args.baseline} is not a checkout of the course (no grader/ in it)")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    courses = {"this checkout": REPO, f"baseline ({args.baseline})": args.baseline.resolve()}
    times: dict[str, list[float]] = {name: [] for name in courses}
    for _ in range(args.rounds):
        for name, course in courses.items():
            seconds = timed(course)
            if seconds is not None:
                times[name].append(seconds)
    print(f"`grader {' '.join(COMMAND)}`, {args.rounds} round(s), load average {os.getloadavg()[0]:.1f}")
    print("| checkout | median | range |\n|---|---|---|")
    for name, measured in times.items():
        if measured:
            print(f"| {name} | {statistics.median(measured):.1f} s | {min(measured):.1f}-{max(measured):.1f} s |")
        else:
            print(f"| {name} | failed | - |")
    return 0 if all(times.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
