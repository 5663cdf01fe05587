"""The console's campaign pages: review a campaign's creatives, approve or reject them, export.

``genloop serve --campaigns DIR`` names the folder campaign runs write to (``out/campaigns``).
A campaign is a tenant's when its runs are: the first run in its ``runs.jsonl`` must be one the
tenant submitted through this gateway (``genloop campaign run --gateway URL``), else its pages,
images and exports are a 404, like another tenant's run. Decisions go to the campaign's
``reviews.jsonl`` (:mod:`genloop.campaign.reviews`), which a re-run keeps and copies into the
manifest; the pages read them live.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated
from urllib.parse import parse_qsl, urlencode

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from genloop.campaign.export import approved_zip
from genloop.campaign.manifest import Manifest, VariantRecord, read_manifest
from genloop.campaign.reviews import Decision, read_reviews, record_review
from genloop.campaign.runlog import RunLog
from genloop.campaign.runner import RUNS_FILE

from . import ui_session as session
from .errors import ApiProblem
from .service import Gateway
from .ui_pages import page

router = APIRouter(prefix="/ui/campaigns", include_in_schema=False)
PageTenant = Annotated[str, Depends(session.page_tenant)]
DataTenant = Annotated[str, Depends(session.data_tenant)]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,79}$")


def _root(request: Request) -> Path | None:
    root = request.app.state.settings.campaigns
    return None if root is None else Path(root)


def _owner(gateway: Gateway, folder: Path) -> str | None:
    first = next(iter(RunLog(folder / RUNS_FILE).current().values()), None)
    return None if first is None else gateway.store.owner(first)


def _folder(request: Request, name: str, tenant: str) -> Path:
    """The tenant's campaign ``name``, or a 404 (no such campaign, or another's)."""
    root = _root(request)
    folder = root / name if root is not None and _NAME.match(name) else None
    if (folder is None or not (folder / "manifest.json").exists()
            or _owner(request.app.state.gateway, folder) != tenant):
        raise ApiProblem(404, "not_found", f"no campaign {name!r}")
    return folder


def _manifest(folder: Path) -> Manifest:
    """The manifest with the reviews given since it was written."""
    manifest = read_manifest(folder)
    assert manifest is not None  # _folder checked it exists
    reviews = read_reviews(folder)
    for v in manifest.variants:
        v.review = reviews.get(v.key, v.review)
    return manifest


@router.get("", response_class=HTMLResponse)
def campaigns_page(request: Request, who: PageTenant) -> Response:
    root = _root(request)
    rows = []
    for folder in sorted(root.iterdir()) if root is not None and root.is_dir() else []:
        if (folder / "manifest.json").exists() and \
                _owner(request.app.state.gateway, folder) == who:
            manifest = _manifest(folder)
            approved = sum(1 for v in manifest.variants
                           if v.review is not None and v.review.decision == "approved")
            rows.append((manifest, approved))
    return page(request, "campaigns.html", rows=rows, configured=root is not None)


#: Variants on one page of a campaign: a 10,000-variant campaign on one page was 11 MB of HTML.
PAGE = 100
_SORTS = {"score": lambda v: v.score, "brand": lambda v: v.brand_compliance}


def _filters(request: Request, manifest: Manifest) -> dict[str, str]:
    """The page's filters from its query: ``ax-N`` (the Nth axis), ``status``, ``finalist``,
    ``review`` and ``below``, each a value to match; unknown or empty ones are dropped."""
    names = {f"ax-{i}" for i in range(1, len(manifest.axes) + 1)}
    names |= {"status", "finalist", "review", "below"}
    return {k: v for k, v in request.query_params.items() if k in names and v}


def _facts(manifest: Manifest, v: VariantRecord) -> dict[str, str]:
    """What a variant is filtered by, named as :func:`_filters` names them."""
    facts = {f"ax-{i}": v.values[axis] for i, axis in enumerate(manifest.axes, 1)}
    facts.update(status=v.status, finalist="yes" if v.finalist else "no",
                 review=v.review.decision if v.review else "pending",
                 below="yes" if v.below_brand_minimum else "no")
    return facts


def _query(params: dict[str, str], **changes: object) -> str:
    merged = {**params, **{k: str(v) for k, v in changes.items() if v not in (None, "")}}
    return urlencode({k: v for k, v in merged.items() if v})


@router.get("/{name}", response_class=HTMLResponse)
def campaign_page(request: Request, name: str, who: PageTenant, sort: str = "",
                  page_number: Annotated[int, Query(alias="page", ge=1)] = 1) -> Response:
    """A page of the campaign's variants, filtered and sorted on the server (all of them
    count, not only one page's), grouped per product."""
    manifest = _manifest(_folder(request, name, who))
    filters = _filters(request, manifest)
    chosen = [v for v in manifest.variants
              if all(_facts(manifest, v)[k] == want for k, want in filters.items())]
    if sort in _SORTS:
        by = _SORTS[sort]
        chosen.sort(key=lambda v: (by(v) is None, -(by(v) or 0.0)))
    else:
        sort = ""
    pages = max(1, -(-len(chosen) // PAGE))
    page_number = min(page_number, pages)
    shown = chosen[(page_number - 1) * PAGE: page_number * PAGE]
    product = next(iter(manifest.axes))
    groups: dict[str, list[VariantRecord]] = {}
    for v in shown:
        groups.setdefault(v.values[product], []).append(v)
    params = {**filters, "sort": sort}
    links = {p: _query(params, page=p if p > 1 else None) for p in range(1, pages + 1)}
    here = _query(params, page=page_number if page_number > 1 else None)
    return page(request, "campaign.html", manifest=manifest, product=product, groups=groups,
                token=session.form_token(request), filters=filters, sort=sort,
                matched=len(chosen), page_number=page_number, pages=pages, links=links,
                here=here, facts=lambda v: _facts(manifest, v))


def _back(query: str) -> str:
    """A page's query string as given back by its review form, rebuilt from its pairs (so
    nothing but a query can come of it)."""
    return urlencode(parse_qsl(query)[:20])


@router.post("/{name}/variants/{key}/review")
def review(request: Request, name: str, key: str, who: PageTenant,
           decision: Annotated[Decision, Form()], token: Annotated[str, Form()],
           comment: Annotated[str, Form(max_length=2000)] = "",
           back: Annotated[str, Form(max_length=2000)] = "") -> RedirectResponse:
    session.check_form_token(request, token)
    folder = _folder(request, name, who)
    if key not in {v.key for v in _manifest(folder).variants}:
        raise ApiProblem(404, "not_found", f"no variant {key!r} in campaign {name!r}")
    record_review(folder, key, decision, comment.strip(), by=who)
    query = _back(back)
    return RedirectResponse(f"/ui/campaigns/{name}" + (f"?{query}" if query else "")
                            + f"#v-{key}", status_code=303)


@router.get("/{name}/export")
def export(request: Request, name: str, who: DataTenant, format: str | None = None) -> Response:
    folder = _folder(request, name, who)
    manifest = _manifest(folder)
    try:
        data = approved_zip(manifest, folder, format)
    except KeyError:
        raise ApiProblem(404, "not_found", f"campaign {name!r} has no format {format!r}") from None
    suffix = f"-{format.replace(':', 'x')}" if format else ""
    return Response(data, media_type="application/zip", headers={
        "Content-Disposition": f'attachment; filename="{name}-approved{suffix}.zip"'})


@router.get("/{name}/files/{path:path}")
def file(request: Request, name: str, path: str, who: DataTenant) -> Response:
    """A creative or contact sheet of the tenant's campaign: PNGs under formats/ or sheets/."""
    folder = _folder(request, name, who)
    target = (folder / path).resolve()
    allowed = any(target.is_relative_to((folder / part).resolve())
                  for part in ("formats", "sheets"))
    if not allowed or target.suffix != ".png" or not target.is_file():
        raise ApiProblem(404, "not_found", f"no file {path!r} in campaign {name!r}")
    return Response(target.read_bytes(), media_type="image/png",
                    headers={"Cache-Control": "private, max-age=60"})
