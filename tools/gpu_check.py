"""The GPU session's whole plan as one script: what a lent GPU machine must run, in order of value.

Instructors run the reference solutions on GPU nodes, and that path has only run on a simulated node.
A GPU session gets about 15 minutes of device time, machine start included, so everything it must
show runs from this one prepared command, each step under its own time limit, each step's output
kept even when a later one fails or the whole run is cut off:

    python3 tools/gpu_check.py --out "$OUT"          # on the GPU machine (the device tool sets $OUT)
    python3 tools/gpu_check.py --out /tmp/gpu-dry    # here, on a CPU: the GPU steps say why they skip

The steps (see the README's "GPU status" for what they are meant to show):
1. `grader doctor --gpu`: CUDA, the GPU count, NCCL's version, a 2-rank NCCL all-reduce with its
   bus bandwidth (on one GPU, doctor says why it cannot run one), P2P.
2. `grader check --solutions --all --backend nccl --world-size N`, N = the GPU count.
3. `pytest tests/instructor/test_gpu.py`.
4. `grader grade` of a solution and a stub with `--backend nccl`, in the default sandbox: the device
   nodes bound in, the stub scoring 0.
5. `benchmarks/bench_engine.py`: the engine's cost on that machine's CPU cores (gloo), beside the
   NCCL figures of steps 1 and 2.

The GPU machine has torch but not nbformat (it reaches no package index): carry wheels made here
with `pip download --only-binary=:all: --python-version 3.12 -d .gpu-wheels nbformat` (the folder
is ignored by git; name it in the device tool's `carry`), and step 0 installs them from that folder.
Every step's command, exit status, time and output land in OUT/summary.md and OUT/NN_step.log.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WHEELS = REPO / ".gpu-wheels"


@dataclass(frozen=True)
class Step:
    name: str
    argv: list[str]
    seconds: int
    needs_gpu: bool = True


def gpu_count() -> int:
    """CUDA GPUs visible, asked of a child so that this script never holds a CUDA context."""
    probe = "import torch; print(torch.cuda.device_count() if torch.cuda.is_available() else 0)"
    try:
        done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
        return int(done.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, ValueError, IndexError):
        return 0


def steps(gpus: int, scratch: Path) -> list[Step]:
    grader = [sys.executable, "-m", "grader"]
    world = str(max(gpus, 1))
    solution, stub = scratch / "solution", scratch / "stub"
    return [
        Step("doctor", [*grader, "doctor", "--gpu"], 150),
        Step(
            "solutions_on_nccl",
            [*grader, "check", "--solutions", "--all", "--backend", "nccl", "--world-size", world],
            240,
        ),
        Step(
            "gpu_tests",
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "tests/instructor/test_gpu.py"],
            180,
        ),
        Step(
            "batch_on_nccl",
            [
                *grader,
                "grade",
                str(solution),
                str(stub),
                "--out",
                str(scratch / "graded"),
                "--backend",
                "nccl",
                "--world-size",
                world,
                "-j",
                "1",
                "--timeout",
                "150",
            ],
            200,
        ),
        Step(
            "engine_benchmark",
            [sys.executable, "benchmarks/bench_engine.py", "--repeats", "3", "--no-solutions"],
            150,
            needs_gpu=False,
        ),
    ]


def prepare(scratch: Path) -> None:
    """The two submissions of step 4: the reference solutions and the untouched stubs."""
    shutil.copytree(REPO / "solutions", scratch / "solution")
    shutil.copytree(REPO / "exercises", scratch / "stub", ignore=shutil.ignore_patterns("*.toml", "__pycache__"))


def install_missing() -> str:
    """nbformat from the carried wheels where the machine lacks it; what was done, in words."""
    if importlib.util.find_spec("nbformat") is not None:
        return "nbformat present"
    if not WHEELS.is_dir():
        return f"nbformat missing and no {WHEELS.name}/ carried: the grader cannot start"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--find-links", str(WHEELS), "nbformat"],
        capture_output=True,
        text=True,
    )
    return "nbformat installed from the carried wheels" if done.returncode == 0 else done.stderr[-2000:]


def run_step(number: int, step: Step, gpus: int, out: Path, env: dict[str, str]) -> str:
    """Run one step under its limit; its log is written whatever happens. Returns its summary row."""
    log = out / f"{number:02d}_{step.name}.log"
    command = " ".join(step.argv)
    if step.needs_gpu and gpus == 0:
        log.write_text(f"$ {command}\nskipped: no CUDA GPU visible\n")
        return f"| {number} | {step.name} | skipped: no CUDA GPU visible | - |"
    started = time.monotonic()
    try:
        done = subprocess.run(step.argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=step.seconds)
        status, output = f"exit {done.returncode}", done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        status = f"timed out after {step.seconds} s"
        output = "".join(
            part.decode(errors="replace") if isinstance(part, bytes) else (part or "")
            for part in (exc.stdout, exc.stderr)
        )
    seconds = time.monotonic() - started
    log.write_text(f"$ {command}\n{status} in {seconds:.1f} s\n\n{output}")
    return f"| {number} | {step.name} | {status} | {seconds:.1f} s |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "gpu-check")))
    parser.add_argument("--only", help="comma-separated step names (default: all)")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    installed = install_missing()
    gpus = gpu_count()
    env = {**os.environ, "PYTHONPATH": str(REPO), "NO_COLOR": "1", "GRADER_COURSE": str(REPO)}
    rows = ["| # | step | result | wall |", "|---|---|---|---|"]
    summary = args.out / "summary.md"
    with tempfile.TemporaryDirectory(prefix="gpu-check-") as scratch:
        prepare(Path(scratch))
        chosen = [s for s in steps(gpus, Path(scratch)) if not args.only or s.name in args.only.split(",")]
        header = f"# GPU check\n\n{installed}; {gpus} CUDA GPU(s) visible; python {sys.version.split()[0]}\n\n"
        for number, step in enumerate(chosen, 1):
            rows.append(run_step(number, step, gpus, args.out, env))
            summary.write_text(header + "\n".join(rows) + "\n")  # kept if the run is cut off later
    print(summary.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
