"""Dramatiq middleware for genloop workers, one concern per module."""

from .attempts import AttemptOutcomes

__all__ = ["AttemptOutcomes"]
