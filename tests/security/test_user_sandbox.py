"""The unprivileged-user sandbox (`--sandbox user`): two submissions in one batch, one trying to read and run
the other's files, to see the grader's processes and to leave files and a daemon behind. These need root
(the sandbox makes users) and a Python every user can read: they skip with the reason elsewhere, and fail
under CI (`CI` set), where .ci/run runs them as root."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from instructor import support

from grader.instructor.gradescope import results_folder
from grader.sandbox import unprivileged
from grader.sandbox.limits import DEFAULT_LIMITS, Cgroup
from security.test_process_cap import grade_two

MARKER_PARTS = ("bob-private-", "4417")  # joined only at run time: the attacker's own source never holds it
MARKER = "".join(MARKER_PARTS)
LEFT = "left-by-ada-5309"


def _cannot_run(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"the unprivileged-user sandbox tests must run under CI: {reason}")
    pytest.skip(reason)


@pytest.fixture(scope="module")
def user_course(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A private copy of the course (closed to other users) where the user sandbox can run."""
    if os.geteuid() != 0:
        _cannot_run("the unprivileged-user sandbox makes users of its own: it needs root")
    course = support.course_copy(tmp_path_factory.mktemp("course"))
    problem = unprivileged.unavailable(course, course.parent / "out")
    if problem is not None:
        _cannot_run(problem)
    return course


def _attacker(bob: Path) -> str:
    """Exercise 1 whose rank 0, once its group formed, tries everything on bob, then raises what it found (to its
    own results)."""
    solution = (support.SOLUTIONS / "ex01_process_group.py").read_text()
    attack = f'''
def _attack():
    import os, stat, subprocess, sys, time
    found, marker = [], {MARKER_PARTS[0]!r} + {MARKER_PARTS[1]!r}
    try:
        found.append("READ-BOB: " + (marker in open({str(bob / "ex01_process_group.py")!r}).read()).__str__())
    except OSError as exc:
        found.append("READ-BOB: " + type(exc).__name__)
    run = subprocess.run([sys.executable, {str(bob / "ex01_process_group.py")!r}], capture_output=True, text=True)
    found.append("RUN-BOB: " + str(run.returncode) + (" denied" if "Permission denied" in run.stderr else ""))
    seen = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            seen.append(open(f"/proc/{{pid}}/cmdline", "rb").read().replace(b"\\0", b" ").decode())
        except OSError:
            pass
    found.append("SAW-GRADER: " + str(any(" grade " in line for line in seen)))
    hits, until = [], time.monotonic() + 2  # a bounded search: /tmp may hold whole checkouts and environments
    for root, _, files in os.walk("/tmp"):
        if time.monotonic() > until:
            break
        for name in files:
            if time.monotonic() > until:  # a folder of thousands of files (a virtual environment) ends it too
                break
            try:
                path = os.path.join(root, name)
                status = os.lstat(path)  # a regular file only: opening another test's FIFO would wait for ever
                small = stat.S_ISREG(status.st_mode) and status.st_size < 65536
                if small and marker in open(path, errors="replace").read():
                    hits.append(name)
            except OSError:
                pass
    found.append("FOUND-BOB: " + str(hits))
    for folder in ("/tmp", "/var/tmp", "/dev/shm", os.environ.get("TMPDIR", "/tmp")):
        try:
            os.makedirs(os.path.join(folder, "{LEFT}", "deep"), exist_ok=True)
            with open(os.path.join(folder, "{LEFT}", "deep", "file"), "w") as out:
                out.write("x")
            with open(os.path.join(folder, "{LEFT}.txt"), "w") as out:
                out.write("x")
            os.chmod(os.path.join(folder, "{LEFT}.txt"), 0o777)
        except OSError:
            pass
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            time.sleep(120)
        os._exit(0)
    raise RuntimeError("FINDINGS " + "; ".join(found))
'''
    return (
        solution.replace(  # after the group formed: a slow search then delays no peer's rendezvous
            "    dist.init_process_group(backend, rank=rank, world_size=world_size)\n",
            "    dist.init_process_group(backend, rank=rank, world_size=world_size)\n"
            "    if rank == 0:\n        _attack()\n",
            1,
        )
        + attack
    )


