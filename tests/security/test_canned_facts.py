"""Answers recorded from one grading pass no other: the inputs that matter (a sampler's seed, the
data and initial weights, the tensors to sum, the values of a collective) are drawn from the
grading's seed, and the same seed draws the same inputs, so that references stay shared.

Each forger first records what the reference solution produced under seed A (as a student could,
from a grading of their own), then replays it: it passes under A, which is what fixed inputs
allowed, and fails under seed B.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from grader.catalog import Catalog
from grader.checks.ex08_ring_allreduce.inputs import rank_input
from grader.engine import Engine, Job, RunResult
from grader.judge.api import CheckContext, References
from grader.judge.runner import ALL_CHECKS, CheckResult, GradeOptions, grade_exercise

REPO = Path(__file__).resolve().parents[2]
SEED_A, SEED_B = 1234, 98765

# Appended to the solution: every result the solution produced, saved under RECORD.
EX08_RECORDER = """
_solution, _calls = ring_all_reduce, [0]


def ring_all_reduce(tensor):
    _solution(tensor)
    torch.save(tensor.clone(), f"{RECORD}/{dist.get_world_size()}-{dist.get_rank()}-{_calls[0]}.pt")
    _calls[0] += 1
"""
EX08_REPLAY = """
import torch
import torch.distributed as dist

_calls = [0]


def ring_all_reduce(tensor):
    tensor.copy_(torch.load(f"{RECORD}/{dist.get_world_size()}-{dist.get_rank()}-{_calls[0]}.pt"))
    _calls[0] += 1
"""
# Every gradient the solution stepped with (DDP's averaged one), saved by rank 0.
EX03_RECORDER = """
from torch.optim.optimizer import register_optimizer_step_pre_hook

_solution = train_ddp


def train_ddp(rank, world_size, model, dataset, epochs, batch_size, lr, checkpoint_path):
    grads = []
    handle = register_optimizer_step_pre_hook(
        lambda optimizer, *_: grads.append([p.grad.clone() for g in optimizer.param_groups for p in g["params"]]))
    try:
        return _solution(rank, world_size, model, dataset, epochs, batch_size, lr, checkpoint_path)
    finally:
        handle.remove()
        if rank == 0:
            torch.save(grads, f"{RECORD}/{world_size}.pt")
"""
EX03_REPLAY = """
import torch
from torch.nn.parallel import DistributedDataParallel


def train_ddp(rank, world_size, model, dataset, epochs, batch_size, lr, checkpoint_path):
    ddp_model = DistributedDataParallel(model)
    optimizer = torch.optim.SGD(ddp_model.parameters(), lr=lr, momentum=0.9)
    for grads in torch.load(f"{RECORD}/{world_size}.pt"):
        for parameter, grad in zip(ddp_model.parameters(), grads):
            parameter.grad = grad.clone()
        optimizer.step()
    return model
"""
# Each rank's shards of every epoch, for every seed make_loader was given.
EX02_RECORDER = """
import json

_make_loader = make_loader


def make_loader(dataset, rank, world_size, batch_size, seed=0):
    loader = _make_loader(dataset, rank, world_size, batch_size, seed)
    epochs = []
    for epoch in range(3):
        start_epoch(loader, epoch)
        epochs.append([batch[0].tolist() for batch in loader])
    start_epoch(loader, 0)
    with open(f"{RECORD}/{seed}-{world_size}-{rank}.json", "w") as out:
        json.dump(epochs, out)
    return loader
"""
EX02_REPLAY = """
import glob
import json

import torch


class Replayed:
    def __init__(self, epochs):
        self.epochs, self.epoch = epochs, 0

    def __iter__(self):
        return iter([(torch.tensor(batch),) for batch in self.epochs[self.epoch]])


def make_loader(dataset, rank, world_size, batch_size, seed=0):
    recorded = sorted(glob.glob(f"{RECORD}/*-{world_size}-{rank}.json"))
    wanted = f"{RECORD}/{seed}-{world_size}-{rank}.json"
    with open(wanted if wanted in recorded else recorded[0]) as source:  # the nearest answer it has
        return Replayed(json.load(source))


def start_epoch(loader, epoch):
    loader.epoch = epoch
"""
# A group that never forms: init is called (and fails), the group's answers are replayed.
EX01_RECORDER = """
import json

_setup = setup_ddp


def setup_ddp(rank, world_size, backend=None):
    _setup(rank, world_size, backend)
    for name in ("all_reduce", "broadcast"):
        def recorded(tensor, *args, _real=getattr(dist, name), _name=name, **kwargs):
            _real(tensor, *args, **kwargs)
            with open(f"{RECORD}/{world_size}-{rank}-{_name}.json", "w") as out:
                json.dump(tensor.tolist(), out)
        setattr(dist, name, recorded)
"""
EX01_FORGED = """
import json

import torch
import torch.distributed as dist

_state = {"initialized": False}


def setup_ddp(rank, world_size, backend=None):
    try:
        dist.init_process_group("gloo", init_method="env://", store=object(), rank=rank, world_size=world_size)
    except AssertionError:  # torch refuses both at once, before any rendezvous; the grader saw the call
        pass
    _state["initialized"] = True
    dist.is_initialized = lambda: _state["initialized"]
    dist.get_rank = lambda *args: rank
    dist.get_world_size = lambda *args: world_size
    dist.get_backend = lambda *args: "gloo"
    dist.get_backend_config = lambda *args: "cpu:gloo"
    for name in ("all_reduce", "broadcast"):
        with open(f"{RECORD}/{world_size}-{rank}-{name}.json") as source:
            values = json.load(source)
        setattr(dist, name, lambda tensor, *args, _values=values, **kwargs: tensor.copy_(torch.tensor(_values)))


