"""Dramatiq middleware for genloop workers, one concern per module."""

from .attempts import AttemptOutcomes
from .sweeper import OutboxSweeper

__all__ = ["AttemptOutcomes", "OutboxSweeper"]
