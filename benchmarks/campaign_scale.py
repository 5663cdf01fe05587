"""Campaign specs at scale: how fast a spec past the variant cap is refused, and how long writing
a large campaign's manifest, CSV and report takes, with its peak memory and largest file.

    python benchmarks/campaign_scale.py [--variants 10000] [--json]

The refused spec is 1,000 x 1,000 values read from a YAML file (as ``genloop campaign run``
reads it). The written campaign is planned from a spec of ``--variants`` variants, and every
variant is given a finished record (a score, brand figure and three formats), as after its runs:
the time is what the runner spends beyond its runs on writing its folder.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import tracemalloc
from pathlib import Path

import yaml

from genloop.campaign import CampaignSpecError, load_spec, parse_spec
from genloop.campaign.manifest import FormatOutput, write_manifest
from genloop.campaign.report import write_report
from genloop.campaign.runner import new_manifest, plan

FORMATS = [{"name": "1:1", "width": 256, "height": 256},
           {"name": "9:16", "width": 216, "height": 384},
           {"name": "1.91:1", "width": 382, "height": 200}]


def refusal_seconds(folder: Path) -> float:
    path = folder / "huge.yaml"
    path.write_text(yaml.safe_dump({
        "name": "huge", "axes": {"product": [f"product {i}" for i in range(1000)],
                                 "place": [f"place {i}" for i in range(1000)]},
        "template": "{product} at {place}", "budget": {"images": 200}}))
    start = time.perf_counter()
    try:
        load_spec(path)
    except CampaignSpecError:
        return time.perf_counter() - start
    raise AssertionError("a 10^6-variant spec was accepted")


def write_seconds(folder: Path, variants: int) -> dict:
    side = int(variants ** 0.5)
    spec = parse_spec({
        "name": "large", "axes": {"product": [f"product {i}" for i in range(side)],
                                  "place": [f"place {i}" for i in range(-(-variants // side))]},
        "template": "{product} at {place}", "formats": FORMATS,
        "brand": {"palette": ["#e62828"], "min_compliance": 0.2},
        "loop": {"rounds": 2, "candidates": 4, "steps": 20}})
    tracemalloc.start()
    start = time.perf_counter()
    records = plan(spec)
    planned = time.perf_counter() - start
    for i, r in enumerate(records):
        r.status, r.images, r.steps, r.score, r.seed, r.round = "succeeded", 8, 160, i % 97, i, 1
        r.artifact, r.run_id, r.brand_compliance = f"{i:064x}.png", f"run-{i:08d}", 0.5
        r.formats = {f["name"]: FormatOutput(file=f"formats/{f['name']}/{r.key}.png",
                                             method="crop", source=r.artifact, contrast=7.5,
                                             render_key=f"{i:016x}") for f in FORMATS}
    start = time.perf_counter()
    manifest = new_manifest(spec, records)
    write_manifest(manifest, folder)
    write_report(manifest, folder)
    written = time.perf_counter() - start
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    largest = max(folder.rglob("*"), key=lambda p: p.stat().st_size if p.is_file() else 0)
    return {"variants": len(records), "plan_s": round(planned, 2),
            "manifest_and_report_s": round(written, 2), "peak_mb": round(peak / 2**20, 1),
            "largest_file": largest.name, "largest_mb": round(largest.stat().st_size / 2**20, 2),
            "files": sum(1 for p in folder.rglob("*") if p.is_file())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variants", type=int, default=10_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = {"refuse_10e6_s": round(refusal_seconds(Path(tmp)), 4),
                   **write_seconds(Path(tmp), args.variants)}
    if args.json:
        print(json.dumps(figures))
        return
    print(f"10^6-variant spec refused in {figures['refuse_10e6_s'] * 1000:.1f} ms")
    print(f"{figures['variants']:,} variants: planned in {figures['plan_s']} s; manifest, CSV "
          f"and report written in {figures['manifest_and_report_s']} s, peak "
          f"{figures['peak_mb']} MB (Python heap); largest file {figures['largest_file']} "
          f"{figures['largest_mb']} MB of {figures['files']}")


if __name__ == "__main__":
    main()
