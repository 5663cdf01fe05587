"""The approved creatives of a campaign as a zip: every format, or one, with a manifest.

The zip holds ``FORMAT/VARIANT.png`` for each approved variant (``FORMAT`` the format's folder
name, '9:16' -> '9x16') and ``manifest.json``: the campaign, the format(s) and, per approved
variant, its axis values, prompt, headline, score, brand figure, review and files in the zip,
so a trafficker can tell which file is which without the campaign folder.
"""

from __future__ import annotations

import io
import json
import zipfile
from pathlib import Path

from .manifest import Manifest


def approved_zip(manifest: Manifest, folder: Path, format_name: str | None = None) -> bytes:
    """The zip of ``manifest``'s approved variants' creatives (only ``format_name``'s, if
    given; ``KeyError`` for a format the campaign does not have)."""
    if format_name is not None and format_name not in manifest.formats:
        raise KeyError(format_name)
    formats = [format_name] if format_name else manifest.formats
    approved = [v for v in manifest.variants
                if v.review is not None and v.review.decision == "approved"]
    buffer = io.BytesIO()
    listed = []
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as zf:  # PNGs are compressed already
        for v in approved:
            files = {}
            for name in formats:
                out = v.formats.get(name)
                if out is None:
                    continue
                arcname = f"{name.replace(':', 'x')}/{v.key}.png"
                zf.write(folder / out.file, arcname)
                files[name] = arcname
            listed.append({"variant": v.key, "values": v.values, "prompt": v.prompt,
                           "headline": v.headline, "score": v.score,
                           "brand_compliance": v.brand_compliance,
                           "review": v.review.model_dump() if v.review else None,
                           "files": files})
        zf.writestr("manifest.json", json.dumps(
            {"campaign": manifest.name, "formats": formats, "variants": listed}, indent=2))
    return buffer.getvalue()
