"""What exercises' workers share on the ranks, beside student code: the tiny models and data sets
(`training`), the simulated GPU node (`simulated_gpu`), the recorder of file writes
(`write_recorder`). It enters every sandbox whole (grader/sandbox/rank_view.py), so it holds no
judge code and no secret.
"""
