"""Exercise 12: data parallelism by hand, bucketed all-reduces overlapped with backward."""
