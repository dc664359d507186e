"""The check from Jupyter, in a real kernel (nbclient + ipykernel): what the kernel ran is graded.

One kernel serves the module (started with a PATH that lacks this environment's `bin/`, as a kernel
launched from a desktop may be); each test works in its own folder and defines what it checks, so
the tests do not depend on one another's order (under xdist each worker starts its own kernel).
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import nbformat
import pytest
from conftest import REPO

from grader import notebook_build, notebook_source
from grader.catalog import load_catalog

if TYPE_CHECKING:
    from nbclient import NotebookClient

nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

CATALOG = load_catalog(REPO)
EX02 = CATALOG.get("ex02_data_sharding")
SOLUTION = (REPO / "solutions" / EX02.file).read_text()
STUB = notebook_build.build_notebook(EX02, REPO / "exercises" / EX02.file)
STUB_CODE = next(c.source for c in STUB.cells if notebook_source.is_exercise_cell(c))


class Kernel:
    """Runs cells one by one in a live kernel, as a student does, and returns what they printed."""

    def __init__(self, client: NotebookClient) -> None:
        self.client = client
        self.count = 0  # the execution number of the last cell run: what `In [N]` says

    def run(self, source: str) -> str:
        book = self.client.nb
        book.cells.append(nbformat.v4.new_code_cell(source))
        cell = self.client.execute_cell(book.cells[-1], len(book.cells) - 1)
        self.count = cell.execution_count
        texts = []
        for output in cell.outputs:
            if output.output_type == "stream":
                texts.append(output.text)
            elif output.output_type == "error":
                texts.append(f"{output.ename}: {output.evalue}")
        return "".join(texts)

    def enter(self, folder: Path) -> None:
        self.run(f"import os\nos.chdir({str(folder)!r})")


@pytest.fixture(scope="module")
def kernel() -> Iterator[Kernel]:
    path = os.pathsep.join(
        p
        for p in os.environ.get("PATH", "").split(os.pathsep)
        if Path(p).resolve() != Path(sys.executable).parent.resolve()
    )
    env = {**os.environ, "PATH": path or "/usr/bin:/bin", "GRADER_COURSE": str(REPO)}
    env.pop("JPY_SESSION_NAME", None)
    client = nbclient.NotebookClient(nbformat.v4.new_notebook(), kernel_name="python3", timeout=300, allow_errors=True)
    with client.setup_kernel(env=env):
        yield Kernel(client)


def _save(path: Path, *cells: tuple[str, bool]) -> Path:
    """A built ex02 notebook whose code cells are (source, tagged exercise), then the check cell."""
    book = nbformat.v4.new_notebook()
    book.metadata = STUB.metadata
    book.cells = [STUB.cells[0]]
    book.cells += [
        nbformat.v4.new_code_cell(s, metadata={"tags": ["exercise"] if tagged else []}) for s, tagged in cells
    ]
    book.cells.append(nbformat.v4.new_code_cell(notebook_build.check_cell_source(EX02)))
    nbformat.write(book, path)
    return path


def test_the_magic_grades_an_unsaved_solution_and_says_the_saved_file_differs(kernel, tmp_path):
    _save(tmp_path / "ex02_data_sharding.ipynb", (STUB_CODE, True))
    kernel.enter(tmp_path)
    assert kernel.run("import shutil\nprint(shutil.which('grader'))").strip() == "None", "no grader on PATH"
    kernel.run(SOLUTION)  # typed into the exercise cell and run, never saved
    out = kernel.run("from grader import notebook\n%grader check ex02 --world-size 2")
    assert "public checks passed: 3/3" in out, out
    assert "not implemented" not in out
    assert "warning: the exercise cells of the saved ex02_data_sharding.ipynb differ from what this kernel ran" in out
    assert "save the notebook" in out and "\x1b[" not in out


def test_a_function_redefined_in_an_untagged_cell_is_graded_and_its_missing_tag_said(kernel, tmp_path):
    path = _save(tmp_path / "ex02_data_sharding.ipynb", (STUB_CODE, True), (SOLUTION, False))
    kernel.enter(tmp_path)
    kernel.run(STUB_CODE)
    kernel.run(SOLUTION)
    out = kernel.run(f'from grader import notebook\nnotebook.check("ex02", world_size=2, notebook={str(path)!r})')
    assert "public checks passed: 3/3" in out, out
    assert "make_loader() comes from In [" in out and "cell 3 of ex02_data_sharding.ipynb, which is not tagged" in out


def test_a_solved_copy_grades_itself_not_the_original(kernel, tmp_path):
    """The built notebook, copied by Jupyter, solved and run top to bottom beside the untouched original."""
    shutil.copyfile(_save(tmp_path / "ex02_data_sharding.ipynb", (STUB_CODE, True)), tmp_path / "original")
    copy = nbformat.read(_save(tmp_path / "ex02_data_sharding-Copy1.ipynb", (SOLUTION, True)), as_version=4)
    kernel.enter(tmp_path)
    outputs = [kernel.run(cell.source) for cell in copy.cells if cell.cell_type == "code"]
    assert "public checks passed: 6/6" in outputs[-1], outputs[-1]
    assert "warning" not in outputs[-1], "the copy is saved as run: nothing to warn about"


def test_errors_point_at_the_cell_a_helper_needs_its_tag_and_test_calls_are_named(kernel, tmp_path):
    path = _save(tmp_path / "ex02_data_sharding.ipynb", (STUB_CODE, True))
    kernel.enter(tmp_path)
    kernel.run("def pick_epoch(epoch):\n    return epoch")
    helper = kernel.count
    broken = SOLUTION.replace("loader.sampler.set_epoch(epoch)", "loader.sampler.set_epoch(pick_epoch(epoch))")
    assert broken != SOLUTION
    line = next(n for n, text in enumerate(broken.splitlines(), 1) if "pick_epoch" in text)
    kernel.run(broken + "\nloader = make_loader(list(range(8)), 0, 1, 2)\n")  # a test call, harmless here
    graded = kernel.count
    out = kernel.run(f'from grader import notebook\nnotebook.check("ex02", world_size=2, notebook={str(path)!r})')
    assert f"at In [{graded}], line {line} in start_epoch()" in out, out
    assert f"`pick_epoch` is defined in In [{helper}], which is not tagged `exercise`" in out
    assert f"test call at import: In [{graded}], line {len(broken.splitlines()) + 2} calls make_loader()" in out
    assert "extracted" not in out and "ex02_data_sharding.py" not in out, "the cells, not the joined file"


def test_a_kernel_that_never_ran_the_exercise_checks_the_saved_notebook_and_says_so(kernel, tmp_path):
    ex01 = CATALOG.get("ex01")
    nbformat.write(notebook_build.build_notebook(ex01, REPO / "exercises" / ex01.file), tmp_path / "mine.ipynb")
    kernel.enter(tmp_path)
    out = kernel.run("%load_ext grader.notebook\n%grader check ex01 --world-size 2")
    assert "warning: this kernel has not run a cell that defines setup_ddp(): checking the saved mine.ipynb" in out
    assert "not implemented yet: setup_ddp()" in out, out
