"""`grader doctor`: whether this machine can run the course, and what to do where it cannot.

Each finding is one line, PASS, WARN or FAIL, with the fix. What only a rank process can tell
(torch's backends and APIs, the GPUs, NCCL, and whether ranks start and form a group at all) is asked of
real ranks through the engine, as `grader check` starts them; this process imports no torch.
Every verdict is a function of facts, so a GPU node is tested by simulating its facts where there
is no GPU (tests/test_doctor.py). Exit status: 0 when nothing failed, 1 when something did, and 3 (`NO_GPU_EXIT`)
for `--gpu` on a machine where nothing failed and no GPU is visible: the CPU course is ready there, its GPU paths
are not, and the machine is not broken, so a script that needs a GPU node can tell the two apart.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import re
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from grader.catalog import Catalog, CatalogError, course_catalog
from grader.engine import Engine, EngineError, Job, RunResult, open_engine
from grader.engine.platforms import IS_LINUX, LauncherError, chosen_launcher
from grader.paths import CourseNotFound, ships
from grader.report.terminal import Terminal

DISTRIBUTION = "ddp-course"
INSTALL_TORCH = "pip install torch==2.13.0 (the version CI tests; the README's install line)"
GLOO_MEGABYTES, GLOO_ITERATIONS = 4.0, 5
NCCL_MEGABYTES, NCCL_ITERATIONS = 256.0, 20
STYLES = {"PASS": "passed", "WARN": "skipped", "FAIL": "failed"}
NO_GPU_EXIT = 3  # `--gpu` where no GPU is visible and nothing failed (the module's docstring)
NO_GPU = "GPU"  # the topic of the finding that says whether a GPU is visible


@dataclass(frozen=True)
class Finding:
    status: str  # PASS, WARN or FAIL
    topic: str
    detail: str
    fix: str = ""


class Node(Protocol):
    """Ranks on this machine: a timed 2-rank all-reduce, rank 0 reporting its accelerators; one rank
    reporting which torch APIs its torch has."""

    launcher: str

    def all_reduce(self, backend: str, megabytes: float, iterations: int) -> RunResult: ...

    def torch_apis(self, apis: list[str]) -> RunResult: ...


class EngineNode:
    """The real machine, asked through the engine `grader check` would use."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self.launcher = engine.launcher

    def all_reduce(self, backend: str, megabytes: float, iterations: int) -> RunResult:
        return self.engine.run(
            Job(
                "grader.engine.probe:all_reduce_timing",
                2,
                {"megabytes": megabytes, "iterations": iterations},
                backend=backend,
                deadline=60.0,
            )
        )

    def torch_apis(self, apis: list[str]) -> RunResult:
        return self.engine.run(Job("grader.engine.probe:torch_apis", 1, {"apis": apis}, deadline=60.0))


# --- versions -------------------------------------------------------------------------------------


def _numbers(version: str) -> tuple[int, ...]:
    """(2, 13, 0) from "2.13.0+cpu" or "2.14.0.dev20260101"."""
    return tuple(int(part) for part in re.findall(r"\d+", version.split("+")[0])[:3])


def satisfies(version: str, specifiers: str) -> bool:
    """Whether `version` meets every comma-separated `>=`, `>`, `<=`, `<`, `==`, `!=` clause."""
    have = _numbers(version)
    compare: dict[str, Callable[[tuple[int, ...], tuple[int, ...]], bool]] = {
        ">=": lambda a, b: a >= b,
        "<=": lambda a, b: a <= b,
        ">": lambda a, b: a > b,
        "<": lambda a, b: a < b,
        "==": lambda a, b: a == b,
        "!=": lambda a, b: a != b,
    }
    for clause in filter(None, (c.strip() for c in specifiers.split(","))):
        operator = next(op for op in (">=", "<=", "==", "!=", ">", "<") if clause.startswith(op))
        want = _numbers(clause[len(operator) :])
        width = max(len(have), len(want))
        if not compare[operator](have + (0,) * (width - len(have)), want + (0,) * (width - len(want))):
            return False
    return True


