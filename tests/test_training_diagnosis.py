"""The shared diagnoses of training, on numbers made up here: a trajectory against its reference
(grader.judge.trajectory, its replays faked here by SGD on fixed gradients), the batches ranks drew
(grader.judge.samples), who wrote a file (grader.judge.writes). A cause is named only when its replay
reproduces every step, and nothing is named without one."""

from __future__ import annotations

import numpy as np
import pytest

from grader.judge.names import Cause
from grader.judge.replay import Hypothesis
from grader.judge.samples import Batches, Pipeline, diagnose_samples
from grader.judge.trajectory import Setting, diagnose, gathered_steps
from grader.judge.writes import landings, went_on_early, writers_problem

LR, MOMENTUM = 0.05, 0.9


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


def _hypothesis(cause: str, fitted: bool = False, **mistake) -> Hypothesis:
    return Hypothesis(Cause(cause), f"{cause} named", mistake=mistake, fitted=fitted)


HYPOTHESES = (
    _hypothesis("loss_summed", loss_scale="b"),
    _hypothesis("summed_over_ranks", loss_scale="W"),
    _hypothesis("divided_by_world_size", loss_scale="1/W"),
    _hypothesis("loss_not_divided_by_k", loss_scale="k"),
    _hypothesis("gradients_not_cleared", keep_grads=True),
    _hypothesis("no_momentum", momentum=0.0),
    _hypothesis("nesterov", nesterov=True),
    _hypothesis("lr_times_world_size", lr_scale="W"),
    _hypothesis("other_momentum", fitted=True, momentum="fit"),
    _hypothesis("weight_decay", fitted=True, weight_decay="fit"),
    _hypothesis("learning_rate", fitted=True, lr_scale="fit"),
)


def _setting(start: dict, grads: list[dict], factors: dict | None = None, **extra) -> Setting:
    """A setting whose replays are SGD on these fixed gradients, each knob applied as the reference loop would."""

    def replay(hypotheses: dict) -> dict:
        replays = {}
        for name, hypothesis in hypotheses.items():
            knobs = hypothesis["mistake"]
            scaled = [{k: knobs.get("loss_scale", 1.0) * g for k, g in grad.items()} for grad in grads]
            if knobs.get("keep_grads"):
                scaled = [{k: sum(g[k] for g in scaled[: i + 1]) for k in scaled[0]} for i in range(len(scaled))]
            replays[name] = _sgd(
                start,
                scaled,
                lr=LR * knobs.get("lr_scale", 1.0),
                momentum=knobs.get("momentum", MOMENTUM),
                nesterov=knobs.get("nesterov", False),
                decay=knobs.get("weight_decay", 0.0),
            )
        return replays

    return Setting(
        lr=LR,
        momentum=extra.pop("momentum", MOMENTUM),
        factors=factors or {"b": 8, "W": 2},
        reference="the reference",
        hypotheses=HYPOTHESES,
        replay=replay,
        **extra,
    )


def test_the_reference_itself_has_no_finding(run) -> None:
    start, grads = run
    assert diagnose(_sgd(start, grads), start, _sgd(start, grads), start, _setting(start, grads)) is None


@pytest.mark.parametrize(
    ("factor", "cause"),
    [(8, "loss_summed"), (2, "summed_over_ranks"), (0.5, "divided_by_world_size"), (3.0, "measured")],
)
def test_a_gradient_ratio_is_named_only_when_a_replay_reproduces_every_step(run, factor, cause) -> None:
    start, grads = run
    scaled = [{k: factor * g for k, g in grad.items()} for grad in grads]
    finding = diagnose(_sgd(start, scaled), start, _sgd(start, grads), start, _setting(start, grads))
    assert finding is not None
    assert finding.cause == cause and finding.step == 1
    assert f"exactly {'1/2 of' if factor == 0.5 else f'{factor:g} times'} the reference's" in finding.message
    if cause != "measured":
        assert finding.message.startswith(f"{cause} named. Measured: step 1, rank 0: the starting weights")
        assert "reproduces all 3 recorded steps" in finding.message


