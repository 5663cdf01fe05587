"""README.md stays one coherent user's page: no section twice, short enough to read (the
reference lives in docs/), and the set-up commands it promises exist in the Makefile."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_no_heading_repeats():
    headings = re.findall(r"^#{1,3} (.+)$", (ROOT / "README.md").read_text(), flags=re.M)
    repeated = sorted({h for h in headings if headings.count(h) > 1})
    assert repeated == [], f"README.md repeats {repeated}"


def test_the_readme_is_at_most_450_lines():
    lines = (ROOT / "README.md").read_text().count("\n")
    assert lines <= 450, f"README.md has {lines} lines; move reference material into docs/"


def test_the_make_targets_it_names_exist():
    readme = (ROOT / "README.md").read_text()
    targets = set(re.findall(r"^([a-z][a-z-]*):", (ROOT / "Makefile").read_text(), flags=re.M))
    named = set(re.findall(r"make ([a-z][a-z-]*)", readme))
    assert {"demo", "test"} <= named
    assert named <= targets, f"README names make targets the Makefile lacks: {named - targets}"

