"""Least privilege in the sandbox: a rank gets a bounded number of open files (docs/SECURITY.md, "How")."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest
from conftest import REPO

from grader.engine import Engine, Job
from grader.engine.processes import RANK_LIMITS_VARIABLE
from grader.sandbox import open_sandbox, unprivileged
from grader.sandbox.limits import Limits, rank_limits

JOIN = "grader.checks.ex01_process_group.workers:join_and_leave"
ARGS = {"summands": [1], "broadcast": [1]}
# A student's ex01 whose setup_ddp runs BODY, which fills `facts`, and sends them back as its error.
STUDENT = """\
import errno, json, os, resource


def setup_ddp(rank, world_size, backend=None):
    facts = {{}}
{body}
    raise RuntimeError("FACTS" + json.dumps(facts))


def cleanup_ddp():
    pass
"""


@pytest.fixture(scope="module")
def sandboxed(bwrap_available, tmp_path_factory: pytest.TempPathFactory):
    """A warm engine in a bubblewrap sandbox with the default limits, and its workspace."""
    out = tmp_path_factory.mktemp("out")
    sandbox = open_sandbox("bubblewrap", REPO, out)
    workspace = Path(tempfile.mkdtemp(dir=out))
    try:
        with Engine(confinement=sandbox.confine(workspace)) as engine:
            yield engine, workspace, sandbox
    finally:
        sandbox.close()


def _inside(sandboxed, name: str, body: str) -> dict:
    """The facts BODY gathers in a sandboxed rank."""
    engine, workspace, _ = sandboxed
    student = workspace / name / "ex01_process_group.py"
    student.parent.mkdir()
    student.write_text(STUDENT.format(body=textwrap.indent(textwrap.dedent(body), "    ")))
    result = engine.run(Job(JOIN, 1, ARGS, student_file=student, deadline=60))
    error = result.ranks[0].error
    assert error and error["message"].startswith("FACTS"), result.ranks[0]
    return json.loads(error["message"].removeprefix("FACTS"))


def test_a_rank_that_opens_20000_files_fails_at_the_limit_and_only_its_run_fails(sandboxed):
    facts = _inside(sandboxed, "fds", """
        held = []
        try:
            for _ in range(20000):
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            facts["errno"] = exc.errno
        facts["held"] = len(held)
        facts["limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)
    """)
    assert facts["errno"] == errno.EMFILE
    assert facts["limit"] == [Limits().open_files, Limits().open_files]
    assert facts["held"] < Limits().open_files
    engine, workspace, _ = sandboxed
    honest = workspace / "honest" / "ex01_process_group.py"
    honest.parent.mkdir()
    shutil.copyfile(REPO / "solutions" / "ex01_process_group.py", honest)
    result = engine.run(Job(JOIN, 2, {"summands": [1, 2], "broadcast": [1, 2]}, student_file=honest, deadline=60))
    assert all(rank.ok for rank in result.ranks), result.ranks


def test_the_ranks_limits_name_the_open_files_in_every_case():
    limits = Limits(scratch_bytes=100, open_files=2048, rank_address_space=300)
    assert rank_limits(limits, capped_by_cgroup=True, gpu=False) == "fsize=100,nofile=2048"
    assert rank_limits(limits, capped_by_cgroup=False, gpu=False) == "fsize=100,nofile=2048,as=300"
    assert rank_limits(limits, capped_by_cgroup=False, gpu=True, processes=7) == "fsize=100,nofile=2048,nproc=7"
    assert 1024 <= Limits().open_files <= 4096


def test_the_zygote_applies_the_open_files_limit():
    code = ("import resource; from grader.engine.zygote import _limit; _limit('fsize=4096,nofile=300'); "
            "print(resource.getrlimit(resource.RLIMIT_NOFILE))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": str(REPO)})
    assert done.stdout.strip() == "(300, 300)", done.stderr


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("setpriv") is None, reason="the user sandbox needs root")
def test_the_user_sandbox_passes_the_open_files_limit(tmp_path):
    sandbox = unprivileged.UserSandbox(tmp_path, Limits(open_files=1500))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    confinement = sandbox.confine(workspace)
    try:
        assert "nofile=1500" in confinement.environment({})[RANK_LIMITS_VARIABLE].split(",")
    finally:
        confinement.close()

