"""Imported by Dramatiq's CLI in each process of ``genloop worker``: builds the worker."""

from .pool import build

wiring = build()
