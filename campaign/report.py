"""``report.html``: every variant with its formats, scores and failures, filterable by axis.

A static page (no server, no network: it opens from the file system), so it can be mailed or
dropped in a shared folder next to the images it shows. Rows carry their axis values as data
attributes and a few lines of inline JavaScript hide the rows a filter excludes.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from .manifest import Manifest, write_atomic

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#111}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:6px;
text-align:left;vertical-align:top}img{max-height:120px;max-width:160px;display:block}
.failed td,.skipped td{background:#fff3f0}.finalist{font-weight:600;color:#b32}
figure{display:inline-block;margin:0 8px 0 0}figcaption{font-size:11px;color:#555}
label{margin-right:12px}
"""

_SCRIPT = """
const selects = document.querySelectorAll('select[data-axis]');
function applyFilters() {
  let shown = 0;
  for (const row of document.querySelectorAll('tbody tr')) {
    let ok = true;
    for (const s of selects) {
      if (s.value && row.dataset[s.dataset.axis] !== s.value) ok = false;
    }
    row.hidden = !ok;
    if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown;
}
for (const s of selects) s.addEventListener('change', applyFilters);
applyFilters();
"""


def _data_name(axis: str) -> str:
    """An axis as a data-* attribute name (dataset key): lower case letters and digits."""
    return "ax" + "".join(ch for ch in axis.lower() if ch.isalnum())


def render_report(manifest: Manifest) -> str:
    axes = list(manifest.axes)
    filters = []
    for axis in [*axes, "status"]:
        values = manifest.axes.get(axis) or sorted({v.status for v in manifest.variants})
        options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        filters.append(
            f'<label>{escape(axis)} <select data-axis="{_data_name(axis)}" '
            f'aria-label="filter by {escape(axis)}"><option value="">all</option>{options}'
            "</select></label>"
        )
    head = "".join(f"<th>{escape(a)}</th>" for a in axes)
    rows = []
    for v in manifest.variants:
        data = " ".join(f'data-{_data_name(a)}="{escape(v.values[a])}"' for a in axes)
        data += f' data-{_data_name("status")}="{v.status}"'
        cells = "".join(f"<td>{escape(v.values[a])}</td>" for a in axes)
        figures = "".join(
            f'<figure><img src="{escape(out.file)}" alt="{escape(v.prompt)}, {escape(name)}">'
            f"<figcaption>{escape(name)}, {out.method}"
            + (f", contrast {out.contrast:.1f}" if out.contrast is not None else "")
            + (f'<br><span class="note">not drawn: {escape(out.note)}</span>' if out.note else "")
            + ("</figcaption></figure>")
            for name, out in v.formats.items()
        )
        score = "" if v.score is None else f"{v.score:.2f}"
        brand = "" if v.brand_compliance is None else f"{100 * v.brand_compliance:.0f}%"
        note = escape(v.error or "")
        finalist = '<span class="finalist">finalist</span>' if v.finalist else ""
        rows.append(
            f'<tr class="{v.status}" data-key="{v.key}" {data}>{cells}'
            f"<td>{escape(v.prompt)}</td><td>{v.status} {finalist}<br>{note}</td>"
            f"<td>{score}</td><td>{brand}</td><td>{figures}</td></tr>"
        )
    counts = ", ".join(f"{n} {s}" for s, n in sorted(manifest.counts().items()))
    budget = (f", budget {manifest.budget_images} images" if manifest.budget_images else "")
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(manifest.name)}: campaign report</title><style>{_STYLE}</style></head>"
        f"<body><h1>{escape(manifest.name)}</h1>"
        f"<p>{len(manifest.variants)} variants: {counts}. {manifest.spent_images} images "
        f"generated{budget}. Showing <span id=\"shown\">{len(manifest.variants)}</span>.</p>"
        f'<form onsubmit="return false">{"".join(filters)}</form>'
        f"<table><thead><tr>{head}<th>prompt</th><th>status</th><th>score</th><th>brand</th>"
        f"<th>creatives</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
        f"<script>{_SCRIPT}</script></body></html>"
    )


def write_report(manifest: Manifest, folder: Path) -> Path:
    path = folder / "report.html"
    write_atomic(path, render_report(manifest))
    return path
