"""A private copy of the course for the attacks to aim at. The sandbox tests' `bwrap_available`
fixture is in tests/conftest.py, shared with the Gradescope tests that run the sandboxed autograder."""

from __future__ import annotations

from pathlib import Path

import pytest
from instructor import support


@pytest.fixture(scope="session")
def hidden_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the course: attacks aim at its real paths, and the tests hash it."""
    return support.course_copy(tmp_path_factory.mktemp("course"))
