"""Exercise 17: a sharded DCP checkpoint of an FSDP2 model, saved at W ranks and resumed at W/2."""
