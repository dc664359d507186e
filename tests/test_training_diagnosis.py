"""The shared diagnoses of training, on numbers made up here: a trajectory against its reference
(grader.judge.trajectory), the batches ranks drew (grader.judge.samples), who wrote a file
(grader.judge.writes). Each signature is named only when present, and nothing is named without one."""

from __future__ import annotations

import numpy as np
import pytest

from grader.judge.samples import Pipeline, diagnose_samples
from grader.judge.trajectory import Setting, diagnose, gathered_steps
from grader.judge.writes import landings, went_on_early, writers_problem

LR, MOMENTUM = 0.05, 0.9
SETTING = Setting(lr=LR, momentum=MOMENTUM, factors={"b": 8, "W": 2}, reference="the reference")


def _sgd(
    start: dict,
    grads: list[dict],
    lr: float = LR,
    momentum: float = MOMENTUM,
    nesterov: bool = False,
    decay: float = 0.0,
) -> list[dict]:
    """SGD steps from `start` with the given gradients (weight decay added to them, as torch does)."""
    weights, buffer, steps = dict(start), None, []
    for grad in grads:
        decayed = {k: g + decay * weights[k] for k, g in grad.items()}
        buffer = decayed if buffer is None else {k: momentum * buffer[k] + decayed[k] for k in grad}
        direction = {k: decayed[k] + momentum * buffer[k] for k in grad} if nesterov else buffer
        weights = {k: weights[k] - lr * direction[k] for k in grad}
        steps.append({"grads": grad, "params": weights})
    return steps


@pytest.fixture
def run() -> tuple[dict, list[dict]]:
    generator = np.random.default_rng(3)
    start = {"w": generator.normal(size=(4, 3)).astype(np.float32), "b": generator.normal(size=3).astype(np.float32)}
    grads = [{k: generator.normal(size=v.shape).astype(np.float32) for k, v in start.items()} for _ in range(3)]
    return start, grads


def test_the_reference_itself_has_no_finding(run) -> None:
    start, grads = run
    assert diagnose(_sgd(start, grads), start, _sgd(start, grads), start, SETTING) is None


@pytest.mark.parametrize(
    ("factor", "cause"),
    [
        (8, "loss_summed"),
        (2, "summed_over_ranks"),
        (0.5, "divided_by_world_size"),
        (1 / 8, "divided_by_b"),
        (3.0, "measured"),
    ],
)
def test_an_exact_gradient_ratio_is_named_only_after_a_number_of_the_run(run, factor, cause) -> None:
    start, grads = run
    scaled = [{k: factor * g for k, g in grad.items()} for grad in grads]
    finding = diagnose(_sgd(start, scaled), start, _sgd(start, grads), start, SETTING)
    assert finding.cause == cause and finding.step == 1


def test_a_ratio_equal_to_two_numbers_of_the_run_names_nothing(run) -> None:
    start, grads = run
    doubled = [{k: 2 * g for k, g in grad.items()} for grad in grads]
    setting = Setting(lr=LR, momentum=MOMENTUM, factors={"k": 2, "W": 2}, reference="the reference")
    finding = diagnose(_sgd(start, doubled), start, _sgd(start, grads), start, setting)
    assert finding.cause == "ambiguous_scale" and "W = k here" in finding.message


def test_gradients_never_cleared_and_gradients_of_another_kind(run) -> None:
    start, grads = run
    summed = [grads[0], {k: grads[0][k] + grads[1][k] for k in grads[0]}]
    assert diagnose(_sgd(start, summed), start, _sgd(start, grads[:2]), start, SETTING).cause == "gradients_not_cleared"
    other = [grads[0], grads[2]]
    finding = diagnose(_sgd(start, other), start, _sgd(start, grads[:2]), start, SETTING)
    assert finding.cause == "measured" and finding.step == 2 and "not a multiple" in finding.message


@pytest.mark.parametrize(
    ("variant", "cause", "step"),
    [
        ({"momentum": 0.0}, "no_momentum", 2),
        ({"momentum": 0.5}, "other_momentum", 2),
        ({"nesterov": True}, "nesterov", 1),
        ({"lr": 2 * LR}, "lr_times_world_size", 1),
        ({"lr": 1.5 * LR}, "learning_rate", 1),
        ({"decay": 0.01}, "weight_decay", 1),
    ],
)
def test_a_right_gradient_with_a_wrong_update_is_named_from_the_update(run, variant, cause, step) -> None:
    start, grads = run
    finding = diagnose(_sgd(start, grads, **variant), start, _sgd(start, grads), start, SETTING)
    assert finding.cause == cause and finding.step == step


def test_the_place_of_the_first_difference_is_in_the_message(run) -> None:
    start, grads = run
    setting = Setting(
        lr=LR, momentum=0.0, factors={}, reference="the reference", labels={3: "the first step of epoch 1"}
    )
    want = _sgd(start, grads, momentum=0.0)
    mine = want[:2] + _sgd(want[1]["params"], [{k: 2 * g for k, g in grads[2].items()}], momentum=0.0)
    assert "at step 3 (the first step of epoch 1)" in diagnose(mine, start, want, start, setting).message


