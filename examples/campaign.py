"""A batch campaign from a spec: every product x place x backdrop variant as one loop, each in
four placement formats with its headline, and a report a person can open.

    python examples/campaign.py [--spec examples/campaign.yaml] [--home .genloop]
        [--out out/campaigns]
"""

from __future__ import annotations

import argparse
from pathlib import Path

from genloop.campaign import Manifest, load_spec, run
from genloop.sdk import Client


def main(spec_file: str, home: str, out: str) -> Manifest:
    with Client.local(home=home) as client:
        manifest = run(load_spec(spec_file), client, out=out)
    print(f"{manifest.counts()}; report: {Path(out) / manifest.name / 'report.html'}")
    return manifest


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--spec", default=str(Path(__file__).with_name("campaign.yaml")))
    parser.add_argument("--home", default=".genloop")
    parser.add_argument("--out", default="out/campaigns")
    args = parser.parse_args()
    main(args.spec, args.home, args.out)
