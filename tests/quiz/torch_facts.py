"""Which quiz questions rest on a fact about torch, and where each fact is proven on the installed torch.

Every question of the course's banks is in exactly one of three tables, which test_torch_facts_banks.py
checks against the banks and the tests:

- PINNED: a test in test_torch_facts*.py (named by the id in its source) asserts the fact on the CPU;
- NEEDS_GPU: the fact needs a GPU; a test in test_torch_facts_gpu.py asserts it where one is present
  and skips with this reason where none is (the parts a CPU can show are pinned beside it);
- NO_TORCH_FACT: the answer rests on arithmetic or on a concept, not on how torch behaves; the reason
  says which.

A new question therefore fails the bank test until someone decides which table it belongs in.
"""

from __future__ import annotations

PINNED: dict[str, str] = {
    # 01 to 13, pinned in test_torch_facts_banks.py
    # 01
    "par-dp-vs-ddp": "DDP without a process group raises",
    "pg-backend": "gloo all-reduces CPU tensors; this build has no MPI backend",
    "pg-env-rendezvous": "env:// reads MASTER_ADDR and MASTER_PORT, and fails without MASTER_PORT",
    "pg-cleanup": "destroy_process_group leaves no default group",
    "pg-rank-world": "ranks 0..W-1, the same world size everywhere",
    # 02
    "ddp-broadcast-construction": "the constructor copies rank 0's parameters and buffers",
    "ddp-gradient-average": "param.grad after backward is the mean of the ranks' gradients",
    "ddp-loss-sum": "DDP divides the summed gradients by W, nothing more",
    "ddp-no-weight-broadcast": "buffers re-broadcast from rank 0 at forward by default",
    "ddp-bucketing": "bucket_cap_mb is 25 MB by default",
    "ddp-bucket-order": "buckets follow reversed model.parameters() order",
    "ddp-overlap": "a bucket's reduction starts before the first layer's gradient is computed",
    "ddp-forward-unwrapped": "calling the inner module: no error, gradients stay local",
    "sampler-purpose": "disjoint shards of ceil(N/W) indices",
    "sampler-set-epoch": "without set_epoch every epoch repeats one permutation, seeded seed + epoch",
    "sampler-rank-seed": "seed is an argument; different seeds give overlapping shards",
    "sampler-shuffle-conflict": "DataLoader(sampler=..., shuffle=True) raises ValueError",
    "sampler-steps-per-epoch": "drop_last defaults to False; each rank gets ceil(N/W) indices",
    "sampler-padding": "W*ceil(N/W) - N indices repeated",
    # 03
    "nosync-what": "backward in no_sync skips the all-reduce; the next synced backward reduces the sum",
    "nosync-last-step": "backward only under no_sync: gradients never averaged",
    "nosync-traffic": "without no_sync one all-reduce per backward",
    "nosync-loss-scale": "gradients add up over the backward calls; DDP averages over ranks",
    "nosync-zero-grad": "zero_grad throws the accumulated gradients away",
    "accum-batchnorm": "BatchNorm updates its running stats at every forward",
    # 04
    "fsdp-shard-elements": "fully_shard splits dim 0, rank 0 holds ceil(R/W) rows",
    "fsdp-unit": "a unit is gathered in full for its forward and resharded after it",
    "fsdp-wrap-blocks": "fully_shard on the root only runs",
    "fsdp-optimizer-order": "fully_shard replaces the parameters, silently",
    "fsdp-full-state-dict": "StateDictOptions(full_state_dict=True, cpu_offload=True) gives full CPU tensors",
    # 05
    "launch-spawn-args": "spawn passes the index first and sets no RANK",
    "launch-join": "join=False returns at once; join() raises the child's error",
    "launch-child-error": "ProcessContext.join raises ProcessRaisedException and ends the others",
    "launch-failure-restart": "torchrun restarts the whole group and sets TORCHELASTIC_RESTART_COUNT",
    "torchrun-env": "RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT set; CUDA_VISIBLE_DEVICES not",
    "torchrun-init": "init_process_group(backend) reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT",
    "torchrun-standalone": "--standalone starts the workers with a local rendezvous on a free port",
    # 06
    "syncbn-convert": "convert_sync_batchnorm keeps the parameter and buffer objects",
    "unused-params-hang": "find_unused_parameters defaults to False; an unused branch errors next iteration",
    "unused-params-flags": "with find_unused_parameters=True unused parameters get no gradient; static_graph",
    "hang-mismatched-collective": "a collective only rank 0 calls waits until the timeout",
    "hang-debug-detail": "DETAIL turns mismatched collectives into an error naming the mismatch",
    "hang-uneven-batches": "DDP has a join() context manager",
    "hang-timeout": "init_process_group accepts timeout",
    "ckpt-module-prefix": "DDP's state dict keys start with module.",
    # 07-13
    "overlap-ddp-bucket-cap": "25 MB buckets, the first bucket 1 MB",
    "overlap-why-post-accumulate": "a tensor hook sees .grad None, a post-accumulate hook the gradient",
    "overlap-frozen-grad": "a hook on a frozen parameter raises",
    "overlap-tied-weight-once": "a tied weight is listed once and its hook runs once with the sum",
    "zero1ex-zero-grad": "optimizer.zero_grad clears its own parameters' .grad only, never its state",
    "zero1ex-adam-scale": "AdamW steps nearly the same under a gradient scaled by W; moments W and W^2",
    "pp-scale-grads": "scale_grads defaults to True",
    "pp-uneven-micro-batches": "6 samples in 4 micro-batches split 2, 2, 1, 1",
    "mp-bf16-format": "bf16 8 exponent bits, 7 mantissa bits; fp16 max 65504",
    "mp-why-loss-scaling": "fp16 has 10 mantissa bits, bf16 fp32's range",
    "mp-fsdp-bytes-per-rank": "the gathered copy is bf16 under param_dtype=bf16",
    "mp-fp32-shard-bytes": "the stored shard stays fp32",
    "mp-what-is-saved": "saved_tensors_hooks sees every tensor saved for backward",
    "dcp-file-count": "W ranks write W .distcp files and .metadata",
    "dcp-load-other-world-size": "a 2-rank DCP checkpoint loads into one process",
    "dcp-state-dict-api": "get_state_dict keeps shards by default, keys by name, fills a fresh optimizer",
    "fsdptp-no-mesh": "fully_shard without mesh shards over all W ranks",
    "fsdptp-order": "parallelize_module after fully_shard raises 'Cannot distribute a DTensor'",
    "fsdptp-dp-coordinate": "init_device_mesh puts rank r at row r // T",
    # 01 to 13, pinned in test_torch_facts.py
    "overlap-wait-before-step": "gloo's barrier waits for the group's in-flight all-reduces",
    "pp-activations-1f1b": "Schedule1F1B runs p warm-up forwards on stage 0",
    "tpex-placements": "RowwiseParallel shards the weight on dim 1 and replicates the bias",
    "fsdptp-down-placements": "FSDP over a Rowwise weight gives (Shard(0), Shard(1))",
    "fsdptp-local-elements": "each GPU holds R·C / (dp·tp) elements; a Colwise weight prints _StridedShard",
    "mp-bf16-next-number": "bf16's gap is x/128 above a power of two x and x/256 below",
    "mp-master-weights": "a bf16 weight of 1.0 ignores an update of -0.001",
    "pp-balanced-split": "both split formulas give contiguous stages that differ by at most one layer",
    "pp-activations-gpipe": "ScheduleGPipe runs every forward on stage 0 before its first backward",
    "pp-1f1b-versus-gpipe": "1F1B holds at most p micro-batches on stage 0, GPipe m",
    # 01 to 13, pinned in test_torch_facts_runs.py
    "pp-loss-fn-every-rank": "loss_fn on the last rank only: no backward; each rank blocks on a send until the timeout",
    "pp-loss-divided-twice": "with scale_grads=True the stages' gradients are already the whole batch's mean",
    "pp-stage-order": "stages run in the order of their index; PipelineStage reorders nothing",
    "mp-reduce-dtype": "no reduce_dtype: FSDP2 reduce-scatters in param_dtype; gradients computed in bf16",
    "mp-autocast-and-policy": "the policy gathers bf16; autocast over an fp32 FSDP gathers fp32 and casts per op",
    "mp-checkpoint-granularity": "one region's backward peak grows by a block's activations per block; FSDP nests",
    "mp-checkpoint-step-time": "each block's forward starts once more in backward, and may stop early",
    "fsdptp-lr": "FSDP2 averages the gradients over the ranks it shards over",
    "tpex-parallelize-output": "Colwise then Rowwise return a plain (b, d) tensor: one all-reduce each way",
    "tpex-g-backward": "torch.distributed.nn.functional.all_reduce all-reduces the gradient in backward",
    "overlap-wait-in-hook": "a hook may wait for its all-reduce; the message is through when it returns",
    "ckpt-barrier": "torch.save on rank 0 holds no other rank; a half-written file does not load",
    "dcp-collective-save": "dcp.save on rank 0 alone waits until the timeout and writes no .metadata",
    "dcp-async-stall": "async_save returns while its write is still running: only the staging blocks",
    "dcp-async-costs": "a staged copy, the same files, saves that overlap, an incomplete checkpoint if cut",
    "dcp-shard-then-load": "dcp.load fills the given shards in place, each rank reading its own file",
    "dcp-reshard-files-read": "a rank reads only the files holding its rows",
    "dcp-metadata": ".metadata maps each key's shape, dtype and chunks to files and byte ranges",
    "dcp-step-counter": "AdamW's step counter enters its bias corrections",
    "dcp-fresh-optimizer-symptom": "a fresh AdamW's first update is lr × sign(g)",
    "dcp-rank0-gather-memory": "AdamW keeps two fp32 moments shaped like the parameter",
    "zero1ex-adamw-state-per-rank": "AdamW's state is exp_avg, exp_avg_sq and a scalar step",
}

