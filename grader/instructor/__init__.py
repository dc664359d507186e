"""The instructor's side: batch grading into Gradescope results and a gradebook, student releases,
notebooks built from the exercises and notebook submissions turned back into exercise files."""