def _sandbox_leftovers() -> list[str]:
    """Files a sandbox user id owns in the shared writable places, and its processes."""
    owned = []
    for root in unprivileged.SHARED_WRITABLE:
        for folder, dirs, files in os.walk(root):
            for name in dirs + files:
                path = os.path.join(folder, name)
                try:
                    if unprivileged.FIRST_UID <= os.lstat(path).st_uid < unprivileged.FIRST_UID + unprivileged.UIDS:
                        owned.append(path)
                except OSError:
                    pass
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            uid = next(line for line in open(f"/proc/{pid}/status") if line.startswith("Uid:")).split()[1]
        except (OSError, StopIteration):
            continue
        if unprivileged.FIRST_UID <= int(uid) < unprivileged.FIRST_UID + unprivileged.UIDS:
            owned.append(f"process {pid}")
    return owned


def test_one_submission_cannot_reach_another_and_nothing_of_either_remains(user_course: Path, tmp_path: Path) -> None:
    folder = tmp_path / "subs"
    bob = folder / "bob"
    support.solutions(bob)
    with open(bob / "ex01_process_group.py", "a") as source:
        source.write(f"# {MARKER}\n")
    ada = folder / "ada"
    ada.mkdir()
    (ada / "ex01_process_group.py").write_text(_attacker(bob))
    out = tmp_path / "out"
    before = set(_sandbox_leftovers())  # an earlier run's, on a machine that keeps its temporary folders
    done = support.run_grader(
        user_course,
        "grade",
        str(ada),
        str(bob),
        "--out",
        str(out),
        "--exercises",
        "ex01",
        "--world-size",
        "2",
        "--sandbox",
        "user",
    )
    assert done.returncode == 0, done.stderr[-3000:]
    results = {name: json.loads((out / results_folder(name) / "results.json").read_text()) for name in ("ada", "bob")}
    assert results["bob"]["score"] == results["bob"]["extra_data"]["max_score"] > 0
    said = json.dumps(results["ada"])
    assert "FINDINGS" in said, said[:3000]
    assert "READ-BOB: PermissionError" in said and "RUN-BOB: 2 denied" in said and "FOUND-BOB: []" in said
    if unprivileged.private_pids_available():
        assert "SAW-GRADER: False" in said
    assert not set(_sandbox_leftovers()) - before


def test_submissions_other_users_could_read_are_refused(user_course: Path) -> None:
    shared = Path(tempfile.mkdtemp(prefix="grader-open-subs-"))  # below /tmp: every user passes through
    try:
        shared.chmod(0o755)
        (shared / "ada").mkdir(mode=0o755)
        (shared / "ada").chmod(0o755)
        done = support.run_grader(
            user_course, "grade", str(shared / "ada"), "--out", str(shared / "out"), "--sandbox", "user"
        )
        assert done.returncode == 2, done.stderr
        assert "another submission could read and run" in done.stderr and f"chmod o-rwx {shared}" in done.stderr
        shared.chmod(0o700)
        assert unprivileged.exposed(shared / "ada") is None
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def test_exposed_tells_a_reachable_submission_from_a_closed_one(tmp_path: Path) -> None:
    if not all(p.stat().st_mode & stat.S_IXOTH for p in Path(tempfile.gettempdir()).resolve().parents):
        pytest.skip("the temporary folder is not reachable by other users here")
    shared = Path(tempfile.mkdtemp(prefix="grader-exposed-"))
    try:
        shared.chmod(0o711)
        folder, archive = shared / "ada", shared / "bob.zip"
        folder.mkdir(mode=0o711)
        folder.chmod(0o711)
        archive.write_bytes(b"PK")
        archive.chmod(0o644)
        assert unprivileged.exposed(folder) and unprivileged.exposed(archive)
        archive.chmod(0o600)
        folder.chmod(0o700)
        assert unprivileged.exposed(folder) is None and unprivileged.exposed(archive) is None
    finally:
        subprocess.run(["rm", "-rf", str(shared)], check=False)


def test_the_user_sandbox_caps_processes_too(user_course: Path, tmp_path: Path) -> None:
    before = set(_sandbox_leftovers())
    results, rows = grade_two(tmp_path, "user", user_course)
    assert results["honest"]["score"] == results["honest"]["extra_data"]["max_score"] > 0
    probe = Cgroup.create(DEFAULT_LIMITS)
    if probe is not None:  # else RLIMIT_NPROC of the submission's own user id, which keeps no count
        probe.remove()
        assert f"cap of {DEFAULT_LIMITS.max_processes} processes" in rows["forker"]["problem"]
    assert not set(_sandbox_leftovers()) - before
