"""Rank side of exercise 15: run the student's pipeline on a stack of layers, under the grader's own
watch on the pipeline stages; trusted workers for the single-process reference and the replays.

PipelineWatch wraps `_PipelineStageBase` (the base of `PipelineStage` and of the stages `pipeline()`
builds): every stage built is recorded with its stage index, its number of stages and the model's
layers it holds, found by their values (a slice of the model, a deep copy with layers deleted and a
traced submodule hold the same numbers before training); every forward and backward of a
micro-batch is recorded in the order the rank ran it, with the optimizer step it belongs to. That
order is the schedule's own timeline, which the judge replays in unit time slots (no clock: a
loaded machine cannot change it). Every rank gets the whole model, seeded alike, and the whole batch.
A stage's parameters, the optimizer's and their gradients are read only where their type is one the contract
allows (grader/engine/exact.py): a subclass would answer its own values and sizes.
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.distributed.pipelining.schedules import _PipelineSchedule
from torch.distributed.pipelining.stage import _PipelineStageBase
from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook
from torch.utils.data import TensorDataset

from grader.checks.ex15_pipeline.facts import BUBBLE_GRID, OUTSIDE_RANKS, SCHEDULES, SPLIT_GRID, UNKNOWN_SCHEDULES
from grader.engine import exact
from grader.engine.facts import ReplayedStep, ReplayRequest, TrainingReplays
from grader.engine.rank_runtime import RankContext
from grader.rank.patches import Patches
from grader.rank.training import MOMENTUM, StepRecorder, optimizer_state, replay_all, train_reference

WIDTH, LAYERS = 8, 5


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(WIDTH, WIDTH)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.linear(x))


def make_pipe(seed: int) -> nn.Sequential:
    """LAYERS layers of the same width: any contiguous split of them is a pipeline."""
    torch.manual_seed(seed)
    return nn.Sequential(*(Layer() for _ in range(LAYERS)))


def make_data(size: int, seed: int) -> TensorDataset:
    generator = torch.Generator().manual_seed(seed)
    inputs = torch.randn(size, WIDTH, generator=generator)
    mixing = torch.randn(WIDTH, WIDTH, generator=generator)
    targets = torch.tanh(inputs @ mixing) + 0.1 * torch.randn(size, WIDTH, generator=generator)
    return TensorDataset(inputs, targets)


def step_indices(steps: int, batch_size: int) -> list[list[int]]:
    return [list(range(s * batch_size, (s + 1) * batch_size)) for s in range(steps)]


class PipelineWatch:
    """The stages built, the micro-batch actions in the order they ran, and every optimizer step (the
    gradients before it and the weights after it, named after the model's parameters by their values
    at the first step), on this rank."""

    def __init__(self, initial: dict[str, torch.Tensor]) -> None:
        self.initial = initial
        self.stages: list[dict[str, Any]] = []
        self.schedules: list[dict[str, Any]] = []  # per schedule built: its class, m, loss_fn given, scale_grads
        self.actions: list[list[Any]] = []  # [optimizer step (from 1), stage index, "F"/"B"/"W", micro-batch]
        self.steps: list[dict[str, Any]] = []
        self.start: dict[str, torch.Tensor] = {}
        self._names: dict[int, str] = {}  # id(parameter) -> the model's name for it
        self._patches = Patches()
        self._handles: list[Any] = []

    def name_of(self, tensor: torch.Tensor) -> str | None:
        """The model parameter `tensor` holds the initial value of (a copy or the parameter itself)."""
        if id(tensor) in self._names:
            return self._names[id(tensor)]
        if not exact.tensor(tensor, "model"):
            return None
        value = tensor.detach().cpu()
        for name, initial in self.initial.items():
            if exact.shape(initial) == exact.shape(value) and torch.equal(initial, value):
                self._names[id(tensor)] = name
                return name
        return None

    def install(self) -> PipelineWatch:
        base = _PipelineStageBase
        self._patches.replace(_PipelineSchedule, "__init__", self._scheduled(_PipelineSchedule.__init__))
        self._patches.replace(base, "__init__", self._built(base.__init__))
        self._patches.replace(base, "forward_one_chunk", self._action(base.forward_one_chunk, "F"))
        self._patches.replace(base, "backward_one_chunk", self._action(base.backward_one_chunk, "B"))
        self._patches.replace(base, "backward_weight_one_chunk", self._action(base.backward_weight_one_chunk, "W"))
        self._handles += [
            register_optimizer_step_pre_hook(self._before),
            register_optimizer_step_post_hook(self._after),
        ]
        return self

    def close(self) -> None:
        self._patches.restore()
        for handle in self._handles:
            handle.remove()

    def _built(self, original: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        @functools.wraps(original)
        def init(stage: Any, submodule: nn.Module, stage_index: int, num_stages: int, *args: Any, **kwargs: Any) -> Any:
            names = [watch.name_of(p) for p in submodule.parameters()] if isinstance(submodule, nn.Module) else []
            held = sorted({int(n.split(".", 1)[0]) for n in names if n is not None})
            watch.stages.append(
                {
                    "index": int(stage_index),
                    "count": int(num_stages),
                    "layers": held,
                    "names": sorted(n for n in names if n is not None),
                    "foreign": sum(n is None for n in names),
                }
            )
            return original(stage, submodule, stage_index, num_stages, *args, **kwargs)

        return init

    def _scheduled(self, original: Callable[..., Any]) -> Callable[..., Any]:
        watch = self

        @functools.wraps(original)
        def init(schedule: Any, *args: Any, **kwargs: Any) -> Any:
            original(schedule, *args, **kwargs)
            watch.schedules.append(
                {
                    "class": type(schedule).__name__,
                    "micro_batches": getattr(schedule, "_n_microbatches", None),
                    "loss_fn": getattr(schedule, "_loss_fn", None) is not None,
                    "scale_grads": bool(getattr(schedule, "scale_grads", True)),
                }
            )

        return init

    def _action(self, original: Callable[..., Any], kind: str) -> Callable[..., Any]:
        watch = self

        @functools.wraps(original)
        def run(stage: Any, chunk: int, *args: Any, **kwargs: Any) -> Any:
            full = kwargs.get("full_backward", args[1] if kind == "B" and len(args) > 1 else True)
            action = kind if full else "I"  # "I": the input gradient alone, its weights' later ("W")
            watch.actions.append([len(watch.steps) + 1, int(stage.stage_index), action, int(chunk)])
            return original(stage, chunk, *args, **kwargs)

        return run

    def _named(self, optimizer: torch.optim.Optimizer) -> list[tuple[str, torch.Tensor]]:
        params = exact.optimizer_parameters(optimizer)
        return [(self.name_of(p) or f"param{i}", p) for i, p in enumerate(params)]

    def _before(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        named = self._named(optimizer)
        if not self.steps:
            self.start = {name: p.detach().cpu().clone() for name, p in named}
        grads = {
            name: (p.grad.detach().cpu().clone() if exact.tensor(p.grad, "model") else torch.zeros_like(p).cpu())
            for name, p in named
        }
        self.steps.append({"grads": grads, "no_grad": [name for name, p in named if p.grad is None]})

    def _after(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        named = self._named(optimizer)
        self.steps[-1]["params"] = {name: p.detach().cpu().clone() for name, p in named}
        self.steps[-1]["state"] = optimizer_state(optimizer, named)


def _probe(function: Callable[..., Any], args: tuple[Any, ...], convert: Callable[[Any], Any]) -> dict[str, Any]:
    """What the student's function gave for `args`: {"value": ...} or {"error": a sentence}."""
    try:
        result = function(*args)
    except NotImplementedError:
        raise
    except Exception as exc:  # the student's function raised: a fact to judge, with its message
        return {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
    try:
        return {"value": convert(result)}
    except (TypeError, ValueError, OverflowError):
        return {"error": f"returned {type(result).__name__} {repr(result)[:80]}"}


def _layers(result: Any) -> list[int]:
    if isinstance(result, torch.Tensor) and not exact.tensor(result, "returned tensor"):
        raise TypeError("a tensor of a type the contract does not allow")
    if isinstance(result, torch.Tensor) or hasattr(result, "tolist"):
        result = result.tolist()
    if not isinstance(result, (range, list, tuple)) or len(result) > 10_000:
        raise TypeError("not a range or list of layer indices")
    if not all(isinstance(i, numbers.Integral) and not isinstance(i, bool) for i in result):
        raise TypeError("not a range or list of ints")
    return [int(i) for i in result]


def _fraction(result: Any) -> float:
    if isinstance(result, torch.Tensor) and exact.tensor(result, "returned tensor") and exact.numel(result) == 1:
        result = result.item()
    if isinstance(result, bool) or not isinstance(result, numbers.Real):
        raise TypeError("not a number")
    return float(result)


def split_grid(ctx: RankContext) -> dict[str, Any]:
    """stage_layers on its grid (one process: a pure function)."""
    stage_layers = ctx.student("stage_layers")
    ctx.facts["split"] = [
        [num_layers, world_size, rank, _probe(stage_layers, (num_layers, world_size, rank), _layers)]
        for num_layers, world_size in SPLIT_GRID
        for rank in range(world_size)
    ]
    ctx.facts["outside"] = [[n, w, r, _probe(stage_layers, (n, w, r), _layers)] for n, w, r in OUTSIDE_RANKS]
    return {}


def bubble_grid(ctx: RankContext) -> dict[str, Any]:
    """bubble_fraction on its grid (one process: a pure function)."""
    bubble_fraction = ctx.student("bubble_fraction")
    ctx.facts["bubble"] = [
        [p, m, schedule, _probe(bubble_fraction, (p, m, schedule), _fraction)]
        for p, m in BUBBLE_GRID
        for schedule in SCHEDULES
    ]
    ctx.facts["unknown"] = [[p, m, s, _probe(bubble_fraction, (p, m, s), _fraction)] for p, m, s in UNKNOWN_SCHEDULES]
    return {}


def train(
    ctx: RankContext,
    schedule: str,
    steps: int,
    batch_size: int,
    micro_batches: int,
    lr: float,
    data_seed: int,
    model_seed: int,
) -> dict[str, Any]:
    ctx.init_group()
    model = make_pipe(model_seed)  # every rank builds the whole model alike, and keeps its stage
    inputs, targets = make_data(steps * batch_size, data_seed).tensors
    batches = [(inputs[i].clone(), targets[i].clone()) for i in step_indices(steps, batch_size)]
    watch = PipelineWatch({name: t.detach().clone() for name, t in model.named_parameters()}).install()
    train_pipeline = ctx.student("train_pipeline")
    facts = ctx.facts
    try:
        trained = train_pipeline(ctx.rank, ctx.world_size, model, batches, micro_batches, schedule, lr)
    finally:
        watch.close()
        facts.update({"stages": watch.stages, "schedules": watch.schedules, "actions": watch.actions})
    facts.update({"steps": watch.steps, "start": watch.start})
    facts["returned"] = type(trained).__name__
    if isinstance(trained, nn.Module):
        names = [watch.name_of(p) for p in trained.parameters()]
        facts["returned_names"] = sorted(n for n in names if n is not None)
        facts["returned_foreign"] = sum(n is None for n in names)
    return {}


def uneven(ctx: RankContext, batch_size: int, micro_batches: int, lr: float, data_seed: int, model_seed: int) -> dict:
    """One batch that micro_batches does not divide: what the student's code raised, if it raised."""
    ctx.init_group()
    model = make_pipe(model_seed)
    inputs, targets = make_data(batch_size, data_seed).tensors
    train_pipeline = ctx.student("train_pipeline")
    try:
        train_pipeline(ctx.rank, ctx.world_size, model, [(inputs, targets)], micro_batches, "gpipe", lr)
    except ValueError as exc:
        ctx.facts["raised"] = {"type": type(exc).__name__, "message": str(exc)[:300]}
    else:
        ctx.facts["raised"] = None
    return {}


def reference(ctx: RankContext, steps: int, batch_size: int, lr: float, data_seed: int, model_seed: int) -> dict:
    """Trusted: one process, the whole model, one whole batch per step, SGD with momentum."""
    recorder = train_reference(
        make_pipe(model_seed), make_data(steps * batch_size, data_seed), step_indices(steps, batch_size), lr
    )
    facts = recorder.facts()
    facts["momentum"] = MOMENTUM
    return facts


def replays(
    ctx: RankContext,
    steps: int,
    batch_size: int,
    micro_batches: int,
    lr: float,
    data_seed: int,
    model_seed: int,
    hypotheses: dict[str, ReplayRequest],
) -> TrainingReplays:
    """Trusted: each hypothesis of hypotheses.toml replayed from the same weights on the same batches;
    schedule "uncleared" is the pipeline's own accumulation with zero_grad missing (uncleared below)."""
    dataset = make_data(steps * batch_size, data_seed)
    schedules = {"correct": step_indices(steps, batch_size)}
    knobbed = {name: h for name, h in hypotheses.items() if h["schedule"] in schedules}
    replayed = replay_all(lambda: make_pipe(model_seed), dataset, schedules, lr, knobbed)
    for name in set(hypotheses) - set(knobbed):
        replayed["replays"][name] = uncleared(
            make_pipe(model_seed), dataset, step_indices(steps, batch_size), micro_batches, lr
        )
    return replayed


def uncleared(
    model: nn.Module, dataset: TensorDataset, steps: list[list[int]], micro_batches: int, lr: float
) -> list[ReplayedStep]:
    """What a schedule with scale_grads does when .grad is never cleared: each micro-batch's mean-loss
    gradient added to .grad, then the whole .grad (last step's included) divided by m, then SGD."""
    recorder = StepRecorder(model)
    optimizer = torch.optim.SGD(model.parameters(), lr=lr, momentum=MOMENTUM)
    inputs, targets = dataset.tensors
    for indices in steps:
        for chunk in torch.tensor(indices).chunk(micro_batches):
            F.mse_loss(model(inputs[chunk]), targets[chunk]).backward()
        for p in model.parameters():
            assert p.grad is not None  # every layer is on the path to the loss
            p.grad /= micro_batches
        optimizer.step()
    recorder.close()
    return [{"grads": step["grads"], "params": step["params"]} for step in recorder.steps]
