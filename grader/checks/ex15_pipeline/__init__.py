"""Exercise 15: pipeline parallelism, GPipe and 1F1B schedules, and their bubble."""
