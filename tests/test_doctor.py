"""`grader doctor`: every verdict from facts, the GPU node's simulated where there is no GPU.

The simulated node runs its all-reduces on real ranks (gloo, CPU) and reports the accelerators of
a 4-GPU node, so the NCCL lines, the bus bandwidth and P2P are judged as on a GPU node.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from dataclasses import replace
from typing import Any

import pytest
from conftest import REPO

from grader import doctor
from grader.catalog import load_catalog
from grader.engine import Engine, Job, RankOutcome, RunResult

GPU_NODE = {
    "cuda": True,
    "gpus": 4,
    "nccl": True,
    "gloo": True,
    "torch": "2.13.0+cu128",
    "cuda_build": "12.8",
    "names": ["NVIDIA H100 80GB HBM3"] * 4,
    "nccl_version": "2.27.3",
    "p2p": [[i, j, True] for i in range(4) for j in range(4) if i != j],
}


class SimulatedNode(doctor.EngineNode):
    """Real ranks on CPU that report a GPU node's accelerators; "nccl" runs are gloo underneath."""

    def __init__(self, engine: Engine, accelerators: dict[str, Any]) -> None:
        super().__init__(engine)
        self.accelerators = accelerators
        self.backends: list[str] = []

    def all_reduce(self, backend: str, megabytes: float, iterations: int) -> RunResult:
        self.backends.append(backend)
        result = self.engine.run(
            Job("grader.engine.probe:all_reduce_timing", 2, {"megabytes": min(megabytes, 4.0), "iterations": 2})
        )
        result.ranks[0].facts["accelerators"] = self.accelerators
        return result


def findings_of(node: SimulatedNode, expect_gpu: bool = False) -> dict[str, doctor.Finding]:
    return {f.topic: f for f in doctor.rank_findings(node, expect_gpu)}


def test_bus_bandwidth_is_nccl_tests_all_reduce_definition():
    assert doctor.bus_bandwidth(10**9, 1.0, 2) == pytest.approx(1.0)  # 2(n-1)/n = 1 at n = 2
    assert doctor.bus_bandwidth(10**9, 0.5, 4) == pytest.approx(3.0)  # algbw 2 GB/s x 1.5
    assert doctor.bus_bandwidth(10**9, 1.0, 8) == pytest.approx(1.75)


@pytest.mark.parametrize(
    ("version", "specifiers", "expected"),
    [
        ("2.13.0+cpu", ">=2.6,<2.14", True),
        ("2.6.0", ">=2.6,<2.14", True),
        ("2.14.0", ">=2.6,<2.14", False),
        ("2.5.1", ">=2.6,<2.14", False),
        ("2.14.0.dev20260101+cu128", ">=2.6,<2.14", False),
        ("3.11.7", ">=3.11", True),
        ("3.10.12", ">=3.11", False),
    ],
)
def test_version_ranges(version, specifiers, expected):
    assert doctor.satisfies(version, specifiers) is expected


def test_torch_outside_the_range_is_named_with_the_fix():
    assert doctor.torch_finding("2.13.0+cpu", ">=2.6,<2.14").status == "PASS"
    older, newer, missing = (doctor.torch_finding(v, ">=2.6,<2.14") for v in ("2.5.1", "2.14.0", None))
    assert older.status == "FAIL" and "older" in older.detail and "pip install torch" in older.fix
    assert newer.status == "WARN" and "newer than the course is tested on" in newer.detail
    assert missing.status == "FAIL" and missing.detail == "not installed"
    assert doctor.python_finding("3.10.12", ">=3.11").status == "FAIL"


def test_the_installed_ranges_are_the_projects():
    python, torch = doctor.supported_ranges()
    pyproject = (REPO / "pyproject.toml").read_text()
    assert f'requires-python = "{python}"' in pyproject
    assert all(clause in pyproject for clause in torch.split(",")), torch


def test_a_gpu_node_gets_cuda_nccl_its_all_reduce_bandwidth_and_p2p(engine):
    node = SimulatedNode(engine, GPU_NODE)
    found = findings_of(node)
    assert node.backends == ["gloo", "nccl"]
    assert found["gloo all-reduce"].status == "PASS" and "GB/s" in found["gloo all-reduce"].detail
    assert found["GPU"].status == "PASS" and "4 CUDA GPU(s) visible (NVIDIA H100 80GB HBM3)" in found["GPU"].detail
    assert found["NCCL"].status == "PASS" and "NCCL 2.27.3" in found["NCCL"].detail
    nccl = found["NCCL all-reduce"]
    assert nccl.status == "PASS" and "2 ranks formed a nccl group" in nccl.detail and "bus bandwidth" in nccl.detail
    assert found["P2P"].status == "PASS"


