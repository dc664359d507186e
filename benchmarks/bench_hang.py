"""Wall time of `grader check ex04` on a hanging launcher (issue 21: a hang costs one deadline).

Not a timed test. Writes a hanging variant of solutions/ex04_launch.py into a fresh folder and times
`python -m grader check ex04 --path DIR --no-warm` on it, with the grader found on PYTHONPATH (so an
older checkout of the grader can be timed the same way):

    PYTHONPATH=. python benchmarks/bench_hang.py never_exits [--deadline S]

never_exits: the launched processes never exit after sending their result, so the final join waits
forever (only the healthy-ranks worker hangs: a raising rank makes torch's join return).
loops_forever: launch_distributed loops before starting anything (every worker hangs).

Measured 2026-11-26 on the 2-core machine, default deadline (30 s + ex04's 30 s start allowance),
one run at a time at load 3-7: never_exits 123.7 s before issue 21's rule (f040643), 73.1 s after;
loops_forever 125.3 s after (one deadline per worker: launch_identity and launch_failing each hang
once). Four runs at once at load ~8: never_exits 150.5 s before, 87.1 s after; loops_forever 267.1 s
before, 145.0 s after.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {
    "never_exits": [
        ("import torch.multiprocessing as mp\n", "import threading\n\nimport torch.multiprocessing as mp\n"),
        (
            "    results.put((rank, fn(rank, world_size, *args)))\n",
            "    results.put((rank, fn(rank, world_size, *args)))\n    threading.Event().wait()\n",
        ),
    ],
    "loops_forever": [
        ("import torch.multiprocessing as mp\n", "import time\n\nimport torch.multiprocessing as mp\n"),
        (
            "    results = mp.get_context(start_method)",
            "    while True:\n        time.sleep(0.1)\n    results = mp.get_context(start_method)",
        ),
    ],
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=sorted(VARIANTS))
    parser.add_argument("--deadline", type=float, default=None, help="grader check --deadline (default: its own)")
    args = parser.parse_args()
    source = (REPO / "solutions" / "ex04_launch.py").read_text()
    for old, new in VARIANTS[args.variant]:
        assert old in source, old
        source = source.replace(old, new, 1)
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "ex04_launch.py").write_text(source)
        command = [sys.executable, "-m", "grader", "check", "ex04", "--path", folder, "--no-warm"]
        command += ["--deadline", str(args.deadline)] if args.deadline else []
        started = time.perf_counter()
        done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, "GRADER_WARM": "0"})
        seconds = time.perf_counter() - started
    print(done.stdout[-4000:], done.stderr[-2000:], sep="\n")
    print(f"{args.variant}: grader check ex04 took {seconds:.1f} s (exit code {done.returncode})")


if __name__ == "__main__":
    main()
