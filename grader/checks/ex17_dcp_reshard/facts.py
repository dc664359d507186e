"""What exercise 17's workers report: imported by workers.py (rank side) and checks.py (judge side).

The ranks report what the grader's watch saw of the student's save and resume, and what the resumed model
and optimizer hold; the model's layout (names, shapes), the saved weights and AdamW state and the
uninterrupted run come from the trusted `reference` worker, never from a rank.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

import numpy as np

from grader.engine.facts import RankFacts, TrainingReplays, Worker


class OptimizerBuilt(TypedDict):
    """An optimizer the student's code built: over how many parameters, how many of them DTensors."""

    op: Literal["optimizer"]
    dtensors: int
    params: int


class CheckpointCall(TypedDict):
    """A call of dcp.save, dcp.async_save or dcp.load: the path, whether it returned, and (load) whether
    the model resume was given was sharded by then."""

    op: Literal["dcp.save", "dcp.async_save", "dcp.load"]
    path: str
    returned: bool
    model_sharded: NotRequired[bool | None]


class Planned(TypedDict):
    """What a rank handed DCP to write or to fill: DTensor shards (local elements), whole tensors."""

    op: Literal["write", "fill"]
    dtensors: int
    local: int
    whole: int
    whole_elements: int


class FileSaved(TypedDict):
    """torch.save to a file, and what the object saved held."""

    op: Literal["torch.save"]
    path: str
    dtensors: int
    local: int
    whole: int
    whole_elements: int


class FileLoaded(TypedDict):
    """torch.load from a file, and what the object loaded held."""

    op: Literal["torch.load"]
    path: str
    dtensors: int
    local: int
    whole: int
    whole_elements: int


Event = OptimizerBuilt | CheckpointCall | Planned | FileSaved | FileLoaded


class Saved(RankFacts):
    """The student's save_checkpoint on W ranks (`save`)."""

    events: list[Event]
    async_unwaited: int  # async saves whose future the student's code never touched
    save_returned: bool


class AdamState(TypedDict):
    """This rank's piece of one parameter's AdamW state after resume, and its group's lr."""

    exp_avg: NotRequired[np.ndarray]
    exp_avg_sq: NotRequired[np.ndarray]
    step: NotRequired[float]
    lr: float


class ShardStep(TypedDict):
    """One step of the grader's training after resume: this rank's flat piece of each gradient and weight."""

    grads: dict[str, np.ndarray]
    params: dict[str, np.ndarray]  # written once the step is taken: there on every step of a run that ended


class Resumed(RankFacts):
    """The student's resume at W/2 ranks, then the grader's training (`resume`). `returned`: what resume
    returned when it is not (model, optimizer); otherwise the rest."""

    events: list[Event]
    sharded_at_end: bool | None
    returned: NotRequired[str]
    sharded: NotRequired[list[str]]
    loaded: NotRequired[dict[str, np.ndarray]]  # this rank's flat piece of each weight, after resume
    stale_optimizer: NotRequired[list[str]]
    state: NotRequired[dict[str, AdamState]]
    steps: NotRequired[list[ShardStep]]


class Trained(RankFacts):
    """A resume report whose resume returned (model, optimizer): every fact after it is then written."""

    events: list[Event]
    sharded_at_end: bool | None
    sharded: list[str]
    loaded: dict[str, np.ndarray]
    stale_optimizer: list[str]
    state: dict[str, AdamState]
    steps: list[ShardStep]


class Inspected(RankFacts):
    """Trusted (`inspect_checkpoint`): what the checkpoint path holds, and the keys DCP's metadata lists."""

    exists: bool
    folder: NotRequired[bool]
    size: NotRequired[int]  # the path is one file
    files: NotRequired[dict[str, int]]  # a folder: each file's size
    keys: NotRequired[list[str]]
    problem: NotRequired[str]  # why the metadata was not read (refused, damaged, not DCP's): a sentence


class Step(TypedDict):
    """One step of the trusted uninterrupted run (grader.rank.training.StepRecorder)."""

    grads: dict[str, np.ndarray]
    no_grad: list[str]
    params: dict[str, np.ndarray]
    state: dict[str, dict[str, float]]  # each buffer's norm, per parameter


class SavedState(TypedDict):
    exp_avg: np.ndarray
    exp_avg_sq: np.ndarray
    step: float


class Reference(RankFacts):
    """Trusted (`reference`): the uninterrupted AdamW run on one process, and the weights and AdamW state
    at the save (which name and shape every parameter has: the layout the ranks' pieces are joined into)."""

    initial: dict[str, np.ndarray]
    start: dict[str, np.ndarray]
    steps: list[Step]
    saved: dict[str, np.ndarray]
    saved_state: dict[str, SavedState]


SAVE = Worker("save", Saved)
RESUME = Worker("resume", Resumed)
INSPECT_CHECKPOINT = Worker("inspect_checkpoint", Inspected)
REFERENCE = Worker("reference", Reference)
REPLAYS = Worker("replays", TrainingReplays)  # the judge's hypotheses on the shared loop
