"""Errors as a student meets them (issue 21, point 4): a wrapper's chain is followed to the
rank's own error, torch's errors with one meaning in this course are explained, an echo is traced
to the rank that caused it."""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.distributed.checkpoint.state_dict import _init_optim_state

from grader.engine import Job, RankOutcome, RunResult
from grader.engine.rank_runtime import (
    GRADER_PACKAGE,
    StepCounter,
    describe_exception,
    exception_chain,
    library_calls,
)
from grader.engine.supervisor import _checked_report
from grader.judge.diagnose import MEANING_PREFIX, PHASE_PREFIX, failure_verdict
from grader.judge.explain import error_messages, error_types, explain, known_errors, parse
from grader.judge.phases import phase


def _raised(make) -> BaseException:
    try:
        make()
    except BaseException as exc:  # noqa: BLE001 - the exception is the test's subject
        return exc
    raise AssertionError("nothing raised")


def _from(suppress: bool, explicit: bool):
    def make() -> None:
        try:
            raise ValueError("the rank's own error")
        except ValueError as exc:
            if suppress:
                raise RuntimeError("wrapped") from None
            if explicit:
                raise RuntimeError("wrapped") from exc
            raise RuntimeError("wrapped")  # noqa: B904 - the implicit __context__ is what is tested

    return make


def test_the_chain_follows_cause_and_context_but_not_a_suppressed_context():
    assert [type(e).__name__ for e in exception_chain(_raised(_from(False, True)))] == ["RuntimeError", "ValueError"]
    assert [type(e).__name__ for e in exception_chain(_raised(_from(False, False)))] == ["RuntimeError", "ValueError"]
    assert [type(e).__name__ for e in exception_chain(_raised(_from(True, False)))] == ["RuntimeError"]


def test_a_reported_error_carries_its_chain_and_the_judge_searches_all_of_it():
    error = describe_exception(_raised(_from(False, True)), Path(__file__))
    assert error["message"] == "wrapped"
    assert "the rank's own error" in error_messages(error)
    assert error_types(error) == ["RuntimeError", "ValueError"]
    hidden = describe_exception(_raised(_from(True, False)), Path(__file__))
    assert "the rank's own error" not in error_messages(hidden)


def test_an_error_reported_without_a_chain_is_its_own_chain():
    assert error_types({"type": "ValueError", "message": "m"}) == ["ValueError"]
    assert error_messages({"type": "ValueError", "message": "m", "chain": "not a list"}) == "m"
    assert error_messages(None) == ""


# --- torch's errors explained: the table is data, checked here -------------------------------------


def test_every_entry_of_the_table_compiles_is_unique_and_explains_its_own_example(catalog):
    entries = known_errors()
    assert len({e.name for e in entries}) == len(entries) >= 9
    hints = {hint.name for exercise in catalog.exercises for hint in exercise.hints}
    for entry in entries:
        error = {"type": "", "message": entry.example, "traceback": entry.example_traceback}
        assert entry.pattern.search(entry.example), entry.name
        assert explain(error) == entry, f"{entry.name}'s example is explained by another entry"
        assert entry.hint is None or entry.hint in hints, f"{entry.name}: no hint named {entry.hint!r}"


@pytest.mark.parametrize(
    ("table", "problem"),
    [
        ('[[error]]\nname="a"\npattern="("\nmeaning="m"\nexample="e"', "missing \\)"),
        ('[[error]]\nname="a"\npattern="x"\nmeaning="m"\nexample="x"\n' * 2, "two entries are named 'a'"),
        ('[[error]]\nname="a"\npattern="x"\nexample="x"', "lacks \\['meaning'\\]"),
        ('[[error]]\nname="a"\npattern="x"\nmeaning="m"\nexample="x"\nwhere="y"', "no `example_traceback`"),
    ],
)
def test_a_broken_table_is_refused_with_the_entry_named(table, problem):
    with pytest.raises(ValueError, match=problem):
        parse(table)


def test_a_pickling_error_means_what_raised_it_there():
    message = "AttributeError: Can't pickle local object 'f.<locals>.Net'"
    saved = {"type": "AttributeError", "message": message, "traceback": 'File "/x/torch/serialization.py"'}
    spawned = {"type": "AttributeError", "message": message, "traceback": 'File "/x/multiprocessing/reduction.py"'}
    pickled, target = explain(saved), explain(spawned)
    assert pickled is not None and pickled.name == "pickled_model"
    assert target is not None and target.name == "pickled_process_target"
    assert explain({"type": "AttributeError", "message": message, "traceback": ""}) is None


