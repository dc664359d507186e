"""Exercise 2: sharding a dataset across ranks."""
