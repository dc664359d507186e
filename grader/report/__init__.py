"""Reporters: how results are shown (terminal, JSON). They print; they never judge."""
