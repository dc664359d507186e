"""A check whose exercise needs a torch API this torch lacks is skipped with the reason; a name the catalog
does not list fails as any other error."""

from __future__ import annotations

import dataclasses

import pytest
from conftest import REPO, describe

from grader.judge.missing_api import absent_names
from grader.judge.runner import ALL_CHECKS, GradeOptions, grade_exercise

API = "torch.distributed.no_such_module.Schedule"


@pytest.mark.parametrize(
    ("message", "names"),
    [
        ("No module named 'torch.distributed.no_such_module'", ["torch.distributed.no_such_module"]),
        (
            "cannot import name 'Schedule' from 'torch.distributed.pipelining' (/x/__init__.py)",
            ["torch.distributed.pipelining.Schedule"],
        ),
        ("module 'torch.distributed.fsdp' has no attribute 'fully_shard'", ["torch.distributed.fsdp.fully_shard"]),
        ("'NoneType' object has no attribute 'grad'", []),
    ],
)
def test_the_missing_name_is_read_from_pythons_message(message, names):
    assert absent_names(message) == names


def _ex01_importing(module: str, tmp_path):
    solution = (REPO / "solutions" / "ex01_process_group.py").read_text()
    path = tmp_path / "ex01_process_group.py"
    path.write_text(solution.replace("import os\n", f"import os\n\nimport {module}\n", 1))
    return path


def _grade(engine, catalog, path):
    """ex01, as if the catalog said it needs an API no torch has."""
    exercise = dataclasses.replace(catalog.get("ex01"), apis=(API,))
    return grade_exercise(engine, exercise, path, GradeOptions(world_sizes=(2,), visibilities=ALL_CHECKS, seed=1))


def test_a_check_that_needs_an_api_this_torch_lacks_is_skipped_with_the_reason(engine, catalog, tmp_path):
    results = _grade(engine, catalog, _ex01_importing("torch.distributed.no_such_module", tmp_path))
    assert results and {r.status for r in results} == {"skipped"}, describe(results)
    message = results[0].message
    assert "has no torch.distributed.no_such_module, and ex01_process_group needs " + API in message
    assert "pip install torch==2.13.0" in message and "grader doctor" in message


def test_a_missing_name_the_catalog_does_not_list_fails_as_before(engine, catalog, tmp_path):
    results = _grade(engine, catalog, _ex01_importing("torch.distributed.misspelt_module", tmp_path))
    assert results and "skipped" not in {r.status for r in results}, describe(results)
