"""Reading a /metrics page the way Prometheus does, and comparing two scrapes."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

#: Every label genloop's metrics may carry: none names a run, node, instance or tenant.
ALLOWED_LABELS = {"status", "op", "queue", "error_type", "kind", "reason", "model", "le"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """``(sample name, sorted labels) -> value`` of genloop's samples at ``url``."""
    text = httpx.get(url, timeout=10).text
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text) if family.name.startswith("genloop_")
        for s in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def moved(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return value(after, name, **labels) - value(before, name, **labels)


def label_problems(samples: Samples, forbidden: set[str]) -> list[str]:
    """Labels outside the allowed set, and label values that are ids (``forbidden``)."""
    problems = []
    for name, labels in samples:
        for key, val in labels:
            if key not in ALLOWED_LABELS:
                problems.append(f"{name}: label {key}")
            if any(f in val for f in forbidden):
                problems.append(f"{name}: {key}={val} names an id")
    return problems
