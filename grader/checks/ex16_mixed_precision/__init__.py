"""Exercise 16: FSDP2 in mixed precision (bf16 compute, fp32 reduce and master weights), with activation checkpointing."""
