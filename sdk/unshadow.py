"""Keep the checkout's top-level card folders from shadowing installed packages.

genloop's code sits in top-level folders of the checkout (``sdk/``, ``workers/``, ``kernels/``
...), published as ``genloop.sdk``, ``genloop.workers``, ``genloop.kernels``. Python started in the
checkout's root (``python -c``, ``python -m pytest``, a subprocess with the root as its working
directory) puts the root first on ``sys.path``, so a bare ``import kernels`` would find the card
folder before Hugging Face's ``kernels`` distribution, which transformers imports.

Each card's ``__init__`` therefore ends by checking the name it was imported under. Under its
``genloop.*`` name nothing happens. Under a bare name, :func:`hand_over` loads the module of that
name from every other ``sys.path`` entry and puts it in ``sys.modules``, where the import system
reads the result of the import from; with no such module the import fails as it would outside
the checkout. No library does this: the usual cure, a ``src/`` layout, would move the cards.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from importlib.machinery import PathFinder

__all__ = ["hand_over"]


def hand_over(name: str, card_folder: str) -> None:
    """Make ``import <name>`` yield the installed module, not the card folder ``card_folder``.

    Called last in the card's ``__init__`` while it is being imported as ``name``. What the
    ``__init__`` imported relatively before it (``name.client`` ...) is dropped from
    ``sys.modules`` first: those are the card's files under the installed package's name.
    """
    folder = os.path.realpath(card_folder)
    for loaded in [key for key, module in sys.modules.items() if key.startswith(f"{name}.")
                   and os.path.realpath(getattr(module, "__file__", None) or "")
                   .startswith(folder + os.sep)]:
        del sys.modules[loaded]
    checkout = os.path.dirname(folder)
    elsewhere = [entry for entry in sys.path
                 if os.path.realpath(entry or os.getcwd()) != checkout]
    spec = PathFinder.find_spec(name, elsewhere)
    if spec is None:
        raise ModuleNotFoundError(
            f"No module named {name!r}: the folder {name}/ of the genloop checkout is the package "
            f"genloop.{name}; import it by that name", name=name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    if spec.loader is not None:  # None: a namespace package, nothing to run
        spec.loader.exec_module(module)
