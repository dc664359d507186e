"""Trusted values never come from a rank: what a check compares against is computed where no student code runs.

A rank's report is composed beside the student's code, so any reference it carries is the student's to
rewrite. These tests feed the judge of exercises 14 to 18 prepared reports (no ranks started; the trusted
workers run in this process, as the trusted engine would run them) and check that a report forged from
what a rank has no longer passes, and that no rank-side schema has room for a reference.
"""

from __future__ import annotations

import importlib
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, get_args, get_type_hints

import pytest
import torch

from grader.catalog import load_catalog
from grader.checks.ex14_tensor_parallel import checks as ex14
from grader.checks.ex14_tensor_parallel import workers as ex14_workers
from grader.checks.ex16_mixed_precision import checks as ex16
from grader.checks.ex17_dcp_reshard import checks as ex17
from grader.checks.ex17_dcp_reshard import workers as ex17_workers
from grader.checks.ex18_fsdp_tp_2d import checks as ex18
from grader.engine import Job, RankOutcome, RunResult, wire
from grader.engine.facts import Worker
from grader.judge.api import CheckContext, CheckFailed, RunCache
from grader.paths import course_root

Forge = Callable[[Job], list[dict[str, Any]]]  # a run's job -> each rank's report, made from the job alone
TRUSTED = {"reference", "replays", "inspect_checkpoint"}  # the workers run by ctx.reference / ctx.inspect
# Words for what a check compares against: none may name a fact a rank reports.
REFERENCE_WORDS = ("reference", "expected", "unsplit", "replay", "full", "saved_state", "shapes", "want")


def _wired(facts: dict[str, Any]) -> dict[str, Any]:
    """The facts as the judge gets them: through the wire (tensors as arrays, tuples as lists)."""
    decoded: dict[str, Any] = wire.decode(wire.encode(facts))
    return decoded


def _result(job: Job, reports: list[dict[str, Any]]) -> RunResult:
    ranks = [RankOutcome(rank, report={"facts": _wired(f), "error": None}, status=0) for rank, f in enumerate(reports)]
    return RunResult(job=job, ranks=ranks, seconds=0.0, timed_out=False)


class _Prepared(RunCache):
    """The judge's side alone: the ranks' runs answered by `forge`, the trusted runs by the exercise's own
    trusted worker called in this process (it never loads student code either)."""

    def __init__(self, forge: Forge) -> None:
        self._forge = forge

    @property
    def scratch(self) -> str:
        return "/nonexistent/scratch"

    def run(self, job: Job, by: tuple[str, int] = ("", 0)) -> RunResult:
        if job.target.rpartition(":")[2] in TRUSTED:
            return self.reference(job)
        return _result(job, self._forge(job))

    def reference(self, job: Job) -> RunResult:
        module, _, name = job.target.rpartition(":")
        return _result(job, [getattr(importlib.import_module(module), name)(None, **job.kwargs)])


def _context(exercise_id: str, world_size: int, forge: Forge) -> CheckContext:
    exercise = load_catalog(course_root()).get(exercise_id)
    return CheckContext(_Prepared(forge), exercise, Path("student.py"), world_size=world_size, seed=7)


def _fails(check: Callable[[CheckContext], object], ctx: CheckContext) -> str:
    with pytest.raises(CheckFailed) as failed:
        check(ctx)
    return failed.value.verdict.message


# --- no rank-side schema has room for a reference ------------------------------------------------------


def _keys(schema: Any, seen: set[int] | None = None) -> Iterator[str]:
    """Every key of a TypedDict and of the TypedDicts inside it (through lists, dicts and unions)."""
    seen = set() if seen is None else seen
    if id(schema) in seen:
        return
    seen.add(id(schema))
    if typing.is_typeddict(schema):
        for key, hint in get_type_hints(schema).items():
            yield key
            yield from _keys(hint, seen)
    for arg in get_args(schema):
        yield from _keys(arg, seen)