def test_a_wrapped_torch_error_is_explained_from_its_chain_and_the_verdict_keeps_torchs_message():
    wrapped = {
        "type": "RuntimeError",
        "message": "setup failed",
        "traceback": "",
        "chain": [
            {"type": "RuntimeError", "message": "setup failed"},
            {"type": "ValueError", "message": "Default process group has not been initialized, please make sure"},
        ],
    }
    verdict = failure_verdict(_result([_raised_outcome(0, wrapped), _raised_outcome(1, wrapped)]), None)
    assert verdict is not None
    assert verdict.message.startswith("every rank raised RuntimeError: setup failed")
    assert f"{MEANING_PREFIX}a collective, or DDP, was used before `dist.init_process_group`" in verdict.message
    unknown = {"type": "KeyError", "message": "'weight'", "traceback": ""}
    verdict = failure_verdict(_result([_raised_outcome(0, unknown)]), None)
    assert verdict is not None
    assert MEANING_PREFIX not in verdict.message


def test_the_hint_of_a_known_error_goes_with_the_verdict():
    error = {"type": "RuntimeError", "message": "Expected to have finished reduction in the prior iteration"}
    verdict = failure_verdict(_result([_raised_outcome(0, error)]), None)
    assert verdict is not None
    assert verdict.hint == "find_unused_parameters"


# --- echoes: constructed outcomes (tests/engine/test_faults.py has the real runs) ---------------------

RESET = "[../third_party/gloo/gloo/transport/tcp/pair.cc:537] Read error [127.0.0.1]:9102: Connection reset by peer"


def _raised_outcome(rank: int, error: dict) -> RankOutcome:
    return RankOutcome(rank, report={"facts": {}, "error": {"traceback": "", **error}}, status=0)


def _result(ranks: list[RankOutcome]) -> RunResult:
    return RunResult(Job("w:f", len(ranks)), ranks, 1.0, False)


@pytest.mark.parametrize(
    "cause",
    [
        _raised_outcome(2, {"type": "KeyError", "message": "'weight'"}),
        RankOutcome(2, status=-9),  # killed
        RankOutcome(2, status=3),  # exited before reporting
        RankOutcome(2, status=-9, stopped="deadline"),  # hung
    ],
)
def test_a_connection_error_is_the_echo_of_the_rank_that_failed_otherwise(cause):
    echo = {"type": "RuntimeError", "message": RESET}
    verdict = failure_verdict(_result([_raised_outcome(0, echo), _raised_outcome(1, echo), cause]), None)
    assert verdict is not None
    first, *rest = verdict.message.splitlines()
    assert first.startswith("rank 2 "), verdict.message
    assert 'the errors of ranks 0-1, "Connection reset by peer", are the echo of rank 2\'s failure above' in rest[-1]
    assert RESET in verdict.verbose_details


def test_connection_errors_on_every_rank_are_reported_as_they_are():
    echo = {"type": "RuntimeError", "message": RESET}
    verdict = failure_verdict(_result([_raised_outcome(0, echo), _raised_outcome(1, echo)]), None)
    assert verdict is not None
    assert verdict.message.startswith("every rank raised RuntimeError: ") and "echo" not in verdict.message


# --- the phase a rank raised in (issue 31): reported by the rank, worded by the judge -------------------------

HERE = Path(__file__)  # the "student's file" of the crashes below: their frames are this file's


def _crash(make, steps: int | None = 2) -> dict:
    return describe_exception(_raised(make), HERE, steps)


def _forward() -> None:
    torch.nn.Linear(3, 2)(torch.zeros(2, 4))


def _backward_into_a_hook() -> None:
    x = torch.zeros(2, requires_grad=True)
    x.register_hook(lambda grad: grad.numel() + None)  # the student's hook raises, called back by autograd
    (x * 2).sum().backward()


def test_a_crash_reports_the_library_call_the_students_code_was_in_and_the_steps_done():
    forward = _crash(_forward)
    assert forward["phase"]["calls"][0] == "torch/nn/modules/module.py:_wrapped_call_impl"
    assert forward["phase"]["steps"] == 2
    assert phase(forward) == "the forward pass, after 2 optimizer steps"
    hooked = _crash(_backward_into_a_hook, steps=0)
    assert hooked["phase"]["calls"][0] == "torch/_tensor.py:backward"
    assert not any("lambda" in call for call in hooked["phase"]["calls"]), "the outer call is the phase, not the hook"
    assert phase(hooked) == "the backward pass, before any optimizer step"
    assert _crash(_forward, steps=None)["phase"] == {
        "calls": [
            "torch/nn/modules/module.py:_wrapped_call_impl",
            "torch/nn/modules/module.py:_call_impl",
            "torch/nn/modules/linear.py:forward",
        ],
        "by": "student",
    }


def test_where_the_students_code_is_not_on_the_stack_the_phase_is_the_grader_workers_call():
    worker = f"{GRADER_PACKAGE}checks/ex14_tensor_parallel/workers.py"
    frames = traceback.StackSummary.from_list(
        [
            (f"{GRADER_PACKAGE}engine/rank_runtime.py", 1, "run", ""),
            (worker, 2, "parallelized", ""),
            ("/v/site-packages/torch/nn/modules/module.py", 3, "_wrapped_call_impl", ""),
            (f"{GRADER_PACKAGE}rank/training.py", 4, "_before", ""),  # a grader's hook: called back, not the phase
            ("/v/site-packages/torch/functional.py", 5, "split", ""),
        ]
    )
    calls = library_calls(frames, lambda filename: filename.startswith(GRADER_PACKAGE))
    assert calls == ["torch/nn/modules/module.py:_wrapped_call_impl"]
    error = {"phase": {"calls": calls, "by": "grader", "steps": 0}, "student_frames": []}
    assert phase(error) == "the forward pass (the grader's call)"


