"""The course grader: runs students' distributed-training code on real rank processes and judges it."""