@pytest.mark.parametrize(
    "exercise",
    ["ex14_tensor_parallel", "ex15_pipeline", "ex16_mixed_precision", "ex17_dcp_reshard", "ex18_fsdp_tp_2d"],
)
def test_no_rank_side_schema_holds_a_reference(exercise: str) -> None:
    module = importlib.import_module(f"grader.checks.{exercise}.facts")
    handles = [value for value in vars(module).values() if isinstance(value, Worker)]
    rank_side = [handle for handle in handles if handle.name not in TRUSTED]
    assert rank_side and len(rank_side) < len(handles), "the exercise has rank-side and trusted workers"
    for handle in rank_side:
        named = sorted({key for key in _keys(handle.facts) if any(word in key.lower() for word in REFERENCE_WORDS)})
        assert not named, f"{exercise}: {handle.name} reports {named}, which a check would compare against"


# --- exercise 14: outputs against the trusted unsplit block --------------------------------------------

W14 = 2


def _tensor(value: torch.Tensor) -> dict[str, Any]:
    return {
        "type": "Tensor",
        "shape": list(value.shape),
        "dtype": "torch.float32",
        "requires_grad": True,
        "value": value,
    }


def _ex14_rank(job: Job, rank: int, wrong: bool, old_layout: bool) -> dict[str, Any]:
    """A by_hand report built from the job alone: honest shards and one all-reduce each way; for outputs and
    gradients either the unsplit block's (what the rank used to receive as its reference) or `wrong` ones
    (twice those), with, in `old_layout`, that reference overwritten to match them as the ranks used to carry it."""
    full = ex14_workers.drawn(job.kwargs["data_seed"], job.world_size)
    unsplit = ex14_workers.unsplit(full)
    if wrong:
        unsplit = {key: 2 * value for key, value in unsplit.items()}
    n = full["w1"].shape[0] // job.world_size
    mine = slice(rank * n, (rank + 1) * n)
    shards = {"w1": full["w1"][mine], "b1": full["b1"][mine], "w2": full["w2"][:, mine], "b2": full["b2"]}
    grads = {
        "w1": unsplit["dw1"][mine],
        "b1": unsplit["db1"][mine],
        "w2": unsplit["dw2"][:, mine],
        "b2": unsplit["db2"],
    }
    reduce = [{"kind": "all_reduce", "op": "c10d.allreduce_.default", "numel": 40}]
    facts: dict[str, Any] = {
        "shards": {"type": "dict", "keys": list(shards), "tensors": {k: _tensor(v) for k, v in shards.items()}},
        "forward": reduce,
        "y": _tensor(unsplit["y"]),
        "backward": reduce,
        "dx": _tensor(unsplit["dx"]),
        "grads": {k: _tensor(v) for k, v in grads.items()},
    }
    if old_layout:
        facts |= {"full": {k: full[k] for k in ex14.KEYS}, "reference": unsplit}
    return facts


def _ex14(wrong: bool, old_layout: bool) -> CheckContext:
    return _context(
        "ex14", W14, lambda job: [_ex14_rank(job, rank, wrong, old_layout) for rank in range(job.world_size)]
    )


def test_ex14_outputs_that_equal_the_unsplit_block_pass() -> None:
    """The forging harness itself: the unsplit block's numbers, honestly laid out, pass every by-hand check."""
    for check in (ex14.shards_hold_their_slice, ex14.forward_matches_unsplit, ex14.backward_matches_unsplit):
        check(_ex14(wrong=False, old_layout=False))


@pytest.mark.parametrize(
    "check", [ex14.forward_matches_unsplit, ex14.backward_matches_unsplit, ex14.one_all_reduce_each_way]
)
def test_ex14_a_report_carrying_a_reference_fails(check: Callable[[CheckContext], None]) -> None:
    """A stub that copied the reference it was given into its outputs: a report that carries one is refused."""
    message = _fails(check, _ex14(wrong=False, old_layout=True))
    assert message.startswith("rank 0 reported facts the grader cannot judge: ")
    assert "the facts hold 'full', which ByHand does not have" in message
    assert "the facts hold 'reference', which ByHand does not have" in message


