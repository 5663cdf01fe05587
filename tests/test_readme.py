"""README.md stays one coherent user's page: no section twice, short enough to read (the
reference lives in docs/), the set-up commands it promises exist in the Makefile, and every
relative link in it and in docs/ points to a file (and heading) that exists."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


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


def _anchors(page: Path) -> set[str]:
    """The fragment GitHub gives each heading: lower case, punctuation dropped, spaces to
    hyphens, a repeated one numbered."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    seen: dict[str, int] = {}
    anchors = set()
    for heading in re.findall(r"^#{1,6} (.+)$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        anchors.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
        seen[slug] = seen.get(slug, 0) + 1
    return anchors


def test_every_relative_link_points_to_a_file_that_exists():
    broken = []
    for page in PAGES:
        text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):
                continue  # http:, https:, mailto: ...
            path, _, fragment = target.partition("#")
            file = (page.parent / path).resolve() if path else page
            if not file.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif fragment and file.suffix == ".md" and fragment not in _anchors(file):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert broken == [], "\n".join(broken)
