"""The rank side of the grader: the only part of the course a sandbox ever holds.

The trust boundary is an allow-list. Two folders run beside student code on the ranks and enter the
sandbox whole: `grader/engine/` (the rank runtime, the zygote, the report format) and `grader/rank/`
(the helpers workers share: models and data, the simulated GPU node, the write recorder). Of each
exercise package under `grader/checks/`, only its `__init__.py` and the files its `manifest.toml`
lists as `rank` enter (grader/checks/manifest.py): a file the manifest does not list stays out, so a
new judge helper cannot slip in by its name. The judge (`grader/judge/`, each exercise's `judge`
files), the secrets, the solutions, the question banks, the tests and every other part of the course
stay outside. A worker that imports judge code fails to load in a sandbox (tests/security checks
every exercise's workers load in the view; `grader lint-course` reads the imports of rank files).
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from grader.checks.manifest import load_manifest

RANK_FOLDERS = ("engine", "rank")  # whole
EXERCISES = "checks"  # one package per exercise: its __init__.py and its manifest's rank files


def rank_side_files(package: Path) -> list[Path]:
    """The files of the grader package (`package` is its folder) that enter a sandbox, relative.

    Raises ManifestError when an exercise package's manifest is missing or wrong: no view is drawn
    from a boundary that cannot be read."""
    files = [package / "__init__.py", package / EXERCISES / "__init__.py"]
    for folder in RANK_FOLDERS:
        files += package.glob(f"{folder}/*.py")
    for init in package.glob(f"{EXERCISES}/*/__init__.py"):
        files += [init, *(init.parent / name for name in load_manifest(init.parent).rank)]
    return sorted(path.relative_to(package) for path in files if path.is_file())


# The sandbox's /etc/hosts: every form of the loopback address has a name, so that looking one up
# never asks a DNS server the sandbox cannot reach (c10d warns about it on every connection).
HOSTS = "127.0.0.1 localhost\n::1 localhost\n::ffff:127.0.0.1 localhost\n"


def etc_files(uid: int, gid: int) -> dict[str, str]:
    """The bubblewrap sandbox's /etc, for a sandbox user seen inside as `uid`:`gid`, and no account of
    the host's. Measured with strace: ranks read hosts and nsswitch.conf (to name the loopback, from
    files only); passwd and group answer a `pwd` or `getpass` lookup with the sandbox user."""
    return {
        "hosts": HOSTS,
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
        "passwd": f"student:x:{uid}:{gid}:student:/tmp:/nonexistent\n"
        "nobody:x:65534:65534:nobody:/nonexistent:/nonexistent\n",
        "group": f"student:x:{gid}:\nnogroup:x:65534:\n",
    }


def materialize(package: Path, into: Path) -> Path:
    """Copy the rank side into `into`/grader, read-only and readable by every user, beside an `etc`
    folder for the bubblewrap sandbox (etc_files; bubblewrap keeps the grader's user and group ids
    inside); returns `into`, the folder to put on the sandbox's PYTHONPATH."""
    (into / "etc").mkdir()
    for name, text in etc_files(os.getuid(), os.getgid()).items():
        (into / "etc" / name).write_text(text)
        (into / "etc" / name).chmod(0o444)
    for relative in rank_side_files(package):
        target = into / "grader" / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(package / relative, target)
        target.chmod(stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    for folder in [into, *sorted(into.rglob("*"), reverse=True)]:
        if folder.is_dir():
            folder.chmod(0o555)
    return into


def remove(view: Path) -> None:
    """Remove a materialized view (its folders are read-only)."""
    for folder in [view, *view.rglob("*")]:
        if folder.is_dir():
            folder.chmod(0o755)
    shutil.rmtree(view, ignore_errors=True)