def _phase(calls: object, steps: object = 0, function: str = "train") -> str:
    frames = [{"file": "x.py", "line": 1, "function": function, "code": ""}]
    return phase({"type": "E", "message": "", "student_frames": frames, "phase": {"calls": calls, "steps": steps}})


def test_the_phase_is_worded_from_a_table_of_torchs_entry_points():
    wrapped = [
        "torch/distributed/_composable/contract.py:wrapper",
        "torch/distributed/fsdp/_fully_shard/_fully_shard.py:fully_shard",
    ]
    assert _phase(wrapped) == "wrapping the model with fully_shard()"  # a decorator's wrapper is skipped
    assert _phase(["torch/optim/optimizer.py:wrapper"], 2) == "optimizer step 3"
    assert (
        _phase(
            [
                "torch/distributed/checkpoint/logger.py:wrapper",
                "torch/distributed/checkpoint/utils.py:inner_func",
                "torch/distributed/checkpoint/state_dict_loader.py:load",
            ]
        )
        == "loading with dcp.load()"
    )
    assert _phase(
        ["torch/distributed/c10d_logger.py:wrapper", "torch/distributed/distributed_c10d.py:all_reduce"], 1
    ) == ("the collective dist.all_reduce(), after 1 optimizer step")
    assert _phase(["torch/_tensor.py:split"], 0, "tp_mlp_forward") == "in tp_mlp_forward()"  # the graded function


@pytest.mark.parametrize(
    "forged",
    [
        {"calls": "torch/_tensor.py:backward", "steps": "2"},
        {"calls": [{"a": 1}], "steps": -1},
        {"calls": ["evil/x.py:y"], "steps": True},
        "the phase",
    ],
)
def test_a_forged_phase_is_never_more_than_words_of_the_table(forged):
    error = {"type": "E", "message": "", "student_frames": [{"function": "f() ; rm"}], "phase": forged}
    assert phase(error) == ""


def test_a_step_torch_takes_on_its_own_is_not_the_students():
    counter = StepCounter(HERE)
    handle = counter.install()
    try:
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.AdamW(model.parameters())
        _init_optim_state(optimizer)  # what get_state_dict does: a step of lr 0 to make the optimizer's state
        assert counter.steps == 0
        model(torch.ones(1, 2)).sum().backward()
        optimizer.step()
        assert counter.steps == 1
    finally:
        handle.remove()


def test_the_supervisor_keeps_a_reports_phase_and_chain_as_short_plain_values():
    error = {
        "type": "E",
        "message": "m",
        "chain": [{"type": "E", "message": "x" * 9000, "who": "rank 1"}, 3],
        "phase": {"calls": ["a:b"] * 20, "steps": 10**12},
    }
    clean = _checked_report({"facts": {}, "error": error})["error"]
    assert clean["phase"] == {"calls": ["a:b"] * 8}
    assert clean["chain"] == [{"type": "E", "message": "x" * 4000, "who": "rank 1"}]
    assert "phase" not in _checked_report({"facts": {}, "error": {**error, "phase": ["a:b"]}})["error"]


def test_a_crash_is_said_in_a_few_lines_with_torchs_first_error_its_phase_and_meaning():
    message = (
        "a and b must have same reduction dim, but got [6, 32] X [16, 32].\n\n"
        "Sharding propagation failed for aten.addmm.default(Spec(f32[32](R))) on DeviceMesh((tp=2), 'cpu')"
    )
    frames = [{"file": "/s/ex18.py", "line": 48, "function": "train", "code": "loss = model(x)"}]
    error = {
        "type": "RuntimeError",
        "message": message,
        "traceback": f"Traceback...\nRuntimeError: {message}",
        "student_frames": frames,
        "phase": {"calls": ["torch/nn/modules/module.py:_wrapped_call_impl"], "steps": 0},
    }
    verdict = failure_verdict(_result([_raised_outcome(0, error), _raised_outcome(1, error)]), None)
    assert verdict is not None
    first, at, phase_said, meaning = verdict.message.splitlines()
    assert (
        first == "every rank raised RuntimeError: a and b must have same reduction dim, but got [6, 32] X [16, 32]..."
    )
    assert at == "  at ex18.py:48 in train(): `loss = model(x)`"
    assert phase_said == f"  {PHASE_PREFIX}the forward pass, before any optimizer step"
    assert meaning.startswith(f"  {MEANING_PREFIX}a tensor-parallel matrix multiply got operands split")
    assert "Sharding propagation failed" in verdict.verbose_details  # torch's whole message, in the traceback
