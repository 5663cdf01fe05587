"""Retraining the shapes world (:mod:`genloop.workers.shapes`): generator, hard-negative mining,
shapes-clip, evaluation and run-time estimates. ``python -m genloop.training.shapes.train``."""
