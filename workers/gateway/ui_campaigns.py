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

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse, Response

from genloop.campaign.export import approved_zip
from genloop.campaign.manifest import Manifest, read_manifest
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


@router.get("/{name}", response_class=HTMLResponse)
def campaign_page(request: Request, name: str, who: PageTenant) -> Response:
    manifest = _manifest(_folder(request, name, who))
    product = next(iter(manifest.axes))
    groups = {value: [v for v in manifest.variants if v.values[product] == value]
              for value in manifest.axes[product]}
    return page(request, "campaign.html", manifest=manifest, product=product, groups=groups,
                 token=session.form_token(request))


@router.post("/{name}/variants/{key}/review")
def review(request: Request, name: str, key: str, who: PageTenant,
           decision: Annotated[Decision, Form()], token: Annotated[str, Form()],
           comment: Annotated[str, Form(max_length=2000)] = "") -> RedirectResponse:
    session.check_form_token(request, token)
    folder = _folder(request, name, who)
    if key not in {v.key for v in _manifest(folder).variants}:
        raise ApiProblem(404, "not_found", f"no variant {key!r} in campaign {name!r}")
    record_review(folder, key, decision, comment.strip(), by=who)
    return RedirectResponse(f"/ui/campaigns/{name}#v-{key}", status_code=303)


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
