"""Imported by Dramatiq's CLI in each process of ``genloop worker``: builds the worker."""

from .worker_process import build

wiring = build()
