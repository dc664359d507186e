"""Exercise 4: a process launcher with results and error propagation."""
