"""Exercise 16: FSDP2 in mixed precision (bf16 compute, fp32 reduce, fp32 master weights), with activation
checkpointing."""