def supported_ranges() -> tuple[str, str]:
    """(Python, torch) version ranges the course declares (pyproject.toml, as installed)."""
    try:
        metadata = importlib.metadata.metadata(DISTRIBUTION)
        requires = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return "", ""
    torch = next((r[len("torch") :].split(";")[0].strip() for r in requires if re.match(r"torch\s*[<>=!]", r)), "")
    lower_first = sorted((c.strip() for c in torch.split(",") if c.strip()), key=lambda c: not c.startswith(">"))
    # PackageMetadata (typeshed, before Python 3.12) has get_all but not get: the first value, as get gives
    return (metadata.get_all("Requires-Python") or [""])[0], ",".join(lower_first)


def python_finding(version: str, wanted: str) -> Finding:
    if not wanted or satisfies(version, wanted):
        return Finding("PASS", "Python", f"{version} (the course needs {wanted or '3.11 or newer'})")
    return Finding(
        "FAIL",
        "Python",
        f"{version}: the course needs {wanted}",
        "install Python 3.11 or newer and make a new virtual environment with it",
    )


def torch_finding(installed: str | None, wanted: str) -> Finding:
    if installed is None:
        return Finding("FAIL", "torch", "not installed", INSTALL_TORCH)
    if not wanted:
        return Finding(
            "WARN",
            "torch",
            f"{installed}: the course's supported range is unknown (not installed with pip?)",
            "pip install -e . in the course folder",
        )
    if satisfies(installed, wanted):
        return Finding("PASS", "torch", f"{installed} (supported: {wanted})")
    lower = next((c.strip()[2:] for c in wanted.split(",") if c.strip().startswith(">=")), "")
    if lower and not satisfies(installed, f">={lower}"):
        return Finding("FAIL", "torch", f"{installed} is older than the course supports ({wanted})", INSTALL_TORCH)
    return Finding("WARN", "torch", f"{installed} is newer than the course is tested on ({wanted})", INSTALL_TORCH)


def _installed_torch() -> str | None:
    try:
        return importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None


# --- this machine ------------------------------------------------------------------------------


def launcher_finding() -> Finding:
    try:
        name, reason = chosen_launcher()
    except LauncherError as exc:
        return Finding("FAIL", "launcher", str(exc), "unset GRADER_LAUNCHER, or set it to fork or portable")
    if name == "fork" and not IS_LINUX:
        return Finding(
            "WARN",
            "launcher",
            f"fork ({reason}): forking a process that has imported torch is fragile here",
            "unset GRADER_LAUNCHER to use the portable launcher",
        )
    return Finding("PASS", "launcher", f"{name} ({reason})")


def temp_finding() -> Finding:
    folder = tempfile.gettempdir()
    try:
        with tempfile.NamedTemporaryFile(dir=folder):
            pass
    except OSError as exc:
        return Finding(
            "FAIL", "temp folder", f"{folder} is not writable: {exc}", "set TMPDIR to a folder you can write to"
        )
    return Finding("PASS", "temp folder", f"{folder} is writable (run folders and file stores go there)")


def loopback_finding() -> Finding:
    """127.0.0.1 carries a connection on a port the system picks, as every rendezvous here does."""
    try:
        with socket.create_server(("127.0.0.1", 0)) as server:
            port = server.getsockname()[1]
            with socket.create_connection(("127.0.0.1", port), timeout=5) as client:
                peer, _ = server.accept()
                with peer:
                    client.sendall(b"ping")
                    peer.settimeout(5)
                    echoed = peer.recv(4)
    except OSError as exc:
        return Finding(
            "FAIL",
            "loopback",
            f"127.0.0.1 does not carry a connection: {exc}",
            "the ranks talk over the loopback interface: check firewall or VPN software",
        )
    if echoed != b"ping":
        return Finding("FAIL", "loopback", "a loopback connection lost its data", "check firewall or VPN software")
    host = socket.gethostname()
    try:
        address = socket.gethostbyname(host)
        with socket.create_server((address, 0)):
            pass
    except OSError as exc:
        return Finding(
            "WARN",
            "loopback",
            f"127.0.0.1 works (port {port} was free), but the host name {host!r} "
            f"does not resolve to an address of this machine ({exc}); gloo may pick it",
            "export GLOO_SOCKET_IFNAME=lo (Linux) or lo0 (macOS), or add the name to /etc/hosts",
        )
    return Finding("PASS", "loopback", f"127.0.0.1 works (port {port} was free); {host!r} is {address}")