SYNCBN = (
    "SyncBatchNorm synchronizes only GPU tensors (on CPU tensors it raises, see "
    "test_plain_batchnorm_under_ddp_uses_each_ranks_statistics, which pins plain BN's per-rank statistics)"
)

NEEDS_GPU: dict[str, str] = {
    "pg-nccl-set-device": "the nccl backend and CUDA's current device need a GPU",
    "syncbn-why": SYNCBN,
    "syncbn-equal-global": SYNCBN,
    "torchrun-local-rank-device": (
        "the invalid device error needs a GPU (RANK against LOCAL_RANK on a second node is pinned on CPU by "
        "test_rank_and_local_rank_differ_on_the_second_node)"
    ),
}

NO_TORCH_FACT: dict[str, tuple[str, ...]] = {
    "arithmetic on the quantities and the cost model the stem states": (
        "par-pipeline-bubble", "accum-steps", "scale-effective-batch", "scale-linear-lr", "scale-warmup-lr",
        "amdahl-speedup", "amdahl-efficiency", "amdahl-limit", "zero-comm-volume", "zero-ddp-memory",
        "zero1-memory", "zero2-memory", "zero3-memory", "zero-min-gpus", "fsdp-shard-memory", "ring-volume",
        "ring-volume-params", "ring-time", "ring-alpha-beta", "ring-naive-ratio",
        "overlap-bucket-count-small-params", "overlap-bucket-count-equal-params", "overlap-exposed-time",
        "zero1ex-stage-memory", "zero1ex-memory-practice", "tpex-forward-allreduce-bytes",
        "tpex-allreduces-per-step", "tpex-mlp-weights-per-gpu", "tpex-shard-elements", "tpex-allreduce-time",
        "pp-bubble-fraction", "pp-micro-batches-for-a-bubble", "pp-interleaved-bubble",
        "mp-adam-bytes-per-parameter", "dcp-parallel-write-time", "fsdptp-bytes-per-rank", "fsdptp-dp-size",
        "fsdptp-fsdp-bytes-per-step",
    ),
    "a concept of parallel training (an algorithm, a cost, where to place what), true of any framework": (
        "par-choose-data-parallel", "par-tensor-parallel", "par-pipeline-microbatches", "par-3d",
        "scale-warmup-why", "amdahl-interconnect", "zero-bytes-per-param", "zero-stages", "zero-stage3-cost",
        "fsdp-vs-ddp-when", "ring-phases", "ring-bandwidth-optimal", "pp-why-many-micro-batches",
        "tpex-where-tp-runs", "fsdptp-what-crosses-nodes", "fsdptp-tp-shrinks-fsdp-traffic",
        "fsdptp-same-data-in-tp-group", "dcp-why-per-rank", "ckpt-rank0", "ckpt-resume", "zero1ex-comm-vs-ddp",
    ),
    "the algebra of Megatron-style tensor parallelism, which the exercise writes by hand": (
        "tpex-no-communication-between-layers", "tpex-row-then-column", "tpex-f-operator", "tpex-bias-once",
        "tpex-missing-backward-reduce",
    ),
    "the course's own ZeRO-1 exercise (its partition and its broadcasts), not torch's": (
        "zero1ex-partition-by-size", "zero1ex-partition-same-everywhere", "zero1ex-broadcast-source",
    ),
}  # fmt: skip
