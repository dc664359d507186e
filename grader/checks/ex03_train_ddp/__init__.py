"""Exercise 3: a DDP training loop and its checkpoint."""
