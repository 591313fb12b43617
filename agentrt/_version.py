"""The version of the ``agentrt`` distribution: written here only (pyproject reads it)."""

__version__ = "0.1.0"
