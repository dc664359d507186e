"""The host's files a rank uses beyond the Python environment, measured when a sandbox opens.

The bubblewrap sandbox binds the Python environment (bubblewrap.python_binds) and, of the rest of
the host, only what this module finds: the shared libraries, the dynamic loader and the
data files torch and Python load from the system. Those differ between distributions and builds,
so they are measured, not listed: a probe process (this file run as a script, outside any sandbox;
it runs the grader's own rank side, never student code) imports what a zygote imports, forms a
one-rank gloo group and all-reduces, then reports every shared object the dynamic loader loaded,
by the path the loader opened (`dl_iterate_phdr`: a library's symlink, the ELF interpreter's path),
and every file it maps. The sandbox recreates the way to each: the symlinks met on the way, then
the file itself, read-only.

Measured on Debian 12 (pyenv Python 3.11, torch's CPU wheel): 17 files beyond the Python
environment, all under /usr/lib: libc, libm, libdl, libpthread, librt, libstdc++, libgcc_s, libz,
libbz2, liblzma, libffi, libuuid, libssl, libcrypto, the loader ld-linux-x86-64.so.2, the C.utf8
locale's LC_CTYPE and gconv-modules.cache; and 9 symlinks to them (/lib, /lib64, libz.so.1...).
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

PROBE_TIMEOUT_S = 120.0  # the probe imports torch: as long as a zygote's warm-up on a loaded machine
SYMLINK_HOPS = 40  # as the kernel allows
SPECIAL = (Path("/dev"), Path("/proc"), Path("/sys"))  # the sandbox has its own or none
# The GPU driver's user-space libraries, which torch opens only once it uses CUDA, so the probe
# (which does not) never sees them: found in the loader's cache instead.
DRIVER_LIBRARY = re.compile(r"^\s*(libcuda|libcudadebugger|libnvidia-[\w.-]+)\.so\S*\s.*=>\s*(/\S+)$")


class ProbeError(Exception):
    """The probe did not report: the message says why."""


class _PhdrInfo(ctypes.Structure):
    _fields_ = [("addr", ctypes.c_void_p), ("name", ctypes.c_char_p)]  # the head of struct dl_phdr_info


def loaded_here() -> list[str]:
    """Every file this process has loaded or maps: shared objects by the path the loader opened."""
    names: list[str] = []

    def seen(info: Any, size: int, data: Any) -> int:
        names.append((info.contents.name or b"").decode(errors="surrogateescape"))
        return 0

    callback = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(_PhdrInfo), ctypes.c_size_t, ctypes.c_void_p)(seen)
    ctypes.CDLL(None).dl_iterate_phdr(callback, None)
    with open("/proc/self/maps") as maps:
        mapped = [line.split(None, 5)[5].rstrip("\n") for line in maps if len(line.split(None, 5)) == 6]
    return sorted({path for path in [*names, *mapped] if path.startswith("/") and os.path.isfile(path)})


def _probe(modules: list[str]) -> None:
    """The probe's side: import as a zygote does (a module that fails fails there too, and is no
    reason to refuse the sandbox), all-reduce over gloo, print what was loaded: stdout's last line."""
    from grader.engine import preload

    preload.import_all(modules)
    import torch
    import torch.distributed as dist

    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    dist.all_reduce(torch.ones(2))
    dist.destroy_process_group()
    print(json.dumps(loaded_here()))


def probe(modules: list[str], env: dict[str, str]) -> list[str]:
    """What a process that imports `modules` (with `env`, the sandbox's) loads from files."""
    try:
        done = subprocess.run(
            [sys.executable, "-s", "-P", __file__, json.dumps(modules)],
            env=env,
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"the probe of what ranks load did not run: {exc}") from exc
    lines = done.stdout.splitlines()
    if done.returncode != 0 or not lines:
        raise ProbeError(f"the probe of what ranks load failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return json.loads(lines[-1])


def driver_libraries() -> list[str]:
    """The GPU driver's libraries (libcuda, libnvidia-*) as the loader's cache names them."""
    ldconfig = shutil.which("ldconfig", path=os.pathsep.join([os.environ.get("PATH", ""), "/sbin", "/usr/sbin"]))
    if ldconfig is None:
        return []
    return driver_paths(subprocess.run([ldconfig, "-p"], capture_output=True, text=True).stdout)


def driver_paths(listing: str) -> list[str]:
    """The driver's libraries in what `ldconfig -p` printed."""
    return sorted({m.group(2) for m in map(DRIVER_LIBRARY.match, listing.splitlines()) if m})


def walk(path: str, links: dict[str, str]) -> Path:
    """The real path of `path`, noting in `links` each symlink met on the way (where -> its target)."""
    real, parts, hops = Path("/"), list(Path(path).parts[1:]), 0
    while parts:
        head = parts.pop(0)
        if head == "..":
            real = real.parent
            continue
        here = real / head
        if not here.is_symlink():
            real = here
            continue
        hops += 1
        if hops > SYMLINK_HOPS:
            raise OSError(f"too many symlinks on the way to {path}")
        target = os.readlink(here)
        links[str(here)] = target
        if os.path.isabs(target):
            real = Path("/")
        parts = [*Path(target).parts[1 if os.path.isabs(target) else 0 :], *parts]
    return real


def routes(paths: Iterable[str], visible: Iterable[Path]) -> tuple[dict[str, str], list[str]]:
    """The symlinks (where -> target) and the real files a sandbox needs for each of `paths` to open
    inside as outside, less what lies in `visible` (folders bound whole) or in /dev, /proc, /sys."""
    skip = (*visible, *SPECIAL)
    links: dict[str, str] = {}
    files = {walk(path, links) for path in paths}
    inside = [where for where in links if any(Path(where).is_relative_to(folder) for folder in skip)]
    for where in inside:
        del links[where]
    return links, sorted(str(f) for f in files if f.is_file() and not any(f.is_relative_to(s) for s in skip))


if __name__ == "__main__":
    _probe(json.loads(sys.argv[1]))
