"""Exercise 6: FSDP wrapping, training and a full checkpoint."""