@pytest.mark.parametrize("old_layout", [True, False], ids=["reference-overwritten", "reference-dropped"])
def test_ex14_wrong_math_with_its_own_reference_fails(old_layout: bool) -> None:
    """Wrong math that overwrote the reference in place (6 of 9 before): compared with the trusted one now."""
    forward = _fails(ex14.forward_matches_unsplit, _ex14(wrong=True, old_layout=old_layout))
    backward = _fails(ex14.backward_matches_unsplit, _ex14(wrong=True, old_layout=old_layout))
    if old_layout:
        assert "which ByHand does not have" in forward and "which ByHand does not have" in backward
    else:
        assert forward.startswith("rank 0's output differs from the unsplit block's by up to ")
        assert backward.startswith("rank 0's gradient of x is exactly 2 times the unsplit block's")


def test_ex14_placements_are_judged_against_the_trusted_weights() -> None:
    """The weights a shard is located in come from the trusted worker: a rank that reports its own shards as
    "the full weights" (so that any shard looks like its block) still fails."""

    def forge(job: Job) -> list[dict[str, Any]]:
        reports = [_ex14_rank(job, rank, wrong=False, old_layout=False) for rank in range(job.world_size)]
        for report in reports:  # every rank keeps rank 0's blocks
            report["shards"] = reports[0]["shards"]
        return reports

    message = _fails(ex14.shards_hold_their_slice, _context("ex14", W14, forge))
    assert message.startswith("rank 1 holds rank 0's rows of w1")  # measured: every rank holds rank 0's, no permutation


# --- exercise 17: the resumed state against the trusted run; resume cannot rebuild what was saved -------

W17 = 2  # resumes at 1: one rank's pieces are the whole tensors


def _ex17_resume(job: Job, seed: int) -> dict[str, Any]:
    """A resume report made without the checkpoint: the saved state rebuilt from the job's arguments (the
    trusted run's first steps from `seed`), then trained on, as an honest single-rank resume records it."""
    args = {key: job.kwargs[key] for key in ("global_batch", "steps_before", "steps_after", "lr", "data_seed")}
    model, optimizer = ex17_workers._trained(**args, model_seed=seed)
    names = {id(p): name for name, p in model.named_parameters()}
    facts: dict[str, Any] = {
        "events": [
            {"op": "optimizer", "dtensors": len(names), "params": len(names)},
            {"op": "dcp.load", "path": job.kwargs["path"], "returned": True, "model_sharded": True},
            {"op": "fill", "dtensors": len(names), "local": 0, "whole": 0, "whole_elements": 0},
        ],
        "sharded_at_end": True,
        "sharded": sorted(names.values()),
        "loaded": {name: p.detach().reshape(-1).clone() for name, p in model.named_parameters()},
        "stale_optimizer": [],
        "state": ex17_workers._state(optimizer, names),
    }
    before, after, batch = args["steps_before"], args["steps_after"], args["global_batch"]
    dataset = ex17_workers.make_regression(batch * (before + after), args["data_seed"])
    recorder = ex17_workers.ShardStepRecorder(model)
    steps = [ex17_workers.step_samples(s, batch, 1, 0) for s in range(before, before + after)]
    ex17_workers._train(model, optimizer, dataset, steps, torch.device("cpu"))
    recorder.close()
    return facts | {"steps": recorder.steps}


