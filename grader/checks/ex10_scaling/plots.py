"""Plots for exercise 10, drawn from the formulas in an exercise file (yours or the solution):
speedup against the number of GPUs over NVLink, PCIe and InfiniBand, and all-reduce time against
model size. matplotlib is an optional extra: `pip install -e .[plots]`.

    python -m grader.checks.ex10_scaling.plots OUT_DIR [--file exercises/ex10_scaling.py]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from types import ModuleType

from grader.engine.rank_runtime import StudentCodeError, load_module_from_file

# Per-link bandwidth in bytes per second (orders of magnitude, not one product's datasheet).
LINKS = {"NVLink (300 GB/s)": 300e9, "InfiniBand HDR (25 GB/s)": 25e9, "PCIe 4.0 x16 (16 GB/s)": 16e9}
GRADIENT_BYTES = 4  # fp32 gradients
PARAMS = 1.3e9  # the model of the speedup plot
COMPUTE_SECONDS = 1.0  # forward + backward per step at a fixed per-GPU batch
GPUS = [1, 2, 4, 8, 16, 32, 64, 128]
MODEL_SIZES = [1e7 * 2**i for i in range(13)]  # 10M to 41B parameters


class PlotsUnavailable(Exception):
    """matplotlib is not installed."""


def _pyplot() -> ModuleType:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable("the plots need matplotlib, an optional extra: pip install -e '.[plots]'") from exc
    matplotlib.use("Agg")  # files only, no display needed
    import matplotlib.pyplot as plt

    return plt


def speedup(formulas: ModuleType, gpus: int, bandwidth: float) -> float:
    """Weak scaling without overlap: n GPUs do n steps' work in one step plus one all-reduce."""
    communication = formulas.allreduce_seconds(PARAMS * GRADIENT_BYTES, gpus, bandwidth) if gpus > 1 else 0.0
    return gpus * COMPUTE_SECONDS / (COMPUTE_SECONDS + communication)


def write_plots(formulas: ModuleType, out_dir: Path) -> list[Path]:
    """Draw both figures as PNG files in out_dir; returns their paths."""
    plt = _pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    figure, axes = plt.subplots(figsize=(6, 4))
    axes.plot(GPUS, GPUS, "k--", label="ideal")
    for name, bandwidth in LINKS.items():
        axes.plot(GPUS, [speedup(formulas, n, bandwidth) for n in GPUS], marker="o", label=name)
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="GPUs",
        ylabel="speedup",
        title=f"Data parallel speedup, {PARAMS / 1e9:g}B parameters, {COMPUTE_SECONDS:g} s compute/step",
    )
    axes.legend()
    speedup_png = out_dir / "speedup_vs_gpus.png"
    figure.savefig(speedup_png, dpi=120, bbox_inches="tight")
    plt.close(figure)

    figure, axes = plt.subplots(figsize=(6, 4))
    for name, bandwidth in LINKS.items():
        times = [formulas.allreduce_seconds(p * GRADIENT_BYTES, 8, bandwidth) for p in MODEL_SIZES]
        axes.plot(MODEL_SIZES, times, marker="o", label=name)
    axes.set(
        xscale="log",
        yscale="log",
        xlabel="parameters",
        ylabel="seconds",
        title="Ring all-reduce of fp32 gradients on 8 GPUs",
    )
    axes.legend()
    allreduce_png = out_dir / "allreduce_time_vs_model_size.png"
    figure.savefig(allreduce_png, dpi=120, bbox_inches="tight")
    plt.close(figure)
    return [speedup_png, allreduce_png]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m grader.checks.ex10_scaling.plots", description="Draw exercise 10's scaling plots as PNG files."
    )
    parser.add_argument("out_dir", type=Path)
    parser.add_argument(
        "--file", type=Path, default=Path("exercises/ex10_scaling.py"), help="the exercise file whose formulas to plot"
    )
    args = parser.parse_args(argv)
    try:
        formulas = load_module_from_file(args.file.resolve())
        for path in write_plots(formulas, args.out_dir):
            print(path)
    except (PlotsUnavailable, StudentCodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except NotImplementedError as exc:
        print(f"error: {exc}() is not implemented yet in {args.file}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
