"""The phase a rank was in when it raised, in words: "wrapping the model with fully_shard()", "the backward pass,
after 2 optimizer steps".

The rank reports it with its error (grader/engine/rank_runtime.py, describe_exception): the library calls the
student's code was in (outermost first, "torch/_tensor.py:backward") and the optimizer steps its process had
completed (torch's global step hook). That report comes from a process that ran untrusted code: it is only ever
wording here, looked up in this table or said as a count, never a reason for a verdict.
"""

from __future__ import annotations

import re
from typing import Any

# (a library call "path:function", as the rank reports it; what the rank was doing), most specific first. The
# first call that one matches says it: a decorator's wrapper ("contract.py:wrapper") matches none and is skipped.
_ACTIVITIES = tuple(
    (re.compile(pattern), words)
    for pattern, words in (
        (r"torch/nn/modules/module\.py:_(?:wrapped_)?call_impl$", "the forward pass"),
        (r"torch/_tensor\.py:backward$|torch/autograd/__init__\.py:backward$", "the backward pass"),
        (r"torch/optim/[\w/]+\.py:__init__$", "building the optimizer"),
        (r"torch/optim/[\w/]+\.py:zero_grad$", "optimizer.zero_grad()"),
        (r"torch/optim/optimizer\.py:(?:wrapper|_use_grad)$|torch/optim/[\w/]+\.py:step$", "the optimizer step"),
        (r"torch/distributed/fsdp/_fully_shard/_fully_shard\.py:fully_shard$", "wrapping the model with fully_shard()"),
        (r"torch/distributed/tensor/parallel/api\.py:parallelize_module$", "parallelizing with parallelize_module()"),
        (r"torch/nn/parallel/distributed\.py:__init__$", "wrapping the model with DistributedDataParallel()"),
        (r"torch/distributed/device_mesh\.py:init_device_mesh$", "building the device mesh (init_device_mesh())"),
        (r"torch/distributed/checkpoint/state_dict_saver\.py:(?:async_)?save$", "saving with dcp.save()"),
        (r"torch/distributed/checkpoint/state_dict_loader\.py:load$", "loading with dcp.load()"),
        (
            r"torch/distributed/checkpoint/state_dict\.py:get_\w*state_dict$",
            "reading the state dicts (get_state_dict())",
        ),
        (
            r"torch/distributed/checkpoint/state_dict\.py:set_\w*state_dict$",
            "loading the state dicts (set_state_dict())",
        ),
        (r"torch/distributed/pipelining/schedules\.py:step$", "the pipeline schedule's step()"),
        (r"torch/distributed/pipelining/stage\.py:__init__$", "building the pipeline stage (PipelineStage())"),
        (r"torch/serialization\.py:save$", "saving with torch.save()"),
        (r"torch/serialization\.py:load$", "loading with torch.load()"),
    )
)
_COLLECTIVE = re.compile(r"torch/distributed/distributed_c10d\.py:(?P<function>[a-z]\w*)$")
_TRAINING = ("the forward pass", "the backward pass", "the optimizer step", "optimizer.zero_grad()")


def _activity(calls: list[Any]) -> str:
    """What the library calls say the rank was doing, or "" where the table knows none of them."""
    for call in calls:
        text = str(call)
        found = next((words for pattern, words in _ACTIVITIES if pattern.search(text)), "")
        if found:
            return found
        collective = _COLLECTIVE.search(text)
        if collective:
            return f"the collective dist.{collective['function']}()"
    return ""


def _steps(steps: int, activity: str) -> str:
    """How far training was: the optimizer steps done ("" where none were and the rank was not training)."""
    if steps == 0:
        return "before any optimizer step" if activity in _TRAINING else ""
    return f"after {steps} optimizer step{'s' if steps != 1 else ''}"


def phase(error: dict[str, Any] | None) -> str:
    """The phase of a reported error in a few words; "" where the rank reported none (an old or a forged report)."""
    reported = (error or {}).get("phase")
    if not isinstance(reported, dict):
        return ""
    calls = reported.get("calls")
    activity = _activity(calls if isinstance(calls, list) else [])
    if reported.get("by") == "grader":  # its worker ran the student's model or objects: the steps it counted are the
        return f"{activity} (the grader's call)" if activity else ""  # student code's, not the grader's loop's
    steps = reported.get("steps")
    if type(steps) is not int or steps < 0:
        steps = None
    if activity == "the optimizer step" and steps is not None:
        return f"optimizer step {steps + 1}"  # the one that raised: its post-hook, which counts it, never ran
    frames = (error or {}).get("student_frames") or []
    graded = frames[0].get("function") if frames and isinstance(frames[0], dict) else None
    if not activity and isinstance(graded, str) and graded.isidentifier():
        activity = f"in {graded}()"  # the student's code alone: the function the grader called is the phase
    return ", ".join(part for part in (activity, "" if steps is None else _steps(steps, activity)) if part)
