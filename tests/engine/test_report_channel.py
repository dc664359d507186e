"""The report channel against the code it reports on (channel_student.py): rebinding any name the report path reads
changes nothing in what the grader gets; a report written into the channel by anything but the rank runtime is
refused in a sentence; what of the grader's own code was replaced is reported, and marks the check's result."""

from __future__ import annotations

import dis
import os
import shutil
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from grader.engine import Engine, Job, RunResult, collectives, rank_runtime, tamper, wire
from grader.judge.diagnose import failure_verdict

HERE = Path(__file__).resolve().parent
STUDENT = HERE / "channel_student.py"
REPO = HERE.parents[1]
NOT_SEALED = "channel was written by something other than the grader's rank runtime: a report the runtime did not seal"
BYTES_AFTER = "channel was written by something other than the grader's rank runtime: bytes after the runtime's report"


@pytest.fixture(scope="module")
def channel_engine() -> Iterator[Engine]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(HERE), os.environ.get("PYTHONPATH")])))
        with Engine(preload=["channel_workers"]) as engine:
            engine.wait_ready()
            yield engine


def run(engine: Engine, worker: str, env: dict[str, str] | None = None, **kwargs: Any) -> RunResult:
    job = Job(f"channel_workers:{worker}", 2, kwargs, student_file=STUDENT, deadline=30.0, env=env or {})
    return engine.run(job)


def grader_names(*modules: types.ModuleType) -> list[str]:
    """What the runtime holds of these modules when the student's file loads (tamper.freeze): their functions and
    classes, and the functions, properties and static or class methods of each class they define."""
    names = []
    for module in modules:
        for name, value in vars(module).items():
            if isinstance(value, (types.FunctionType, type)):
                names.append(f"{module.__name__}.{name}")
            if isinstance(value, type) and value.__module__ == module.__name__:
                kinds = (types.FunctionType, property, staticmethod, classmethod)
                names += [
                    f"{module.__name__}.{value.__qualname__}.{k}"
                    for k, v in vars(value).items()
                    if isinstance(v, kinds)
                ]
    return names


REBOUND = {
    "the rank runtime, wire, tamper and collectives": grader_names(rank_runtime, wire, tamper, collectives),
    "os and sys": ["os.write", "os.close", "os._exit", "sys.stdout", "sys.stderr"],
    "json and the other encoders": [
        "json.dumps",
        "json.JSONEncoder",
        "json.encoder.c_make_encoder",
        "json.encoder.encode_basestring_ascii",
        "_json.make_encoder",
        "_json.encode_basestring_ascii",
        "base64.b64encode",
        "binascii.b2a_base64",
        "struct.pack",
        "struct.Struct",
        "hashlib.blake2b",
        "secrets.token_bytes",
        "threading.Lock",
        "time.perf_counter",
    ],
    "numpy": ["numpy.ascontiguousarray", "numpy.generic", "numpy.ndarray", "numpy.array"],
    "torch": [
        "torch.Tensor.detach",
        "torch.Tensor.cpu",
        "torch.Tensor.numpy",
        "torch.Tensor.float",
        "torch.Tensor.dtype",
        "torch._C.TensorBase",
        "torch._C.DisableTorchFunctionSubclass",
        "torch.bfloat16",
        "torch.distributed.distributed_c10d.Store.list_keys",
    ],
    "builtins": [
        f"builtins.{name}"
        for name in (
            "isinstance",
            "str",
            "len",
            "dict",
            "list",
            "tuple",
            "int",
            "float",
            "bool",
            "type",
            "memoryview",
            "sorted",
            "getattr",
            "setattr",
            "vars",
            "id",
            "hasattr",
            "repr",
        )
    ],
}


