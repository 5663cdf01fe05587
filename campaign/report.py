"""``report.html``: every variant with its formats, scores, cost and failures, for offline review.

Static pages (no server, no network: they open from the file system), so they can be mailed or
dropped in a shared folder next to the images they show. A large campaign is split into pages of
:data:`PAGE` variants (``report.html``, ``report-2.html`` ...), each linking to the others, so no
page grows past a few MB and writing them stays linear. Rows carry their values as data
attributes; a few lines of inline JavaScript filter (any axis, status, finalist, brand minimum)
and sort (score, brand) the rows of a page. Review and approval live in the console
(``/ui/campaigns``); this is the copy that travels.
"""

from __future__ import annotations

from html import escape
from pathlib import Path

from .manifest import Manifest, VariantRecord, write_atomic

#: Variants per page.
PAGE = 250

_STYLE = """
body{font:14px system-ui,sans-serif;margin:24px;color:#111}
table{border-collapse:collapse;width:100%}th,td{border-bottom:1px solid #ddd;padding:6px;
text-align:left;vertical-align:top}img{max-height:240px;max-width:320px;display:block}
.failed td,.skipped td{background:#fff3f0}.finalist{font-weight:600;color:#b32}
.below{font-weight:600;color:#a50;background:#fff4d6;padding:0 4px}
figure{display:inline-block;margin:0 8px 8px 0}figcaption{font-size:12px;color:#555}
label{margin-right:12px}nav a{margin-right:8px}.history{font-size:12px;color:#555}
"""

_SCRIPT = """
const selects = document.querySelectorAll('select[data-axis]');
const body = document.querySelector('tbody');
const order = [...body.rows];
function applyFilters() {
  let shown = 0;
  for (const row of body.rows) {
    let ok = true;
    for (const s of selects) {
      if (s.value && row.dataset[s.dataset.axis] !== s.value) ok = false;
    }
    row.hidden = !ok;
    if (ok) shown++;
  }
  document.getElementById('shown').textContent = shown;
}
function applySort() {
  const by = document.getElementById('sort').value;
  const value = r => r.dataset[by] === '' ? -Infinity : Number(r.dataset[by]);
  const rows = by ? [...order].sort((a, b) => value(b) - value(a)) : order;
  for (const row of rows) body.appendChild(row);
}
for (const s of selects) s.addEventListener('change', applyFilters);
document.getElementById('sort').addEventListener('change', applySort);
applyFilters();
"""


def _data_name(axis: str) -> str:
    """An axis as a data-* attribute name (dataset key): lower case letters and digits."""
    return "ax" + "".join(ch for ch in axis.lower() if ch.isalnum())


def page_file(page: int) -> str:
    return "report.html" if page == 1 else f"report-{page}.html"


def _filters(manifest: Manifest) -> str:
    choices = {axis: values for axis, values in manifest.axes.items()}
    choices["status"] = sorted(manifest.counts())
    choices["finalist"] = ["yes", "no"]
    if manifest.brand_max_distance is not None:
        choices["brand minimum"] = ["below", "met"]
    out = []
    for axis, values in choices.items():
        options = "".join(f'<option value="{escape(v)}">{escape(v)}</option>' for v in values)
        out.append(f'<label>{escape(axis)} <select data-axis="{_data_name(axis)}" '
                   f'aria-label="filter by {escape(axis)}"><option value="">all</option>'
                   f"{options}</select></label>")
    out.append('<label>sort <select id="sort" aria-label="sort by"><option value="">variant '
               'order</option><option value="score">score, best first</option>'
               '<option value="brand">brand, best first</option></select></label>')
    return "".join(out)


