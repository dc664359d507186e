"""Exercise 5: gradient accumulation with DDP's no_sync."""
