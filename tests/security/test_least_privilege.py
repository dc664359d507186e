"""Least privilege in the sandbox: a rank gets a bounded number of open files, a generated /etc with
no account of the host's, and of the host only the files it loads (docs/SECURITY.md, "How")."""

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
from grader.sandbox import host_files, open_sandbox, rank_view, unprivileged
from grader.sandbox.bubblewrap import python_binds
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
    assert sandbox is not None
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
    facts = _inside(
        sandboxed,
        "fds",
        """
        held = []
        try:
            for _ in range(20000):
                held.append(os.open("/dev/null", os.O_RDONLY))
        except OSError as exc:
            facts["errno"] = exc.errno
        facts["held"] = len(held)
        facts["limit"] = resource.getrlimit(resource.RLIMIT_NOFILE)
    """,
    )
    assert facts["errno"] == errno.EMFILE
    assert facts["limit"] == [Limits().open_files, Limits().open_files]
    assert facts["held"] < Limits().open_files
    engine, workspace, _ = sandboxed
    honest = workspace / "honest" / "ex01_process_group.py"
    honest.parent.mkdir()
    shutil.copyfile(REPO / "solutions" / "ex01_process_group.py", honest)
    result = engine.run(Job(JOIN, 2, {"summands": [1, 2], "broadcast": [1, 2]}, student_file=honest, deadline=60))
    assert all(rank.ok for rank in result.ranks), result.ranks


def test_etc_holds_only_the_generated_files_and_no_host_account(sandboxed):
    facts = _inside(
        sandboxed,
        "etc",
        """
        facts["etc"] = sorted(os.listdir("/etc"))
        facts["passwd"] = open("/etc/passwd").read()
        facts["shadow"] = os.path.exists("/etc/shadow")
        facts["uid"], facts["gid"] = os.getuid(), os.getgid()
    """,
    )
    generated = rank_view.etc_files(facts["uid"], facts["gid"])
    assert facts["etc"] == sorted([*generated, *(["ld.so.cache"] if Path("/etc/ld.so.cache").is_file() else [])])
    assert facts["passwd"] == generated["passwd"]
    assert "root:x:0:0:root:/root" not in facts["passwd"]
    host = set(Path("/etc/passwd").read_text().splitlines()) - set(generated["passwd"].splitlines())
    assert not host & set(facts["passwd"].splitlines())
    assert facts["shadow"] is False


def test_nothing_of_the_host_the_ranks_do_not_load_is_visible(sandboxed):
    _, workspace, sandbox = sandboxed
    kind = sandbox.kind
    libc = Path(next(f for f in kind.files if Path(f).name.startswith("libc.so")))
    candidates = [
        "/usr/bin/env",
        "/usr/bin/apt",
        "/usr/share",
        "/bin/sh",
        "/home",
        "/etc/shadow",
        str(Path.home() / ".bashrc"),
        str(Path.home() / ".ssh"),
        str(REPO / ".git"),
        str(REPO / "solutions"),
    ]
    on_host = [path for path in candidates if os.path.lexists(path)]
    assert len(on_host) >= 5, on_host
    bound = {
        Path(p).relative_to(libc.parent).parts[0]
        for p in [*kind.files, *kind.links]
        if Path(p).is_relative_to(libc.parent)
    }
    facts = _inside(
        sandboxed,
        "host",
        f"""
        facts["seen"] = [path for path in {on_host!r} if os.path.lexists(path)]
        facts["libc"] = os.path.isfile({str(libc)!r})
        facts["unbound"] = sorted(set(os.listdir({str(libc.parent)!r})) - set({sorted(bound)!r}))[:20]
        facts["top"] = sorted(os.listdir("/"))
    """,
    )
    assert facts["seen"] == []
    assert facts["libc"] and facts["unbound"] == []
    binds = [*python_binds(), *map(Path, [*kind.files, *kind.links]), sandbox.view, workspace]
    assert set(facts["top"]) <= {"etc", "tmp", "dev", "proc", *(path.parts[1] for path in binds)}, facts["top"]


def test_the_ranks_limits_name_the_open_files_in_every_case():
    limits = Limits(scratch_bytes=100, open_files=2048, rank_address_space=300)
    assert rank_limits(limits, capped_by_cgroup=True, gpu=False) == "fsize=100,nofile=2048"
    assert rank_limits(limits, capped_by_cgroup=False, gpu=False) == "fsize=100,nofile=2048,as=300"
    assert rank_limits(limits, capped_by_cgroup=False, gpu=True, processes=7) == "fsize=100,nofile=2048,nproc=7"
    assert 1024 <= Limits().open_files <= 4096


def test_the_zygote_applies_the_open_files_limit():
    code = (
        "import resource; from grader.engine.zygote import _limit; _limit('fsize=4096,nofile=300'); "
        "print(resource.getrlimit(resource.RLIMIT_NOFILE))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
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


def test_routes_recreate_the_symlinks_on_the_way_and_bind_only_real_files(tmp_path):
    (tmp_path / "usr" / "lib").mkdir(parents=True)
    (tmp_path / "usr" / "lib" / "libx.so.1.2").write_text("elf")
    (tmp_path / "usr" / "lib" / "libx.so.1").symlink_to("libx.so.1.2")
    (tmp_path / "lib").symlink_to("usr/lib")
    (tmp_path / "env").mkdir()
    (tmp_path / "env" / "python").symlink_to(tmp_path / "lib" / "libx.so.1")
    links, files = host_files.routes(
        [str(tmp_path / "lib" / "libx.so.1"), str(tmp_path / "env" / "python")], [tmp_path / "env"]
    )
    assert links == {str(tmp_path / "lib"): "usr/lib", str(tmp_path / "usr" / "lib" / "libx.so.1"): "libx.so.1.2"}
    assert files == [str(tmp_path / "usr" / "lib" / "libx.so.1.2")]


def test_on_a_gpu_the_drivers_libraries_are_found_in_the_loaders_cache():
    listing = (
        "\tlibcuda.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libcuda.so.1\n"
        "\tlibnvidia-ml.so.1 (libc6,x86-64) => /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1\n"
        "\tlibcudart.so.12 (libc6,x86-64) => /usr/local/cuda/lib64/libcudart.so.12\n"
        "\tlibz.so.1 (libc6,x86-64) => /lib/x86_64-linux-gnu/libz.so.1\n"
    )
    assert host_files.driver_paths(listing) == [
        "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
        "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1",
    ]


def test_a_rank_can_read_neither_the_zygotes_memory_nor_its_environment(sandboxed):
    """The zygote is not dumpable: a rank, the same user without capabilities, is refused what it
    could otherwise read of its parent (its own /proc entries stay readable)."""
    facts = _inside(
        sandboxed,
        "zygote",
        """
        parent = os.getppid()
        for what in ("environ", "mem", "maps"):
            try:
                with open(f"/proc/{parent}/{what}", "rb") as f:
                    f.read(1)
                facts[what] = "read"
            except OSError as exc:
                facts[what] = errno.errorcode[exc.errno]
        facts["own"] = len(open("/proc/self/environ", "rb").read()) > 0
    """,
    )
    assert facts["own"] is True
    assert {facts["environ"], facts["mem"], facts["maps"]} <= {"EACCES", "EPERM"}, facts
