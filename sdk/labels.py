"""Labels: a small map of strings a caller puts on a run to find it again (an agent session, a
campaign, a user), as on Kubernetes objects. They change nothing about how the run runs or what
it reuses; they are kept with the run and filter listings (``client.runs(labels=...)``,
``GET /v1/runs?label=k=v``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Annotated

from pydantic import AfterValidator, Field

MAX_LABELS = 16
MAX_LABEL_VALUE = 200
#: A key: a letter or digit, then letters, digits and ``_ . - : /``, 63 characters at most.
LABEL_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:/-]{0,62}")


def label_problems(labels: dict[str, str]) -> list[str]:
    """What is wrong with ``labels``, one line a problem (empty when they may be stored)."""
    problems = []
    if len(labels) > MAX_LABELS:
        problems.append(f"{len(labels)} labels; at most {MAX_LABELS}")
    for key, value in labels.items():
        if not LABEL_KEY.fullmatch(key):
            problems.append(f"label key {key[:70]!r}: a letter or digit, then letters, digits and "
                            "'_.:/-', 63 characters at most")
        if len(value) > MAX_LABEL_VALUE:
            problems.append(f"label {key[:70]!r}: {len(value)} characters; at most "
                            f"{MAX_LABEL_VALUE}")
        elif not value.isprintable():
            problems.append(f"label {key[:70]!r}: control characters are not allowed")
    return problems


def _checked(labels: dict[str, str]) -> dict[str, str]:
    if problems := label_problems(labels):
        raise ValueError("; ".join(problems))
    return labels


Labels = Annotated[
    dict[str, str],
    AfterValidator(_checked),
    Field(description=f"Your own tags to find the run by later (at most {MAX_LABELS}; keys "
          f"like 'session' or 'app.io/user', values up to {MAX_LABEL_VALUE} characters). They "
          "change nothing about how it runs."),
]


def parse_label(text: str) -> tuple[str, str]:
    """``'key=value'`` (a command line's or a query's label filter) as ``(key, value)``."""
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise ValueError(f"a label filter is key=value, got {text[:70]!r}")
    return key, value


def matches(labels: Mapping[str, str], wanted: Mapping[str, str]) -> bool:
    """Whether ``labels`` hold every ``wanted`` key with its value."""
    return all(labels.get(k) == v for k, v in wanted.items())
