"""The operator's settings of the hosted VLM judge, by environment variable name.

Kept apart from :mod:`.vlm_client`, which imports httpx: every back end's spec schema (and so
its first submit) lists what ``vlm-judge`` still needs, and that should import no HTTP client.
"""

from __future__ import annotations

import os

ENV_BASE_URL = "GENLOOP_VLM_BASE_URL"
ENV_MODEL = "GENLOOP_VLM_MODEL"
ENV_API_KEY = "GENLOOP_VLM_API_KEY"
ENV_MAX_RPS = "GENLOOP_VLM_MAX_RPS"


def vlm_unset() -> list[str]:
    """The vlm-judge settings missing from this process's environment."""
    return [v for v in (ENV_BASE_URL, ENV_MODEL) if not os.environ.get(v)]
