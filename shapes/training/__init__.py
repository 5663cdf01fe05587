"""Retraining the shapes world (:mod:`genloop.shapes`): generator, hard-negative mining,
shapes-clip, evaluation and run-time estimates. ``python -m genloop.shapes.training.train``.

Kept out of the runtime's import path: workers load the shipped weights and never import this
package (nor does ``genloop.shapes``); only retraining does.
"""