@pytest.mark.parametrize("what", list(REBOUND))
def test_rebinding_what_the_report_path_reads_changes_nothing_in_the_report(channel_engine, what):
    """Each name is replaced by an object any use of which raises, once the facts are made: a report path that read
    one would send no report, or another one. Rebinding the grader's own names is also reported, line by line."""
    result = run(channel_engine, "reports_after_rebinding", names=REBOUND[what])
    assert result.ok, [(rank.error, rank.report_problem, rank.output[-2000:]) for rank in result.ranks]
    for rank in result.ranks:
        facts = rank.facts
        assert facts["value"] == 1.5 + rank.rank and facts["text"] == "the grader's"
        assert np.array_equal(facts["array"], np.arange(4) * (rank.rank + 1)) and facts["array"].dtype == np.int64
        assert np.array_equal(facts["tensor"], np.array([1.0, 2.0], dtype=np.float32) * (rank.rank + 1))
        assert facts["bf16"].dtype == np.float32 and np.array_equal(facts["bf16"], np.ones(2))
        assert facts["nested"] == {"a": [1, None, True], "b": 0.5}
        assert facts[rank_runtime.RENDEZVOUS_RANKS] == ([0, 1] if rank.rank == 0 else None)  # what rank 0's store saw
        grader_own = what.startswith("the rank runtime")
        assert sorted(facts.get(tamper.TAMPERED, [])) == sorted(
            f"{n} was replaced" for n in REBOUND[what] if grader_own
        )


def _reads_globals(function: types.FunctionType, seen: set[int]) -> list[str]:
    """The global names a function's code, its nested code and the closures it closes over read when they run. A
    module's own function it holds (rank_runtime.describe_exception, say) is not followed: the report path calls those
    under a guard, and sends its own error where they fail."""
    if id(function) in seen or "<locals>" not in function.__qualname__:
        return []
    seen.add(id(function))

    def read_by(code: types.CodeType) -> list[str]:
        found = [
            f"{code.co_name}: {i.argval}"
            for i in dis.get_instructions(code)
            if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")
        ]
        return found + [
            name for const in code.co_consts if isinstance(const, types.CodeType) for name in read_by(const)
        ]

    found = read_by(function.__code__)
    for cell in function.__closure__ or ():
        if isinstance(cell.cell_contents, types.FunctionType):
            found += _reads_globals(cell.cell_contents, seen)
    return found


def test_the_report_path_and_the_tamper_check_read_no_global(tmp_path):
    """Why rebinding changes nothing, for any name and not only those listed above: from the worker's end to the last
    byte sent, the code that runs reads no global, so no module attribute or builtin is looked up after the bind."""
    spec: Any = {
        "rank": 0,
        "world_size": 1,
        "backend": "gloo",
        "run_dir": str(tmp_path),
        "collective_timeout": 5.0,
        "student_file": str(STUDENT),
    }
    context = rank_runtime.RankContext(spec)
    recorder = collectives.Recorder(tmp_path, 0, str(STUDENT))
    read_end, write_end = os.pipe()
    try:
        report = rank_runtime._bind_report(write_end, context, recorder, lambda: None, torch)
        assert len(os.read(read_end, 1 << 10)) == wire.OPENING_BYTES  # the opening, written as it binds
    finally:
        os.close(read_end)
        os.close(write_end)
    functions: list[Any] = [*report, wire._encoder(torch, None), tamper.install, tamper.forget, tamper.freeze]
    functions += [tamper.replaced, tamper.hold_grader_code]
    assert [name for f in functions for name in _reads_globals(f, set())] == []


@pytest.mark.parametrize("how, said", [("exit", NOT_SEALED), ("return", NOT_SEALED), ("child", BYTES_AFTER)])
def test_a_report_written_into_the_channel_by_the_code_under_test_is_refused(channel_engine, how, said):
    """The code finds its report socket in /proc/self/fd and writes a well-formed report of forged facts: alone
    (then exits), before the runtime's (then returns), or from a child after the runtime's. It never passes."""
    result = run(channel_engine, "forges", env={"MASTER_PORT": "1"}, how=how)  # no store: the report is its only socket
    assert not result.ok
    for rank in result.ranks:
        assert rank.report is None and rank.report_problem == f"rank {rank.rank}'s report {said}"
    verdict = failure_verdict(result, STUDENT)
    assert verdict is not None and f"sent a damaged report (rank 0's report {said})" in verdict.message


