"""FSDP1's full state dict with CPU offload, on a CPU compute device.

`FullStateDictConfig(offload_to_cpu=True)` (and `get_model_state_dict(..., cpu_offload=True)`, which
asks for it) is the idiom the PyTorch tutorials teach for FSDP1 checkpoints. On a GPU it copies the
gathered parameters to the CPU and frees their GPU storage. In torch 2.13, when the parameters are
already on the CPU, the "copy" is the same tensor and the free empties it: the state dict then
fails ("setStorage ... out of bounds for storage of size 0"), or, with `use_orig_params=True`,
crashes the rank with SIGSEGV. Correct code must not fail because the grader has no GPU, so on the
ranks a flat parameter that is already on the CPU stays where it is, as it would after a real copy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from torch.distributed.fsdp._flat_param import FlatParamHandle

from grader.engine import tamper


def install() -> None:
    """Make FSDP1's offload to CPU a no-op for a flat parameter that already lives on the CPU."""
    offload = FlatParamHandle.to_cpu

    @contextlib.contextmanager
    def to_cpu(self: FlatParamHandle) -> Iterator[None]:
        if self.flat_param.device.type == "cpu":
            yield
            return
        with offload(self):
            yield

    tamper.install(FlatParamHandle, "to_cpu", to_cpu)
