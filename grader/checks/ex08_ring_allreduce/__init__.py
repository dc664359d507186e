"""Exercise 8: a ring all-reduce built from point-to-point messages."""
