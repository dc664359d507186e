"""What a TorchDispatchMode on every rank costs (issue 31: may the collective-mismatch watch observe at the
dispatch level?). Not a timed test.

    python benchmarks/bench_dispatch_mode.py [--rounds 3]

Copies this checkout's HEAD twice (`git archive`) into a temporary folder. In both, every rank times its
worker (CPU seconds, `time.process_time`, appended to a file); in one, a TorchDispatchMode that only tests
each op's namespace, the least a dispatch-level watch would do, is entered before the worker. Runs `grader
check --solutions --all` in each, alternately, so both meet the same load; prints each run's wall time and
its workers' CPU, the medians, and the exercises whose workers gained the most CPU. The workers' CPU is
what the mode adds to; on a shared machine it varies far less than wall time.

Measured 2026-11-28 on the 2-core machine shared with other work, load 7-12, 3 rounds: the workers' CPU
10.7 s median (10.5-11.3) without the mode, 13.9 s (12.0-14.5) with it, +29%; wall 31.8 s (28.7-44.1) and
45.7 s (21.5-50.9), which that load leaves unresolved. Most added: ex17 +0.45 s, ex15 +0.44 s, ex05
+0.38 s, ex18 +0.33 s, ex13 +0.23 s. The same steps by hand, 5 rounds at load 6-12: 10.2 s and 12.7 s (+24%).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RUNTIME = Path("grader/engine/rank_runtime.py")
RUN = '    report.run(worker, spec["kwargs"])\n'
TIMED = """    _timed_worker = worker

    def worker(*args, **kwargs):
        import time as _time

        started = _time.process_time()
        try:
            return _timed_worker(*args, **kwargs)
        finally:
            with open({log!r}, "a") as log:
                log.write(f"{{spec['target']}} {{_time.process_time() - started}}\\n")

"""
MODE = """    from torch.utils._python_dispatch import TorchDispatchMode

    class _Namespaces(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.namespace in ("c10d", "_c10d_functional", "_c10d_functional_autograd"):
                pass
            return func(*args, **(kwargs or {}))

    _Namespaces().__enter__()
"""


def prepare(folder: Path, log: Path, mode: bool) -> None:
    """A copy of HEAD whose ranks time their workers, with the mode entered before them or not."""
    folder.mkdir()
    archive = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
    runtime = folder / RUNTIME
    text = runtime.read_text()
    if text.count(RUN) != 1:
        sys.exit(f"{RUNTIME} no longer starts the worker with `{RUN.strip()}`: update this benchmark")
    runtime.write_text(text.replace(RUN, TIMED.format(log=str(log)) + (MODE if mode else "") + RUN))


def run(course: Path, log: Path) -> tuple[float, dict[str, float]] | None:
    """Wall seconds of one `grader check --solutions --all`, and its workers' CPU per exercise; None if it failed."""
    log.unlink(missing_ok=True)
    env = {**os.environ, "PYTHONPATH": str(course), "GRADER_COURSE": str(course), "NO_COLOR": "1"}
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "grader", "check", "--solutions", "--all"],
        cwd=course,
        env=env,
        capture_output=True,
        text=True,
    )
    wall = time.monotonic() - started
    if done.returncode != 0:
        print(f"{course.name}: exit {done.returncode}, not counted\n{done.stdout[-1500:]}", file=sys.stderr)
        return None
    cpu: dict[str, float] = defaultdict(float)
    for line in log.read_text().splitlines():
        target, seconds = line.rsplit(" ", 1)
        cpu[target.split(":")[0].removeprefix("grader.checks.").removesuffix(".workers")] += float(seconds)
    return wall, cpu


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    with tempfile.TemporaryDirectory() as temporary:
        root = Path(temporary)
        cases = {"without": False, "with the mode": True}
        for name, mode in cases.items():
            prepare(root / name.replace(" ", "_"), root / f"{name.replace(' ', '_')}.log", mode)
        measured: dict[str, list[tuple[float, dict[str, float]]]] = {name: [] for name in cases}
        for round_ in range(1, args.rounds + 1):
            for name in cases:
                folder = name.replace(" ", "_")
                result = run(root / folder, root / f"{folder}.log")
                if result is not None:
                    measured[name].append(result)
                    wall, cpu = result
                    said = f"wall {wall:.1f} s, workers' CPU {sum(cpu.values()):.2f} s"
                    print(f"round {round_} {name}: {said}, load {os.getloadavg()[0]:.1f}")
    if not all(measured.values()):
        return 1
    print("| ranks | wall median | range | workers' CPU median | range |\n|---|---|---|---|---|")
    medians: dict[str, dict[str, float]] = {}
    for name, results in measured.items():
        walls, sums = [w for w, _ in results], [sum(c.values()) for _, c in results]
        medians[name] = {k: statistics.median(c.get(k, 0.0) for _, c in results) for k in results[0][1]}
        print(
            f"| {name} | {statistics.median(walls):.1f} s | {min(walls):.1f}-{max(walls):.1f} s "
            f"| {statistics.median(sums):.2f} s | {min(sums):.2f}-{max(sums):.2f} s |"
        )
    without, with_mode = medians.values()
    grown = sorted(without, key=lambda k: without[k] - with_mode.get(k, 0.0))[:5]
    print("most added: " + ", ".join(f"{k} {with_mode.get(k, 0.0) - without[k]:+.2f} s" for k in grown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