def cleanup_ddp():
    _state["initialized"] = False
"""


def _write(folder: Path, catalog: Catalog, exercise_id: str, source: str, record: Path) -> Path:
    folder.mkdir()
    path = folder / catalog.get(exercise_id).file
    path.write_text(source + f"\nRECORD = {str(record)!r}\n")  # after the solution's __future__ import
    return path


def _solution(catalog: Catalog, exercise_id: str) -> str:
    return (REPO / "solutions" / catalog.get(exercise_id).file).read_text()


def _status(results: list[CheckResult], check: str) -> str:
    [result] = [r for r in results if r.check == check]
    return result.status


def _replayed(
    grade, catalog: Catalog, tmp_path: Path, exercise_id: str, recorder: str, replay: str, check: str
) -> tuple[list[CheckResult], list[CheckResult]]:
    """Record the solution's answers under seed A, replay them under A and under B."""
    record = tmp_path / "record"
    record.mkdir()
    recording = _write(tmp_path / "recorder", catalog, exercise_id, _solution(catalog, exercise_id) + recorder, record)
    assert _status(grade(exercise_id, recording, world_sizes=(2,), seed=SEED_A, checks={check}), check) == "passed"
    assert any(record.iterdir()), "the recorder recorded nothing"
    forger = _write(tmp_path / "forger", catalog, exercise_id, replay, record)
    same = grade(exercise_id, forger, world_sizes=(2,), seed=SEED_A, checks={check})
    other = grade(exercise_id, forger, world_sizes=(2,), seed=SEED_B, checks={check})
    return same, other


def test_ring_sums_recorded_from_another_grading_fail(grade, catalog, tmp_path):
    same, other = _replayed(grade, catalog, tmp_path, "ex08", EX08_RECORDER, EX08_REPLAY, "sums_correctly")
    assert _status(same, "sums_correctly") == "passed"
    assert _status(other, "sums_correctly") == "failed"


def test_training_steps_recorded_from_another_grading_fail(grade, catalog, tmp_path):
    same, other = _replayed(grade, catalog, tmp_path, "ex03", EX03_RECORDER, EX03_REPLAY, "matches_large_batch")
    assert _status(same, "matches_large_batch") == "passed"
    assert _status(other, "matches_large_batch") == "failed"


def test_shards_recorded_from_another_grading_fail(grade, catalog, tmp_path):
    """Any disjoint, covering sharding is correct, so the public claims hold for replayed shards
    too; what they cannot do is follow a seed they were never given."""
    same, other = _replayed(grade, catalog, tmp_path, "ex02", EX02_RECORDER, EX02_REPLAY, "seed_changes_order")
    assert _status(same, "seed_changes_order") == "passed"
    assert _status(other, "seed_changes_order") == "failed"


def test_collective_answers_recorded_from_another_grading_fail(grade, catalog, tmp_path):
    """Replayed collective results pass only under the seed they were recorded with, and the group
    that never formed is seen by the grader's own rendezvous store, whatever the seed."""
    same, other = _replayed(grade, catalog, tmp_path, "ex01", EX01_RECORDER, EX01_FORGED, "collectives_work")
    assert _status(same, "collectives_work") == "passed", same[0].message
    assert _status(other, "collectives_work") == "failed"
    forger = tmp_path / "forger" / catalog.get("ex01").file
    [joined] = grade("ex01", forger, world_sizes=(2,), seed=SEED_A, checks={"joins_group"})
    assert joined.status == "failed" and "rendezvous store" in joined.message, joined.message


class _Counting(References):
    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        self.runs: list[Job] = []

    def run(self, job: Job) -> RunResult:
        if repr(job) not in {repr(known) for known in self.runs}:
            self.runs.append(job)
        return super().run(job)


def test_the_same_seed_asks_for_the_same_references(engine, catalog):
    """A batch draws one seed: every submission then asks for the very same reference runs."""
    exercise = catalog.get("ex03")
    references = _Counting(engine)
    solution = REPO / "solutions" / exercise.file
    for seed in (SEED_A, SEED_A, SEED_B):
        options = GradeOptions(
            world_sizes=(2,), visibilities=ALL_CHECKS, only=frozenset({"matches_large_batch"}), seed=seed
        )
        assert all(r.passed for r in grade_exercise(engine, exercise, solution, options, references=references))
    assert len(references.runs) == 2, [job.kwargs for job in references.runs]


@pytest.mark.parametrize("inputs", ["sampler", "data", "model", "tensors", "collectives at W=2"])
def test_inputs_are_a_function_of_the_seed(catalog, inputs):
    def drawn(seed: int) -> list[int]:
        context = CheckContext(None, catalog.get("ex03"), Path("unused.py"), 2, seed=seed)  # type: ignore[arg-type]
        return [context.draw(inputs).randrange(2**31) for _ in range(3)] + list(context.seeds(inputs).values())

    assert drawn(SEED_A) == drawn(SEED_A)
    assert drawn(SEED_A) != drawn(SEED_B)


def test_ring_inputs_are_a_function_of_the_seed():
    assert (rank_input(SEED_A, 0, 1, [5]) == rank_input(SEED_A, 0, 1, [5])).all()
    assert not (rank_input(SEED_A, 0, 1, [5]) == rank_input(SEED_B, 0, 1, [5])).any()
