"""The GPU session's prepared script (tools/gpu_check.py) runs here as it would there: GPU steps skip
with the reason on a CPU machine, and every step's log and summary row survive a failure or a
step that runs out of time."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SPEC = importlib.util.spec_from_file_location("gpu_check", REPO / "tools" / "gpu_check.py")
assert SPEC is not None and SPEC.loader is not None
gpu_check = importlib.util.module_from_spec(SPEC)
sys.modules["gpu_check"] = gpu_check  # its dataclasses look their module up
SPEC.loader.exec_module(gpu_check)


def test_on_a_cpu_machine_the_gpu_steps_say_why_they_skip(tmp_path: Path) -> None:
    if gpu_check.gpu_count():
        return  # a GPU machine runs them instead
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "tools" / "gpu_check.py"),
            "--out",
            str(tmp_path),
            "--only",
            "doctor,batch_on_nccl",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    summary = (tmp_path / "summary.md").read_text()
    assert "0 CUDA GPU(s) visible" in summary
    assert "| 1 | doctor | skipped: no CUDA GPU visible |" in summary
    assert "| 2 | batch_on_nccl | skipped: no CUDA GPU visible |" in summary
    assert "grade" in (tmp_path / "02_batch_on_nccl.log").read_text()


def test_a_step_keeps_its_output_whether_it_fails_or_runs_out_of_time(tmp_path: Path) -> None:
    failing = gpu_check.Step("fails", [sys.executable, "-c", "print('said before'); raise SystemExit(3)"], 30, False)
    row = gpu_check.run_step(1, failing, 0, tmp_path, {})
    assert "| 1 | fails | exit 3 |" in row and "said before" in (tmp_path / "01_fails.log").read_text()
    slow = gpu_check.Step(
        "slow", [sys.executable, "-u", "-c", "print('started'); import time; time.sleep(30)"], 2, False
    )
    row = gpu_check.run_step(2, slow, 0, tmp_path, {})
    assert "timed out after 2 s" in row and "started" in (tmp_path / "02_slow.log").read_text()