def test_a_look_alike_cannot_borrow_a_name(run) -> None:
    """8 times the gradient at step 1 only, then right: the ratio of the summed loss at the step that
    differs, but its replay leaves the run at step 2, so nothing is named."""
    start, grads = run
    once = [{k: 8 * g for k, g in grads[0].items()}, *grads[1:]]
    finding = diagnose(_sgd(start, once), start, _sgd(start, grads), start, _setting(start, grads))
    assert finding is not None
    assert finding.cause == "measured" and "exactly 8 times the reference's" in finding.message
    assert "loss_summed" not in finding.message


def test_causes_this_run_cannot_tell_apart_are_both_said_and_neither_named(run) -> None:
    start, grads = run
    doubled = [{k: 2 * g for k, g in grad.items()} for grad in grads]
    setting = _setting(start, grads, factors={"k": 2, "W": 2})
    finding = diagnose(_sgd(start, doubled), start, _sgd(start, grads), start, setting)
    assert finding is not None
    assert finding.cause == "measured"
    assert "cannot tell them apart: summed_over_ranks named; loss_not_divided_by_k named" in finding.message


def test_gradients_never_cleared_and_gradients_of_another_kind(run) -> None:
    start, grads = run
    summed = [
        grads[0],
        {k: grads[0][k] + grads[1][k] for k in grads[0]},
        {k: sum(g[k] for g in grads) for k in grads[0]},
    ]
    finding = diagnose(_sgd(start, summed), start, _sgd(start, grads), start, _setting(start, grads))
    assert finding is not None
    assert finding.cause == "gradients_not_cleared" and finding.step == 2
    other = [grads[0], grads[2]]
    finding = diagnose(_sgd(start, other), start, _sgd(start, grads[:2]), start, _setting(start, grads[:2]))
    assert finding is not None
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
def test_a_right_gradient_with_a_wrong_update_is_named_from_its_replay(run, variant, cause, step) -> None:
    start, grads = run
    finding = diagnose(_sgd(start, grads, **variant), start, _sgd(start, grads), start, _setting(start, grads))
    assert finding is not None
    assert finding.cause == cause and finding.step == step
    assert "the gradient equals the reference's" in finding.message


def test_without_hypotheses_the_observation_is_said_with_where_to_look(run) -> None:
    start, grads = run
    setting = Setting(lr=LR, momentum=MOMENTUM, factors={}, reference="the reference")
    finding = diagnose(_sgd(start, grads, lr=2 * LR), start, _sgd(start, grads), start, setting)
    assert finding is not None
    assert finding.cause == "measured"
    assert finding.message == (
        "step 1, rank 0: the gradient equals the reference's; the update is exactly 2 times the reference's for "
        "every parameter. So the gradient is right and the step is not: look at the learning rate and the optimizer"
    )


def test_parameters_off_by_an_exact_factor_are_named_with_it(run) -> None:
    """One bucket summed, the others averaged: only some parameters are W times the reference's. The message says
    which and by how much, and which equal it; a parameter off by no single factor keeps the plain measurement."""
    start, grads = run
    setting = Setting(lr=LR, momentum=MOMENTUM, factors={}, reference="the reference")
    doubled = [{"w": g["w"], "b": 2 * g["b"]} for g in grads]
    finding = diagnose(_sgd(start, doubled), start, _sgd(start, grads), start, setting)
    assert finding is not None and finding.cause == "measured"
    assert "in some parameters only: b is exactly 2 times the reference's; every other parameter's gradient " in (
        finding.message
    )
    assert "equals it (w)" in finding.message
    noisy = [{"w": g["w"], "b": g["b"] + np.float32(0.5)} for g in grads]
    finding = diagnose(_sgd(start, noisy), start, _sgd(start, grads), start, setting)
    assert finding is not None and "some parameters only" not in finding.message
    assert "it is not a multiple of it" in finding.message


def test_the_place_of_the_first_difference_is_in_the_message(run) -> None:
    start, grads = run
    setting = _setting(start, grads, momentum=0.0, labels={3: "the first step of epoch 1"})
    want = _sgd(start, grads, momentum=0.0)
    mine = want[:2] + _sgd(want[1]["params"], [{k: 2 * g for k, g in grads[2].items()}], momentum=0.0)
    finding = diagnose(mine, start, want, start, setting)
    assert finding is not None
    assert "step 3 (the first step of epoch 1), rank 0:" in finding.message


