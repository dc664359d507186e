"""tools/knock_on_survey.py grades a failing mistake with every check and says what it cost."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

SPEC = importlib.util.spec_from_file_location(
    "knock_on_survey", Path(__file__).resolve().parent.parent / "tools" / "knock_on_survey.py"
)
assert SPEC is not None and SPEC.loader is not None
knock_on_survey = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(knock_on_survey)


def test_only_mistakes_whose_run_fails_are_surveyed() -> None:
    chosen = {name["name"] for _, name in knock_on_survey.failing_mistakes({"ex09_checkpoint"}, set())}
    assert "loaded_to_a_cuda_device" in chosen
    assert "optimizer_state_not_saved" not in chosen


def test_a_failure_in_load_checkpoint_is_surveyed_as_costing_resume_matches(capsys: pytest.CaptureFixture[str]) -> None:
    assert knock_on_survey.main(["--exercises", "ex09_checkpoint", "--mistakes", "loaded_to_a_cuda_device"]) == 0
    said = capsys.readouterr().out
    assert "ex09_checkpoint:loaded_to_a_cuda_device: failed=['resume_matches'] knocked=[] passed=3" in said, said
