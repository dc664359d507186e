"""A private copy of the course (exercise 2 has a hidden check), built once per test process."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import support


@pytest.fixture(scope="session")
def hidden_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support.course_copy(tmp_path_factory.mktemp("course"))
