"""Question banks and quiz sheets."""