def test_the_code_under_test_cannot_read_its_report_channel_back(channel_engine):
    """The channel is a socket: reopening it through /proc fails (a pipe's write end would open for reading and give
    back the runtime's opening, its key, before the grader had it), and reading it gives nothing."""
    result = run(channel_engine, "reads_back")
    assert result.ok, [rank.error for rank in result.ranks]
    assert [(rank.facts["reopened"], rank.facts["read"]) for rank in result.ranks] == [(False, 0)] * 2


def test_code_that_edits_the_runtimes_own_objects_is_neither_prevented_nor_detected(channel_engine):
    """The limit docs/SECURITY.md states: the facts dict, edited in place through the stack, is sent as edited, and
    nothing was replaced. What the runtime holds in its own process, that process's code can change."""
    result = run(channel_engine, "records_then_calls")
    assert result.ok, [rank.error for rank in result.ranks]
    assert [(rank.facts["value"], tamper.TAMPERED in rank.facts) for rank in result.ranks] == [(999.0, False)] * 2


@pytest.mark.parametrize(
    "what, replaced",
    [
        ("nothing", None),
        ("a method of the grader", "grader.engine.rank_runtime.RankContext.spy was replaced"),
        ("a spy", "torch.distributed.all_reduce was replaced"),
        ("a patch", "torch.nn.modules.module.Module.train was replaced"),
        (
            "a step hook",
            "an optimizer step hook of torch.optim.optimizer._global_optimizer_pre_hooks (_step_hook) was replaced",
        ),
        ("the step hooks' table", "torch.optim.optimizer._global_optimizer_pre_hooks was replaced"),
    ],
)
def test_what_the_code_under_test_replaced_of_the_graders_is_reported(channel_engine, what, replaced):
    """A spy and an optimizer hook the worker installed before the student's file loaded, a patch and a hook it puts
    back or removes when done (checked then), and the grader's own methods."""
    result = run(channel_engine, "tampers", what=what)
    assert result.ok, [rank.error for rank in result.ranks]
    expected = {} if replaced is None else {tamper.TAMPERED: [replaced]}
    assert [{k: v for k, v in rank.facts.items() if k == tamper.TAMPERED} for rank in result.ranks] == [expected] * 2


def test_a_result_whose_ranks_found_the_graders_code_replaced_is_marked(grade, tmp_path):
    """The check still judges what the code did (a correct ex01 passes: the rebinding changed nothing), and the result
    says what was replaced, in its notes and in `tampered`."""
    honest = tmp_path / "honest" / "ex01_process_group.py"
    honest.parent.mkdir()
    shutil.copyfile(REPO / "solutions" / "ex01_process_group.py", honest)
    rebinding = tmp_path / "rebinding" / "ex01_process_group.py"
    rebinding.parent.mkdir()
    rebinding.write_text(
        honest.read_text() + "\nimport grader.engine.wire as _wire\n_wire.encode = lambda report: b''\n"
    )
    for result in grade("ex01_process_group", honest, world_sizes=(2,)):
        assert result.passed and result.tampered == () and not any("marked" in note for note in result.notes)
    results = grade("ex01_process_group", rebinding, world_sizes=(2,))
    lines = ("rank 0: grader.engine.wire.encode was replaced", "rank 1: grader.engine.wire.encode was replaced")
    for result in results:
        assert result.passed and result.tampered == lines
        assert f"marked: the code under test replaced the grader's code ({'; '.join(lines)})" in result.notes
        assert result.to_json()["tampered"] == lines
