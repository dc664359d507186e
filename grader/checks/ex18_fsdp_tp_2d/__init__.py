"""Exercise 18: 2D parallelism, FSDP2 over the "dp" dimension of a (dp, tp) DeviceMesh and tensor parallelism
over "tp"."""
