"""Reading a /metrics page the way Prometheus does, comparing two scrapes, and ports for
worker processes' metrics."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import httpx
from prometheus_client.parser import text_string_to_metric_families

#: Every label genloop's metrics may carry: none names a run, node, instance or tenant.
ALLOWED_LABELS = {"status", "op", "queue", "error_type", "kind", "reason", "model", "le"}

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str, token: str | None = None) -> Samples:
    """``(sample name, sorted labels) -> value`` of genloop's samples at ``url`` (with the
    operator's ``token``, for a gateway's own port)."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = httpx.get(url, timeout=10, headers=headers)
    response.raise_for_status()
    text = response.text
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


def free_ports(n: int) -> int:
    """The first of ``n`` consecutive free loopback ports."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n > 65535:
            continue
        try:
            socks = []
            for port in range(first, first + n):
                sock = socket.socket()
                socks.append(sock)
                sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
        finally:
            for sock in socks:
                sock.close()


def wait_scrape(url: str, timeout: float = 60) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return scrape(url)
        except httpx.TransportError:
            assert time.monotonic() < deadline, f"no metrics at {url}"
            time.sleep(0.2)


def scrape_settled(urls: list[str], settled: Callable[[list[Samples]], bool],
                   token: str | None = None, timeout: float = 10) -> list[Samples]:
    """Scrapes of ``urls`` once ``settled`` holds of them, or the last ones at ``timeout``.

    A process counts an event after its commit, and ``wait()`` returns on the run's last commit:
    the process that wrote it may not have counted it yet when the caller scrapes."""
    deadline = time.monotonic() + timeout
    while True:
        scrapes = [scrape(url, token) for url in urls]
        if settled(scrapes) or time.monotonic() > deadline:
            return scrapes
        time.sleep(0.05)
