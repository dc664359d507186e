"""Exercise 9: checkpoint and resume a DDP run."""
