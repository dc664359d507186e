"""Exercise 13: a ZeRO-1 sharded optimizer (AdamW state sharded across the ranks)."""