def rendezvous_finding() -> Finding:
    """A check's ranks meet at a store on the loopback: private only in a network namespace of their own."""
    from grader import private_network

    try:
        portable = chosen_launcher()[0] == "portable"
    except LauncherError:
        portable = False
    problem = "the portable launcher's ranks share it" if portable else private_network.unavailable()
    if problem is None:
        return Finding("PASS", "rendezvous", "`grader check` ranks meet in a network namespace of their own")
    return Finding(
        "WARN",
        "rendezvous",
        f"another user of this machine could join the rendezvous store of your checks on the loopback and "
        f"make a correct solution fail ({problem})",
        "on a shared machine, trust a failure only after a second check, or check where unprivileged user "
        "namespaces are allowed (user.max_user_namespaces > 0)",
    )


def sandbox_finding() -> Finding:
    """Only `grader grade` (instructors' batches of untrusted code) needs the sandbox."""
    if not IS_LINUX:
        return Finding(
            "WARN",
            "sandbox",
            "sandboxed batch grading (`grader grade`) runs on Linux only; `grader check` needs no sandbox",
            "grade batches on a Linux machine",
        )
    from grader.sandbox import bubblewrap

    problem = bubblewrap.unavailable()
    if problem:
        return Finding(
            "WARN",
            "sandbox",
            f"for `grader grade` only: {problem}",
            "apt-get install bubblewrap (or grade as root with --sandbox user)",
        )
    return Finding("PASS", "sandbox", "bubblewrap works (for `grader grade`)")


# --- ranks and GPUs --------------------------------------------------------------------------------


def bus_bandwidth(nbytes: int, seconds: float, world_size: int) -> float:
    """All-reduce bus bandwidth in GB/s as nccl-tests defines it: algbw = bytes / time, times
    2(n-1)/n, the share of the data each rank sends and receives."""
    return nbytes / seconds / 1e9 * 2 * (world_size - 1) / world_size


def _rank_problem(result: RunResult) -> str:
    for rank in result.ranks:
        if rank.error:
            return f"rank {rank.rank} raised {rank.error.get('type')}: {rank.error.get('message', '')[:500]}"
        if rank.report_problem:
            status = f", exit status {rank.status}" if rank.status is not None else ""
            return f"rank {rank.rank}: {rank.report_problem}{status}; it wrote: {rank.output[-500:].strip()}"
    return "the run timed out" if result.timed_out else "unknown"


def all_reduce_finding(topic: str, backend: str, result: RunResult, fix: str) -> Finding:
    """A 2-rank all-reduce that completed with the right sum, and its bus bandwidth."""
    world = result.job.world_size
    expected = world * (world + 1) / 2
    if not result.ok:
        return Finding("FAIL", topic, f"a {world}-rank {backend} all-reduce failed: {_rank_problem(result)}", fix)
    sums = {float(value) for rank in result.ranks for value in rank.facts.get("reduced", [])}
    if sums != {expected}:
        return Finding("FAIL", topic, f"a {world}-rank {backend} all-reduce gave {sorted(sums)}, not {expected}", fix)
    seconds = max(float(rank.facts["seconds"]) for rank in result.ranks)
    nbytes = int(result.ranks[0].facts["bytes"])
    busbw = bus_bandwidth(nbytes, seconds, world)
    return Finding(
        "PASS",
        topic,
        f"{world} ranks formed a {backend} group; all-reduce of {nbytes / 2**20:.0f} MiB "
        f"correct, {seconds * 1e3:.2f} ms, bus bandwidth {busbw:.2f} GB/s",
    )


