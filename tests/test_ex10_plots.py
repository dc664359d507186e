"""Exercise 10's optional plots: written as PNG files from the solution's formulas when matplotlib
is installed; a clear error (not a traceback) when it is not."""

from __future__ import annotations

import importlib.util

import pytest
from conftest import REPO

from grader.checks.ex10_scaling import plots

SOLUTION = REPO / "solutions" / "ex10_scaling.py"
HAS_MATPLOTLIB = importlib.util.find_spec("matplotlib") is not None


@pytest.mark.skipif(not HAS_MATPLOTLIB, reason="matplotlib is an optional extra ('plots'), not installed")
def test_plots_are_png_files(tmp_path):
    assert plots.main([str(tmp_path), "--file", str(SOLUTION)]) == 0
    written = sorted(tmp_path.glob("*.png"))
    assert [p.name for p in written] == ["allreduce_time_vs_model_size.png", "speedup_vs_gpus.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


@pytest.mark.skipif(HAS_MATPLOTLIB, reason="matplotlib is installed: the missing-extra message cannot occur")
def test_missing_matplotlib_is_a_clear_error(tmp_path, capsys):
    assert plots.main([str(tmp_path), "--file", str(SOLUTION)]) == 2
    assert "pip install -e '.[plots]'" in capsys.readouterr().err


def test_speedup_is_ideal_with_infinite_bandwidth():
    formulas = plots.load_module_from_file(SOLUTION)
    assert plots.speedup(formulas, 8, float("inf")) == pytest.approx(8.0)
    assert plots.speedup(formulas, 8, 16e9) < plots.speedup(formulas, 8, 300e9) < 8.0


def test_unwritten_stub_is_reported(tmp_path, capsys):
    if not HAS_MATPLOTLIB:
        pytest.skip("matplotlib is an optional extra ('plots'), not installed: the stub is never called")
    assert plots.main([str(tmp_path), "--file", str(REPO / "exercises" / "ex10_scaling.py")]) == 2
    assert "not implemented yet" in capsys.readouterr().err
