"""Offline training of genloop's own models, kept out of the runtime import path.

The runtime (``genloop.workers``) loads shipped weights and never imports this package;
retraining them (``python -m genloop.training.shapes.train``) does.
"""