def gpu_findings(facts: dict[str, Any], node: Node, expect_gpu: bool) -> list[Finding]:
    gpus = int(facts.get("gpus", 0))
    if not facts.get("cuda"):
        build = f"CUDA {facts['cuda_build']} build" if facts.get("cuda_build") else "a CPU build"
        detail = f"no CUDA GPU visible (torch is {build})"
        if expect_gpu:
            return [
                Finding(
                    "WARN",
                    NO_GPU,
                    f"{detail}: the GPU paths (--backend nccl, the NCCL all-reduce, P2P) cannot run here; the CPU "
                    "course does not need them",
                    "on a GPU node, check nvidia-smi and CUDA_VISIBLE_DEVICES, and install a CUDA build of torch",
                )
            ]
        return [Finding("PASS", NO_GPU, f"{detail}: not needed, every exercise runs on CPU with gloo")]
    names = ", ".join(sorted(set(facts.get("names", [])))) or "unnamed"
    findings = [Finding("PASS", NO_GPU, f"{gpus} CUDA GPU(s) visible ({names})")]
    if not facts.get("nccl"):
        findings.append(
            Finding(
                "FAIL",
                "NCCL",
                "this torch build has no NCCL",
                "install a CUDA build of torch for Linux (NCCL ships with it)",
            )
        )
        return findings
    version = facts.get("nccl_version") or f"version unknown ({facts.get('nccl_version_error', '')})"
    findings.append(Finding("PASS", "NCCL", f"NCCL {version}"))
    if gpus < 2:
        findings.append(
            Finding(
                "WARN",
                "NCCL all-reduce",
                "one GPU: NCCL checks need one GPU per rank, so only W=1 runs here",
                "use a node with 2 or more GPUs to check at W=2 and 4",
            )
        )
        return findings
    fix = (
        "rerun with NCCL_DEBUG=INFO to see why; try NCCL_P2P_DISABLE=1 or NCCL_SHM_DISABLE=1 to find the "
        "transport at fault"
    )
    try:
        findings.append(
            all_reduce_finding("NCCL all-reduce", "nccl", node.all_reduce("nccl", NCCL_MEGABYTES, NCCL_ITERATIONS), fix)
        )
    except EngineError as exc:
        findings.append(Finding("FAIL", "NCCL all-reduce", f"the ranks did not run: {exc}", fix))
    blocked = [(i, j) for i, j, ok in facts.get("p2p", []) if not ok]
    if blocked:
        pairs = ", ".join(f"{i}->{j}" for i, j in blocked[:6]) + (" ..." if len(blocked) > 6 else "")
        findings.append(
            Finding(
                "WARN",
                "P2P",
                f"no peer access between GPUs {pairs}: NCCL goes through host memory there (correct, slower)",
                "check `nvidia-smi topo -m`; on VMs, P2P is often disabled",
            )
        )
    else:
        findings.append(Finding("PASS", "P2P", f"every pair of the {gpus} GPUs can access each other's memory"))
    return findings


def rank_findings(node: Node, expect_gpu: bool) -> list[Finding]:
    """What the ranks report: whether they start and form a gloo group, then the GPUs."""
    try:
        result = node.all_reduce("gloo", GLOO_MEGABYTES, GLOO_ITERATIONS)
    except EngineError as exc:
        return [
            Finding(
                "FAIL",
                "ranks",
                f"the {node.launcher} launcher could not run ranks: {exc}",
                "check the torch installation (python -c 'import torch'); GRADER_LAUNCHER=portable "
                "or fork tries the other launcher",
            )
        ]
    gloo = all_reduce_finding(
        "gloo all-reduce",
        "gloo",
        result,
        "export GLOO_SOCKET_IFNAME=lo (Linux) or lo0 (macOS); check firewall software",
    )
    if gloo.status == "FAIL":
        return [gloo]
    return [gloo, *gpu_findings(result.ranks[0].facts.get("accelerators", {}), node, expect_gpu)]


def api_findings(node: Node, catalog: Catalog) -> list[Finding]:
    """Whether a rank's torch has every API the catalog's exercises name (`apis`): one FAIL per exercise
    that lacks one, else one PASS."""
    needed = {exercise.id: exercise.apis for exercise in catalog.exercises if exercise.apis}
    if not needed:
        return []
    every = sorted({api for apis in needed.values() for api in apis})
    result = node.torch_apis(every)
    if not result.ok:
        return [Finding("FAIL", "torch APIs", f"a rank could not report them: {_rank_problem(result)}", INSTALL_TORCH)]
    found = result.ranks[0].facts.get("apis", {})
    missing = [
        Finding("FAIL", "torch APIs", f"{exercise_id} needs {api}: {found.get(api, 'not reported')}", INSTALL_TORCH)
        for exercise_id, apis in needed.items()
        for api in apis
        if found.get(api, "not reported")
    ]
    exercises = ", ".join(needed)
    return missing or [Finding("PASS", "torch APIs", f"the {len(every)} that {exercises} use are present")]


