"""A course copy with a hidden check, built once per test process (it is only read afterwards)."""

from __future__ import annotations

from pathlib import Path

import pytest

from . import support


@pytest.fixture(scope="session")
def hidden_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return support.course_with_hidden_check(tmp_path_factory.mktemp("course"))