def test_pieces_of_every_rank_join_into_whole_tensors() -> None:
    whole = np.arange(12, dtype=np.float32).reshape(4, 3)
    ranks = [
        [{"grads": {"w": whole[:2].ravel()}, "params": {"w": whole[:2].ravel()}}],
        [{"grads": {"w": whole[2:].ravel()}, "params": {"w": whole[2:].ravel()}}],
    ]
    (step,) = gathered_steps(ranks, {"w": (4, 3)})
    assert np.array_equal(step["grads"]["w"], whole)
    flat = np.concatenate([whole.ravel(), [0.0], np.arange(3, dtype=np.float32)])  # w, padding, b
    layout = {"_flat_param": [["w", 12], [None, 1], ["b", 3]]}
    ranks = [
        [{"grads": {"_flat_param": flat[:8]}, "params": {"_flat_param": flat[:8]}}],
        [{"grads": {"_flat_param": flat[8:]}, "params": {"_flat_param": flat[8:]}}],
    ]
    (step,) = gathered_steps(ranks, {"w": (4, 3), "b": (3,)}, layout)
    assert np.array_equal(step["params"]["b"], np.arange(3))
    assert gathered_steps(ranks, {"w": (5, 3)}, layout) is None


def _pipeline(expected: list, mistakes: dict | None = None) -> Pipeline:
    return Pipeline(size=8, batch_size=2, epochs=2, expected=expected, mistakes=mistakes or {}, sampler="the sampler")


def test_data_signatures() -> None:
    expected = [[[0, 5], [2, 7], [1, 4], [6, 3]], [[1, 6], [3, 0], [7, 5], [2, 4]]]
    repeated = [[[0, 5], [2, 7], [0, 5], [2, 7]], [[1, 6], [3, 0], [1, 6], [3, 0]]]
    pipeline = _pipeline(expected, {"no_set_epoch": repeated})
    assert diagnose_samples(expected, pipeline) is None
    assert diagnose_samples([b[:3] for b in expected], pipeline) is None  # a beginning: the step count decides
    assert diagnose_samples(repeated, pipeline).cause == "no_set_epoch"
    assert diagnose_samples([[[0, 5, 2, 7]], [[1, 6, 3, 0]]], pipeline).cause == "batch_size"
    overlapping = [expected[0], [[0, 6], [3, 5], [7, 1], [2, 4]]]
    assert diagnose_samples(overlapping, pipeline).cause == "shards_overlap"
    one_rank_repeats = [expected[0], [[1, 6], [3, 4], [1, 6], [3, 4]]]  # an order is named only if every rank has it
    assert diagnose_samples(one_rank_repeats, pipeline).cause == "measured"
    everything = [[[i, i + 1] for i in range(0, 8, 2)] * 2] * 2
    assert diagnose_samples(everything, pipeline).cause == "no_sampler"


def _save(path: str, start: float, end: float, **extra) -> dict:
    return {"op": "save", "into": "path", "path": path, "start": start, "end": end, **extra}


def test_who_wrote_the_file_whatever_the_way() -> None:
    path = "/scratch/ckpt.pt"
    staged = [
        {"op": "write", "path": "/scratch/tmp1", "time": 1.0},
        {"op": "save", "into": "file", "path": "/scratch/tmp1", "start": 1.1, "end": 1.5},
        {"op": "rename", "path": "/scratch/tmp1", "to": path, "time": 1.6},
    ]
    assert writers_problem([staged, []], path, exists=True, once=True) == ""
    assert [(landing.rank, landing.time) for landing in landings([staged, []], path)] == [(0, 1.6)]
    handle = [
        {"op": "write", "path": path, "time": 1.0},
        {"op": "save", "into": "file", "path": path, "start": 1.1, "end": 1.5},
    ]
    assert landings([handle], path)[0].time == 1.5
    assert "every rank saving" in writers_problem([handle, handle], path, exists=True, once=False)
    assert "rank 1 wrote the checkpoint ckpt.pt, and rank 0 did not" in writers_problem([[], handle], path, True, False)
    assert "2 times" in writers_problem([handle + handle], path, exists=True, once=True)
    assert writers_problem([handle + handle], path, exists=True, once=False) == ""
    assert "no rank wrote" in writers_problem([[], []], path, exists=False, once=True)
    assert "no rank was seen writing it" in writers_problem([[], []], path, exists=True, once=True)
    elsewhere = [_save("/scratch/ckpt-rank1.pt", 1.0, 1.1)]
    assert "rank 1 also saved a checkpoint (ckpt-rank1.pt)" in writers_problem([handle, elsewhere], path, True, False)


def test_going_on_before_the_file_landed() -> None:
    path = "/scratch/ckpt.pt"
    held = [_save(path, 2.0, 2.5, moved_on_before=[1])]
    assert went_on_early([held, []], path, ["a", "a"], [[], [3.0]]) == [1]  # causal proof beats the clock
    fine = [_save(path, 2.0, 2.5, moved_on_before=[])]
    assert went_on_early([fine, []], path, ["a", "a"], [[], [2.6]]) == []
    assert went_on_early([fine, []], path, ["a", "a"], [[], [2.4]]) == [1]
    assert went_on_early([fine, []], path, ["a", "b"], [[], [2.4]]) == []  # another host's clock is not compared


def test_ex03_names_epochs_from_0_as_set_epoch_counts_them():
    """The step that opens the second epoch is "the first step of epoch 1": the stubs count epochs from 0
    (start_epoch(loader, 0), set_epoch(epoch)); steps count from 1, the first update being step 1."""
    from types import SimpleNamespace

    from grader.checks.ex03_train_ddp import checks

    per_epoch = 7
    reference = {"batches": [[[0]] * (per_epoch * checks.EPOCHS)], "own_batch_grads": [], "momentum": 0.0}
    setting = checks._setting(SimpleNamespace(world_size=2), reference)  # type: ignore[arg-type]
    assert setting.labels[per_epoch + 1] == "the first step of epoch 1"
    assert all(f"epoch {checks.EPOCHS}" not in label for label in setting.labels.values())
