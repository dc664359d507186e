"""No trusted worker unpickles what a rank wrote. The workers a check runs with `ctx.inspect` read the files the
student's ranks left (checkpoints); exercises 3 and 9 load theirs with torch.load(weights_only=True), and
exercise 17 reads a DCP checkpoint's `.metadata`, which DCP itself reads with a plain pickle.load, through an
unpickler that builds only what DCP's metadata holds (grader/checks/ex17_dcp_reshard/dcp_metadata.py). A file
naming anything else is refused in a sentence and runs nothing; a real checkpoint is read as DCP reads it."""

from __future__ import annotations

import ast
import importlib
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from conftest import REPO, describe

from grader.checks.ex17_dcp_reshard import workers as ex17_workers
from grader.checks.ex17_dcp_reshard.dcp_metadata import MAX_BYTES, read_keys

REFUSED = "which a checkpoint never holds: the grader does not load it"


class _Opens:
    """Unpickled, it calls open(marker, "w"): a file appears where code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (open, (str(self.marker), "w"))


def _hostile(folder: Path, marker: Path) -> Path:
    folder.mkdir()
    (folder / ".metadata").write_bytes(pickle.dumps(_Opens(marker)))
    return folder


# every trusted worker that reads what ranks wrote, by exercise, and how a test hands it a hostile file there
INSPECTORS = {"ex03_train_ddp": "file", "ex09_checkpoint": "file", "ex17_dcp_reshard": "folder"}


def _inspected() -> set[tuple[str, str]]:
    """(exercise package, worker) for every ctx.inspect(...) in the checks: a new one must join INSPECTORS."""
    found = set()
    for checks in sorted((REPO / "grader" / "checks").glob("*/checks.py")):
        for node in ast.walk(ast.parse(checks.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "inspect":
                found.add((checks.parent.name, ast.unparse(node.args[0])))
    return found


def test_every_inspecting_worker_is_tested_below() -> None:
    assert _inspected() == {(package, "INSPECT_CHECKPOINT") for package in INSPECTORS}


@pytest.mark.parametrize("package", sorted(INSPECTORS))
def test_no_inspecting_worker_runs_what_a_file_names(tmp_path: Path, package: str) -> None:
    marker = tmp_path / "ran"
    workers = importlib.import_module(f"grader.checks.{package}.workers")
    if INSPECTORS[package] == "folder":
        path = _hostile(tmp_path / "checkpoint", marker)
    else:
        path = tmp_path / "checkpoint.pt"
        torch.save(_Opens(marker), path)  # what a rank's torch.save of such an object writes
    facts = workers.inspect_checkpoint(None, str(path))
    assert facts["exists"] and "problem" in facts, facts
    assert not marker.exists(), f"{package}'s trusted worker ran what the file named"


def test_dcp_itself_would_run_what_a_metadata_names(tmp_path: Path) -> None:
    """Why the grader does not use DCP's reader: the same file runs its code there (so the test below can fail)."""
    marker = tmp_path / "ran"
    built: Any = dcp.FileSystemReader(str(_hostile(tmp_path / "checkpoint", marker))).read_metadata()
    built.close()  # what it built: the file open() returned, handed back as if it were the Metadata
    assert marker.exists()


def test_a_metadata_naming_a_callable_is_refused_and_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    keys, problem = read_keys(str(_hostile(tmp_path / "checkpoint", marker)))
    assert keys == [] and problem.startswith("the checkpoint's .metadata holds a ") and problem.endswith(REFUSED)
    assert "open" in problem, problem
    assert not marker.exists(), "the trusted reader ran code the .metadata named"