def test_p2p_blocked_between_two_gpus_is_a_warning_that_names_them(engine):
    blocked = {**GPU_NODE, "p2p": [[i, j, {i, j} != {0, 3}] for i in range(4) for j in range(4) if i != j]}
    p2p = findings_of(SimulatedNode(engine, blocked))["P2P"]
    assert p2p.status == "WARN" and "0->3" in p2p.detail and "3->0" in p2p.detail and "1->2" not in p2p.detail


def test_a_failing_or_wrong_nccl_all_reduce_fails_with_the_fix(engine):
    class Broken(SimulatedNode):
        def all_reduce(self, backend: str, megabytes: float, iterations: int) -> RunResult:
            result = super().all_reduce(backend, megabytes, iterations)
            if backend == "nccl":
                result.ranks[1] = RankOutcome(
                    1,
                    report={
                        "facts": {},
                        "error": {"type": "DistBackendError", "message": "NCCL error: unhandled system error"},
                    },
                )
            return result

    class Wrong(SimulatedNode):
        def all_reduce(self, backend: str, megabytes: float, iterations: int) -> RunResult:
            result = super().all_reduce(backend, megabytes, iterations)
            if backend == "nccl":
                for rank in result.ranks:
                    rank.facts["reduced"] = rank.facts["reduced"] * 0 + 2.0
            return result

    failed = findings_of(Broken(engine, GPU_NODE))["NCCL all-reduce"]
    assert failed.status == "FAIL" and "rank 1 raised DistBackendError: NCCL error" in failed.detail
    assert "NCCL_DEBUG=INFO" in failed.fix
    wrong = findings_of(Wrong(engine, GPU_NODE))["NCCL all-reduce"]
    assert wrong.status == "FAIL" and "gave [2.0], not 3.0" in wrong.detail


def test_one_gpu_no_nccl_and_no_gpu_where_one_is_expected(engine):
    one = findings_of(SimulatedNode(engine, {**GPU_NODE, "gpus": 1, "names": ["A100"], "p2p": []}))
    assert one["NCCL all-reduce"].status == "WARN" and "one GPU" in one["NCCL all-reduce"].detail
    assert "P2P" not in one
    no_nccl = findings_of(SimulatedNode(engine, {**GPU_NODE, "nccl": False}))
    assert no_nccl["NCCL"].status == "FAIL" and "no NCCL" in no_nccl["NCCL"].detail
    cpu = {**GPU_NODE, "cuda": False, "gpus": 0, "cuda_build": ""}
    assert findings_of(SimulatedNode(engine, cpu))["GPU"].status == "PASS"
    expected = findings_of(SimulatedNode(engine, cpu), expect_gpu=True)["GPU"]
    assert expected.status == "WARN" and "a CPU build" in expected.detail and "nvidia-smi" in expected.fix
    assert "the GPU paths (--backend nccl" in expected.detail and "cannot run here" in expected.detail


def test_a_gpu_node_asked_for_on_a_cpu_machine_is_a_ready_cpu_course_with_its_own_exit_status(engine):
    """Not broken (1) and not a GPU node (0): the sentence says which, the status lets a script tell."""
    cpu = {**GPU_NODE, "cuda": False, "gpus": 0, "cuda_build": ""}
    findings = doctor.rank_findings(SimulatedNode(engine, cpu), expect_gpu=True)
    said, status = doctor.verdict(findings, expect_gpu=True)
    assert status == doctor.NO_GPU_EXIT == 3
    assert said == "the CPU course is ready on this machine; its GPU paths are not, because no CUDA GPU is visible"
    assert doctor.verdict(findings, expect_gpu=False) == ("this machine can run the course", 0)
    broken = [*findings, doctor.Finding("FAIL", "loopback", "no loopback")]
    assert doctor.verdict(broken, expect_gpu=True) == ("this machine cannot run the course yet", 1)


