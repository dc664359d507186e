"""Exercise 14: a tensor-parallel MLP block, column-then-row, by hand and with parallelize_module."""