@pytest.mark.parametrize(
    ("content", "said"),
    [
        (pickle.dumps(os.system), f"holds a {os.system.__module__}.system, {REFUSED}"),
        (pickle.dumps(Path("x")), "is not DCP's Metadata"),  # the path type alone is allowed, and is no Metadata
        (b"not a pickle", "is not one DCP wrote: UnpicklingError"),
        (pickle.dumps({"state_dict_metadata": {}}), "is not DCP's Metadata"),
        (b"\x80\x04\x95" + b"\x00" * 9, "is not one DCP wrote"),
    ],
    ids=["a_function", "a_path", "not_a_pickle", "a_dict", "truncated"],
)
def test_what_is_not_dcps_metadata_is_said_in_a_sentence(tmp_path: Path, content: bytes, said: str) -> None:
    (tmp_path / ".metadata").write_bytes(content)
    keys, problem = read_keys(str(tmp_path))
    assert keys == [] and problem.startswith("the checkpoint's .metadata "), problem
    assert said in problem, problem


def test_a_link_a_fifo_or_an_oversized_metadata_is_not_read(tmp_path: Path) -> None:
    secret = tmp_path / "elsewhere"
    secret.write_bytes(b"x")
    for kind in ("link", "fifo", "large"):
        folder = tmp_path / kind
        folder.mkdir()
        if kind == "link":
            (folder / ".metadata").symlink_to(secret)
        elif kind == "fifo":
            os.mkfifo(folder / ".metadata")  # opened, it would wait for a writer forever
        else:
            with open(folder / ".metadata", "wb") as file:
                file.truncate(MAX_BYTES + 1)
        keys, problem = read_keys(str(folder))
        assert keys == [], kind
        assert ("not a regular file" if kind != "large" else f"is {MAX_BYTES + 1} bytes, more than") in problem


def test_a_real_checkpoint_is_read_as_dcp_reads_it(tmp_path: Path) -> None:
    """Every class a DCP checkpoint of a model and its AdamW state holds is allowed: the keys are DCP's own."""
    model = ex17_workers.make_transformer(0)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": 3}
    with pytest.warns(UserWarning):  # one process, no group: DCP says it saves without one
        dcp.save(state, checkpoint_id=str(tmp_path))
    keys, problem = read_keys(str(tmp_path))
    assert problem == ""
    assert keys == sorted(dcp.FileSystemReader(str(tmp_path)).read_metadata().state_dict_metadata)
    assert "optimizer.state.0.exp_avg" in keys and "epoch" in keys


def test_the_inspecting_worker_lists_links_without_following_them(tmp_path: Path) -> None:
    (tmp_path / "gone").symlink_to(tmp_path / "nowhere")
    (tmp_path / "__0_0.distcp").write_bytes(b"12345")
    facts = ex17_workers.inspect_checkpoint(None, str(tmp_path))  # type: ignore[arg-type]  # reads no context
    assert facts["files"]["__0_0.distcp"] == 5 and "gone" in facts["files"] and "problem" not in facts


OVERWRITES_METADATA = """
import os as _os
import pickle as _pickle

import torch.distributed as _dist

_save = save_checkpoint


class _Opens:
    def __reduce__(self):
        return (open, ({marker!r}, "w"))


def save_checkpoint(model, optimizer, path):
    _save(model, optimizer, path)
    _dist.barrier()
    if _dist.get_rank() == 0:
        with open(_os.path.join(path, ".metadata"), "wb") as file:
            _pickle.dump(_Opens(), file)
"""


def test_a_submission_whose_metadata_runs_code_fails_with_the_sentence_and_runs_nothing(
    grade: Any, tmp_path: Path
) -> None:
    """The saving run (the student's) writes the file and nothing of it reads it; the trusted inspection would."""
    marker = tmp_path / "ran-in-the-grader"
    student = tmp_path / "ex17_dcp_reshard.py"
    source = (REPO / "solutions" / "ex17_dcp_reshard.py").read_text()
    student.write_text(source + OVERWRITES_METADATA.format(marker=str(marker)))
    results = grade("ex17", student, world_sizes=(2,), checks={"every_rank_writes"})
    assert [r.status for r in results] == ["failed"], describe(results)
    assert results[0].message.startswith("the checkpoint's .metadata holds a "), describe(results)
    assert results[0].message.endswith(REFUSED), describe(results)
    assert not marker.exists(), "the grader's trusted worker ran what the student's .metadata named"
