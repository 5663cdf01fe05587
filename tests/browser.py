"""A real headless browser for tests: Debian's Chromium driven by Playwright.

Nothing downloads a browser here; Playwright is pointed at the system's Chromium. Where it is
missing the browser tests are skipped, except in CI (``CI`` set), where ``.ci/run`` installs it
and a missing browser must fail the run instead of hiding the tests.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def chromium_path() -> str:
    path = shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed; .ci/run installs Debian's chromium for CI")
        pytest.skip("chromium is not installed (apt-get install chromium)")
    return path


@contextmanager
def browser_page() -> Iterator:
    """A fresh page in headless Chromium; closed afterwards."""
    try:
        from playwright import sync_api
    except ImportError:
        if os.environ.get("CI"):
            pytest.fail("playwright is not installed; CI installs genloop[dev], which has it")
        pytest.skip("playwright is not installed (pip install 'genloop[dev]')")
    executable = chromium_path()
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser.new_page()
        finally:
            browser.close()