def _ex17_forge(seed: Callable[[Job], int]) -> Forge:
    """Every run of exercise 17 answered without a checkpoint: a save that says it called dcp.save, and a
    resume whose state comes from `seed` of its job."""

    def forge(job: Job) -> list[dict[str, Any]]:
        if job.target.endswith(":save"):
            save = {"op": "dcp.save", "path": job.kwargs["path"], "returned": True}
            write = {"op": "write", "dtensors": 1, "local": 1, "whole": 0, "whole_elements": 0}
            return [{"events": [save, write], "async_unwaited": 0, "save_returned": True}] * job.world_size
        return [_ex17_resume(job, seed(job))]

    return forge


def test_ex17_the_state_rebuilt_with_the_saving_runs_seed_would_pass() -> None:
    """The forging harness itself: given the saving run's model seed (which the resuming run used to get),
    the state rebuilt without any checkpoint passes both checks of the resumed state."""
    ctx = _context("ex17", W17, lambda job: [])
    model_seed = ctx.seeds("model")["model_seed"]
    for check in (ex17.resumes_at_half, ex17.optimizer_resharded):
        check(_context("ex17", W17, _ex17_forge(lambda job: model_seed)))


def test_ex17_resume_cannot_rebuild_the_saved_state_from_what_it_receives() -> None:
    """The resuming run no longer receives the model seed: a state rebuilt from its own arguments is wrong."""
    assert "model_seed" not in ex17_workers.resume.__code__.co_varnames
    forge = _ex17_forge(lambda job: job.kwargs.get("model_seed", job.kwargs["fresh_seed"]))
    message = _fails(ex17.resumes_at_half, _context("ex17", W17, forge))
    assert message.startswith("after resume at W=1, the model does not hold the weights saved at W=2: ")
    message = _fails(ex17.optimizer_resharded, _context("ex17", W17, forge))
    assert message.startswith("after resume at W=1, the ranks' exp_avg shards joined are not the AdamW state")


def test_ex17_a_rank_that_reports_the_models_shapes_is_refused() -> None:
    """The layout the pieces are joined into is the trusted weights'; a report of shapes (which once let a
    rank shrink what was compared to nothing) does not fit the schema."""
    ctx = _context("ex17", W17, lambda job: [])
    model_seed = ctx.seeds("model")["model_seed"]

    def forge(job: Job) -> list[dict[str, Any]]:
        reports = _ex17_forge(lambda job: model_seed)(job)
        return [report | {"shapes": {}} for report in reports] if job.target.endswith(":resume") else reports

    message = _fails(ex17.optimizer_resharded, _context("ex17", W17, forge))
    assert message == (
        "rank 0 reported facts the grader cannot judge: the facts hold 'shapes', which Resumed does not have"
    )


# --- exercises 16 and 18: the parameters a rank must hold are the trusted model's --------------------------


def test_ex16_a_rank_that_reports_no_parameter_stores_nothing() -> None:
    """The shards' sizes are measured against the trusted model's parameters, not the ones a rank lists: an
    empty storage (with a unit of no parameters for every block) no longer passes."""
    report = {
        "linears": [],
        "collectives": [],
        "storage": [],
        "units": {"": {"params": [], "param_dtype": "bfloat16"}},
        "steps": ex16.STEPS,
        "saved": {},
        "optimizer": {"held": 0, "current": 0, "dtypes": ["float32"]},
        "grads": {},
        "losses": [],
        "returned": "NoneType",
        "final": {},
    }
    message = _fails(ex16.shards_fp32_master, _context("ex16", 2, lambda job: [report] * job.world_size))
    assert message.startswith("rank 0 stores 0 parameters, not the model's ")


def test_ex18_a_rank_that_reports_no_parameter_holds_nothing() -> None:
    """Placements are judged for every parameter of the trusted model: an empty list no longer passes."""
    report = {"rows": [], "losses": [], "steps": 3, "parameters": [], "units": {}, "returned": "NoneType"}
    message = _fails(ex18.placements_2d, _context("ex18", 4, lambda job: [report | {"final": {}}] * job.world_size))
    assert message.startswith("rank 0 holds 0 parameters, not the model's ")
