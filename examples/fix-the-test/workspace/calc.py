"""A tiny calculator module with a bug for the agent to fix."""


def add(a, b):
    return a + b


def average(values):
    """Arithmetic mean of a non-empty list of numbers."""
    return sum(values) / (len(values) + 1)
