"""The torch facts of the questions that only a GPU can show, asserted on the installed torch where
one is present and skipped, with the reason that torch_facts.NEEDS_GPU gives, where none is.

The 2-rank runs put both ranks on the GPUs there are (rank % device count), so one GPU is enough:
SyncBatchNorm over gloo, which reduces CUDA tensors through host memory, and nccl without
set_device, whose failure on a shared device is the fact.
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from .torch_facts import NEEDS_GPU

NO_GPU = not torch.cuda.is_available()
TIMEOUT = datetime.timedelta(seconds=30)


def _bn_ranks(rank: int, store: str, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=TIMEOUT)
    device = torch.device("cuda", rank % torch.cuda.device_count())
    torch.manual_seed(0)
    images = torch.randn(8, 3, 5, 5)
    mine = images[4 * rank : 4 * rank + 4].to(device)
    sync = torch.nn.SyncBatchNorm(3).to(device)
    plain = torch.nn.BatchNorm2d(3).to(device)
    outputs = {"sync": sync(mine).cpu(), "plain": plain(mine).cpu()}
    whole = torch.nn.functional.batch_norm(images, None, None, training=True)[4 * rank : 4 * rank + 4]
    local = torch.nn.functional.batch_norm(mine.cpu(), None, None, training=True)
    facts = {
        "sync_is_global": torch.allclose(outputs["sync"], whole, atol=1e-4),
        "sync_is_local": torch.allclose(outputs["sync"], local, atol=1e-4),
        "plain_is_local": torch.allclose(outputs["plain"], local, atol=1e-4),
        "sync_running_mean": sync.running_mean.cpu().tolist(),  # type: ignore[union-attr]
        "global_running_mean": (0.1 * images.mean(dim=(0, 2, 3))).tolist(),
    }
    dist.destroy_process_group()
    Path(out, f"rank{rank}.json").write_text(json.dumps(facts))


@pytest.mark.skipif(NO_GPU, reason=NEEDS_GPU["syncbn-equal-global"])
def test_sync_batchnorm_normalizes_with_the_global_batch(tmp_path: Path) -> None:
    """syncbn-equal-global and syncbn-why: on 2 ranks of 4 images each, SyncBatchNorm's output is that of
    BatchNorm over all 8 images (and its running mean moves by the global mean), where plain BatchNorm
    normalizes each rank's 4 with their own statistics."""
    mp.spawn(_bn_ranks, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    for rank in range(2):
        facts = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert facts["sync_is_global"] and not facts["sync_is_local"], "syncbn-equal-global, syncbn-why"
        assert facts["plain_is_local"], "syncbn-why: plain BN uses the rank's own statistics"
        assert torch.allclose(torch.tensor(facts["sync_running_mean"]), torch.tensor(facts["global_running_mean"])), (
            "syncbn-equal-global: the running statistics are the global batch's too"
        )


def _nccl_ranks(rank: int, store: str, out: str) -> None:
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=2, timeout=TIMEOUT)
    facts: dict[str, Any] = {
        "current_device": torch.cuda.current_device(),
        "new_tensor": str(torch.ones(1, device="cuda").device),
    }
    Path(out, f"rank{rank}-devices.json").write_text(json.dumps(facts))
    try:
        total = torch.ones(1, device="cuda")
        dist.all_reduce(total)
        torch.cuda.synchronize()
        facts["all_reduce"] = total.item()
    except Exception as error:  # noqa: BLE001 - NCCL's error is the fact, whatever its type
        facts["all_reduce"] = str(error)[:300]
    Path(out, f"rank{rank}-devices.json").write_text(json.dumps(facts))


@pytest.mark.skipif(NO_GPU, reason=NEEDS_GPU["pg-nccl-set-device"])
def test_nccl_ranks_without_set_device_all_use_gpu_0(tmp_path: Path) -> None:
    """pg-nccl-set-device: without torch.cuda.set_device every rank's current device is cuda:0, where its
    new tensors go, and an NCCL all-reduce between ranks on one device does not go through (NCCL
    refuses a duplicate GPU, or the job hangs or is ended)."""
    context = mp.spawn(_nccl_ranks, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=False)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline:
            try:
                if context.join(timeout=5):
                    break
            except (mp.ProcessRaisedException, mp.ProcessExitedException):
                break  # a rank ended by NCCL's error handling: the collective did not go through
    finally:
        for process in context.processes:
            if process.is_alive():
                process.terminate()
                process.join(10)
    seen = [json.loads((tmp_path / f"rank{rank}-devices.json").read_text()) for rank in range(2)]
    for facts in seen:
        assert facts["current_device"] == 0 and facts["new_tensor"] == "cuda:0", f"pg-nccl-set-device: {facts}"
    assert not all(facts.get("all_reduce") == 2.0 for facts in seen), f"pg-nccl-set-device: it worked: {seen}"


@pytest.mark.skipif(NO_GPU, reason=NEEDS_GPU["torchrun-local-rank-device"])
def test_set_device_beyond_the_nodes_gpus_fails() -> None:
    """torchrun-local-rank-device: a device index past the node's GPUs (what RANK gives on a second node,
    see test_rank_and_local_rank_differ_on_the_second_node) fails loudly: an invalid device error."""
    with pytest.raises(RuntimeError, match="(?i)invalid device"):
        torch.cuda.set_device(torch.cuda.device_count())
        torch.empty(1, device="cuda")