def test_doctor_gpu_on_this_cpu_machine_says_the_cpu_course_is_ready():
    done = _doctor("--gpu")
    if re.search(r"^PASS +GPU +\d+ CUDA GPU", done.stdout, re.M):
        pytest.skip("this machine has a GPU")
    assert done.returncode == 3, done.stdout + done.stderr
    assert re.search(r"^WARN +GPU +no CUDA GPU visible .*the GPU paths .* cannot run here", done.stdout, re.M)
    assert "the CPU course is ready on this machine; its GPU paths are not" in done.stdout
    assert "cannot run the course yet" not in done.stdout


def test_ranks_that_cannot_start_fail_the_gloo_line():
    dead = RunResult(
        Job("m:f", 2),
        [RankOutcome(0, report_problem="no report", status=-9), RankOutcome(1, report_problem="no report", status=-9)],
        0.1,
        False,
    )
    finding = doctor.all_reduce_finding("gloo all-reduce", "gloo", dead, "the fix")
    assert finding.status == "FAIL" and "rank 0: no report, exit status -9" in finding.detail
    assert replace(finding, fix="").fix == ""


class ApiNode(doctor.EngineNode):
    """Real ranks asked about the APIs, the answers then edited as an older torch would give them."""

    def __init__(self, engine: Engine, missing: dict[str, str]) -> None:
        super().__init__(engine)
        self.missing = missing

    def torch_apis(self, apis: list[str]) -> RunResult:
        result = self.engine.run(Job("grader.engine.probe:torch_apis", 1, {"apis": apis}))
        result.ranks[0].facts["apis"].update(self.missing)
        return result


def test_every_api_the_catalog_names_is_in_this_torch(engine):
    catalog = load_catalog(REPO)
    (finding,) = doctor.api_findings(ApiNode(engine, {}), catalog)
    assert finding.status == "PASS", finding
    assert "ex06_fsdp" in finding.detail and "ex12_overlap_ddp" in finding.detail


def test_an_api_missing_from_torch_fails_once_per_exercise_that_needs_it_with_the_fix(engine):
    catalog = load_catalog(REPO)
    api = "torch.distributed.fsdp.fully_shard"
    needing = [e.id for e in catalog.exercises if api in e.apis]
    findings = doctor.api_findings(ApiNode(engine, {api: "torch.distributed.fsdp has no fully_shard"}), catalog)
    assert len(needing) >= 1 and [f.status for f in findings] == ["FAIL"] * len(needing)
    assert [f.detail for f in findings] == [
        f"{e} needs {api}: torch.distributed.fsdp has no fully_shard" for e in needing
    ]
    assert all("pip install torch==" in f.fix for f in findings)


def test_a_rank_resolves_modules_attributes_and_says_what_is_missing(engine):
    asked = ["torch.distributed.fsdp.fully_shard", "torch.distributed.no_such_api", "torch.no_such_module.thing"]
    result = engine.run(Job("grader.engine.probe:torch_apis", 1, {"apis": asked}))
    assert result.ranks[0].facts["apis"] == {
        "torch.distributed.fsdp.fully_shard": "",
        "torch.distributed.no_such_api": "torch.distributed has no no_such_api",
        "torch.no_such_module.thing": "torch has no no_such_module",
    }


def _doctor(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grader", "doctor", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={**os.environ, **env},
        timeout=600,
    )


def test_doctor_on_this_machine_passes_and_says_why_in_json():
    done = _doctor("--json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    topics = {f["topic"]: f for f in report["findings"]}
    assert report["ok"] and {"Python", "torch", "launcher", "temp folder", "loopback", "gloo all-reduce", "GPU"} <= set(
        topics
    )
    expected = os.environ.get("GRADER_LAUNCHER") or "fork"
    assert topics["launcher"]["detail"].startswith(expected), topics["launcher"]
    assert topics["gloo all-reduce"]["status"] == "PASS"
    assert topics["torch APIs"]["status"] == "PASS"


def test_a_bad_launcher_setting_fails_with_exit_status_1_and_the_fix():
    done = _doctor(GRADER_LAUNCHER="spawn")
    assert done.returncode == 1, done.stdout + done.stderr
    assert re.search(r"^FAIL +launcher +GRADER_LAUNCHER=spawn: the launchers are fork, portable", done.stdout, re.M), (
        done.stdout
    )
    assert "fix: unset GRADER_LAUNCHER" in done.stdout and "cannot run the course yet" in done.stdout
