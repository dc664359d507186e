"""Exercise 11: SyncBatchNorm and DDP with parameters unused in some steps."""
