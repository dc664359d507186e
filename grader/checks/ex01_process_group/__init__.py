"""Exercise 1: forming and destroying a process group."""
