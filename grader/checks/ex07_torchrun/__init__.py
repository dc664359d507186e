"""Exercise 7: a training script launched by torchrun."""
