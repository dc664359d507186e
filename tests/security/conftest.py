"""Sandbox tests need bubblewrap: skipped (with the reason) on a machine without it, failed under CI,
where .ci/run installs it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from grader.sandbox import bubblewrap
from instructor import support


@pytest.fixture(scope="session")
def hidden_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the course: attacks aim at its real paths, and the tests hash it."""
    return support.course_copy(tmp_path_factory.mktemp("course"))


@pytest.fixture(scope="session")
def bwrap_available() -> None:
    problem = bubblewrap.unavailable()
    if problem is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"the sandbox tests must run under CI: {problem}")
    pytest.skip(problem)