def examine(node_factory: Callable[[], Node], expect_gpu: bool = False) -> list[Finding]:
    """Every finding, in the order a student reads them."""
    python_range, torch_range = supported_ranges()
    findings = [
        python_finding(".".join(map(str, sys.version_info[:3])), python_range),
        torch_finding(_installed_torch(), torch_range),
        launcher_finding(),
        temp_finding(),
        loopback_finding(),
        rendezvous_finding(),
        *([sandbox_finding()] if ships("sandbox") else []),  # a student copy has none
    ]
    if findings[1].status == "FAIL" or findings[2].status == "FAIL":
        return findings  # no rank can start
    try:
        node = node_factory()
    except (EngineError, LauncherError) as exc:
        return [*findings, Finding("FAIL", "ranks", f"cannot start the launcher: {exc}", "")]
    ranks = rank_findings(node, expect_gpu)
    findings += ranks
    if ranks[0].status == "FAIL":
        return findings  # no rank started or formed a group: nothing more to ask them
    try:
        catalog = course_catalog()
    except (CourseNotFound, CatalogError) as exc:
        return [*findings, Finding("WARN", "torch APIs", f"not checked: {exc}")]
    return findings + api_findings(node, catalog)


# --- the command -------------------------------------------------------------------------------


def verdict(findings: Iterable[Finding], expect_gpu: bool) -> tuple[str, int]:
    """The closing sentence and the exit status (the module's docstring): a CPU machine asked about its GPU is
    not broken, and is not a GPU node either."""
    findings = list(findings)
    if any(f.status == "FAIL" for f in findings):
        return "this machine cannot run the course yet", 1
    if expect_gpu and any(f.topic == NO_GPU and f.status != "PASS" for f in findings):
        return (
            "the CPU course is ready on this machine; its GPU paths are not, because no CUDA GPU is visible",
            NO_GPU_EXIT,
        )
    return "this machine can run the course", 0


def _print(findings: Iterable[Finding], seconds: float, said: str) -> None:
    terminal = Terminal()
    findings = list(findings)
    width = max(len(f.topic) for f in findings)
    for finding in findings:
        terminal.line(
            f"{terminal.paint(finding.status, STYLES[finding.status])}  {finding.topic:<{width}}  {finding.detail}"
        )
        if finding.fix and finding.status != "PASS":
            terminal.line(f"      {' ' * width}  fix: {finding.fix}")
    failed = sum(f.status == "FAIL" for f in findings)
    warned = sum(f.status == "WARN" for f in findings)
    terminal.line(f"\n{said}: {failed} failed, {warned} warning(s) ({seconds:.1f}s)")


def cmd_doctor(args: argparse.Namespace) -> int:
    started = time.monotonic()
    engine: Engine | None = None

    def node() -> Node:
        nonlocal engine
        engine = open_engine()
        return EngineNode(engine)

    try:
        findings = examine(node, expect_gpu=args.gpu)
    finally:
        if engine is not None:
            engine.close()
    seconds = time.monotonic() - started
    said, status = verdict(findings, args.gpu)
    if args.json:
        print(
            json.dumps(
                {
                    "ok": all(f.status != "FAIL" for f in findings),
                    "verdict": said,
                    "exit_status": status,
                    "seconds": round(seconds, 2),
                    "platform": sys.platform,
                    "findings": [asdict(f) for f in findings],
                },
                indent=2,
            )
        )
    else:
        _print(findings, seconds, said)
    return status


def register(commands: argparse._SubParsersAction) -> None:
    doctor = commands.add_parser(
        "doctor",
        help="can this machine run the course? what to fix if not",
        description="Check Python, torch, the launcher, loopback, the temp folder, the "
        "sandbox, the torch APIs the exercises use and, on a GPU node, CUDA, NCCL and P2P. Exit status 1 if "
        f"anything failed; {NO_GPU_EXIT} for --gpu where nothing failed and no GPU is visible (the CPU course is "
        "ready, the GPU paths are not).",
    )
    doctor.add_argument("--json", action="store_true", help="print the findings as JSON")
    doctor.add_argument(
        "--gpu",
        action="store_true",
        help=f"this should be a GPU node: where no GPU is visible, say so and exit with status {NO_GPU_EXIT}",
    )
    doctor.set_defaults(func=cmd_doctor)