def test_pieces_of_every_rank_join_into_whole_tensors() -> None:
    whole = np.arange(12, dtype=np.float32).reshape(4, 3)
    ranks = [
        [{"grads": {"w": whole[:2].ravel()}, "params": {"w": whole[:2].ravel()}}],
        [{"grads": {"w": whole[2:].ravel()}, "params": {"w": whole[2:].ravel()}}],
    ]
    steps = gathered_steps(ranks, {"w": (4, 3)})
    assert steps is not None
    (step,) = steps
    assert np.array_equal(step["grads"]["w"], whole)
    flat = np.concatenate([whole.ravel(), [0.0], np.arange(3, dtype=np.float32)])  # w, padding, b
    layout = {"_flat_param": [["w", 12], [None, 1], ["b", 3]]}
    ranks = [
        [{"grads": {"_flat_param": flat[:8]}, "params": {"_flat_param": flat[:8]}}],
        [{"grads": {"_flat_param": flat[8:]}, "params": {"_flat_param": flat[8:]}}],
    ]
    steps = gathered_steps(ranks, {"w": (4, 3), "b": (3,)}, layout)
    assert steps is not None
    (step,) = steps
    assert np.array_equal(step["params"]["b"], np.arange(3))
    assert gathered_steps(ranks, {"w": (5, 3)}, layout) is None


def _pipeline(expected: list, mistakes: dict | None = None) -> Pipeline:
    return Pipeline(size=8, batch_size=2, epochs=2, expected=expected, mistakes=mistakes or {}, sampler="the sampler")


def _sample_cause(samples: list[Batches], pipeline: Pipeline) -> str:
    finding = diagnose_samples(samples, pipeline)
    assert finding is not None, "nothing said about these samples"
    return finding.cause


def test_data_signatures() -> None:
    expected = [[[0, 5], [2, 7], [1, 4], [6, 3]], [[1, 6], [3, 0], [7, 5], [2, 4]]]
    repeated = [[[0, 5], [2, 7], [0, 5], [2, 7]], [[1, 6], [3, 0], [1, 6], [3, 0]]]
    pipeline = _pipeline(expected, {"no_set_epoch": repeated})
    assert diagnose_samples(expected, pipeline) is None
    assert diagnose_samples([b[:3] for b in expected], pipeline) is None  # a beginning: the step count decides
    assert _sample_cause(repeated, pipeline) == "no_set_epoch"
    assert _sample_cause([[[0, 5, 2, 7]], [[1, 6, 3, 0]]], pipeline) == "batch_size"
    overlapping = [expected[0], [[0, 6], [3, 5], [7, 1], [2, 4]]]  # measured: no mistake builds these shards
    overlap = diagnose_samples(overlapping, pipeline)
    assert overlap is not None and overlap.cause == "measured" and "ranks 0 and 1 both trained on" in overlap.message
    one_rank_repeats = [expected[0], [[1, 6], [3, 4], [1, 6], [3, 4]]]  # an order is named only if every rank has it
    assert _sample_cause(one_rank_repeats, pipeline) == "measured"
    everything = [[[i, i + 1] for i in range(0, 8, 2)] * 2] * 2
    assert _sample_cause(everything, pipeline) == "no_sampler"
    # as many samples as the whole dataset, but not every sample: a signature of counts alone, no longer a cause
    doubled = [[[0, 1], [0, 1], [2, 3], [2, 3]] * 2] * 2
    assert _sample_cause(doubled, pipeline) == "measured"
    # another batch size, but not the sampler's samples in its order: measured, not "batch_size"
    assert _sample_cause([[[7, 6, 5, 4]], [[1, 6, 3, 0]]], pipeline) == "measured"


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
    reference = {"batches": [[[0]] * (per_epoch * checks.EPOCHS)], "steps": [], "momentum": 0.0}
    context = SimpleNamespace(world_size=2, replayer=lambda *_, **__: None)  # no replay is run here
    setting = checks._setting(context, reference)  # type: ignore[arg-type]
    assert setting.labels[per_epoch + 1] == "the first step of epoch 1"
    assert all(f"epoch {checks.EPOCHS}" not in label for label in setting.labels.values())