def _row(manifest: Manifest, v: VariantRecord) -> str:
    axes = list(manifest.axes)
    data = {**{a: v.values[a] for a in axes}, "status": v.status,
            "finalist": "yes" if v.finalist else "no",
            "brand minimum": "below" if v.below_brand_minimum else "met"}
    attrs = " ".join(f'data-{_data_name(k)}="{escape(val)}"' for k, val in data.items())
    attrs += f' data-score="{"" if v.score is None else v.score}"'
    attrs += f' data-brand="{"" if v.brand_compliance is None else v.brand_compliance}"'
    cells = "".join(f"<td>{escape(v.values[a])}</td>" for a in axes)
    figures = "".join(
        f'<figure><a href="{escape(out.file)}" title="open full size">'
        f'<img src="{escape(out.file)}" alt="{escape(v.prompt)}, {escape(name)}" '
        f'loading="lazy"></a><figcaption>{escape(name)}, {out.method}'
        + (f", contrast {out.contrast:.1f}" if out.contrast is not None else "")
        + (", on a panel" if out.panel else "")
        + (f", covers {100 * out.overlap:.0f}% of the subject" if out.overlap else "")
        + (f'<br><span class="note">not drawn: {escape(out.note)}</span>' if out.note else "")
        + "</figcaption></figure>"
        for name, out in v.formats.items()
    )
    status = v.status + (' <span class="finalist">finalist</span>' if v.finalist else "")
    if v.below_brand_minimum:
        status += ' <span class="below">below brand minimum</span>'
    if v.review is not None and v.review.decision != "pending":
        status += (f'<br><strong>{v.review.decision}</strong>'
                   + (f" by {escape(v.review.by)}" if v.review.by else "")
                   + (f": {escape(v.review.comment)}" if v.review.comment else ""))
    status += f"<br>{escape(v.error or '')}"
    status += "".join(f'<div class="history">earlier run {escape(a.run_id)}: '
                      f"{escape(a.status or '')} {escape(a.error or '')}</div>"
                      for a in v.history)
    headline = f"<br><em>{escape(v.headline)}</em>" if v.headline else ""
    score = "" if v.score is None else f"{v.score:.2f}"
    brand = "" if v.brand_compliance is None else (
        f"{100 * v.brand_compliance:.0f}%" + ("" if v.brand_subject is None else
                                              f" of {100 * v.brand_subject:.0f}% subject"))
    cost = "" if v.status == "skipped" else (
        f"{v.images} image{'' if v.images == 1 else 's'}"
        + (f", {v.steps} steps" if v.steps else ""))
    return (f'<tr class="{v.status}" data-key="{v.key}" {attrs}>{cells}'
            f"<td>{escape(v.prompt)}{headline}</td><td>{status}</td><td>{score}</td>"
            f"<td>{brand}</td><td>{cost}</td><td>{figures}</td></tr>")


def _brand_note(manifest: Manifest) -> str:
    if manifest.brand_max_distance is None:
        return ""
    minimum = (f"; below {100 * manifest.brand_min_compliance:.0f}% a variant is flagged and "
               "never a finalist" if manifest.brand_min_compliance else "")
    return (f"<p>Brand: the share of the subject's pixels (the background left out) within "
            f"delta E {manifest.brand_max_distance:g} of a palette colour "
            f"({', '.join(escape(c) for c in manifest.brand_palette)}), beside the share of the "
            f"picture taken as subject (100%: none stood out, so all of it was "
            f"measured){minimum}.</p>")


def render_report(manifest: Manifest, page: int = 1) -> str:
    """Page ``page`` (from 1) of the report."""
    pages = max(1, -(-len(manifest.variants) // PAGE))
    variants = manifest.variants[(page - 1) * PAGE: page * PAGE]
    head = "".join(f"<th>{escape(a)}</th>" for a in manifest.axes)
    rows = "".join(_row(manifest, v) for v in variants)
    counts = ", ".join(f"{n} {s}" for s, n in sorted(manifest.counts().items()))
    budget = (f", budget {manifest.budget_images} images" if manifest.budget_images else "")
    steps = f" ({manifest.spent_steps} denoising steps)" if manifest.spent_steps else ""
    nav = "".join(f'<a href="{page_file(p)}"' + (' aria-current="page"' if p == page else "")
                  + f">{p}</a>" for p in range(1, pages + 1)) if pages > 1 else ""
    sheets = "".join(f'<a href="{escape(f)}">{escape(Path(f).stem)}</a>'
                     for f in manifest.sheets)
    return (
        f'<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(manifest.name)}: campaign report</title><style>{_STYLE}</style></head>"
        f"<body><h1>{escape(manifest.name)}</h1>"
        f"<p>{len(manifest.variants)} variants: {counts}. {manifest.spent_images} images "
        f"generated{steps}{budget}. Page {page} of {pages}: showing "
        f'<span id="shown">{len(variants)}</span> of its {len(variants)}.</p>'
        + (f'<nav aria-label="pages">pages: {nav}</nav>' if nav else "")
        + (f'<nav aria-label="contact sheets">contact sheets: {sheets}</nav>' if sheets else "")
        + _brand_note(manifest)
        + f'<form onsubmit="return false">{_filters(manifest)}</form>'
        f"<table><thead><tr>{head}<th>prompt, headline</th><th>status</th><th>score</th>"
        f"<th>brand</th><th>cost</th><th>creatives</th></tr></thead><tbody>{rows}</tbody>"
        f"</table><script>{_SCRIPT}</script></body></html>"
    )


def write_report(manifest: Manifest, folder: Path) -> Path:
    """Write every page (``report.html`` first) and drop pages a smaller campaign left."""
    pages = max(1, -(-len(manifest.variants) // PAGE))
    for page in range(1, pages + 1):
        write_atomic(folder / page_file(page), render_report(manifest, page))
    for stale in folder.glob("report-*.html"):
        if stale.name not in {page_file(p) for p in range(2, pages + 1)}:
            stale.unlink()
    return folder / "report.html"
