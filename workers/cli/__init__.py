"""The ``genloop`` command line (:func:`genloop.workers.cli.main.main`): client commands, the
worker and demo commands, artifact collection, and the demo's contact sheet."""
