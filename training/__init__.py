"""Offline training of genloop's own models, kept out of the runtime import path.

The runtime (``genloop.workers``) loads shipped weights and never imports this package;
retraining them (``python -m genloop.training.shapes.train``) does.
"""


if __name__ != "genloop.training":  # imported as a bare `training` from the checkout's root
    from genloop.sdk.unshadow import hand_over

    hand_over(__name__, __path__[0])
