"""Exercise 10: scaling arithmetic (learning rate, batch, Amdahl, all-reduce cost, ZeRO memory)."""
