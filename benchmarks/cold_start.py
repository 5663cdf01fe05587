"""Time to the first image in a fresh process: genloop's embedded client against diffusers by hand.

    python benchmarks/cold_start.py [--repeats 5] [--model-dir DIR] [--json]

Each repetition starts two fresh Python processes, one after the other (which goes first
alternates), and times each from the process's start (``python -c`` spawned) to the image in
hand:
- ``by hand``: ``import torch``, ``from diffusers import DiffusionPipeline``,
  ``from_pretrained`` of the shipped ``shapes`` weights, one call at the model card's steps and
  guidance (what genloop uses when a request leaves them out);
- ``genloop``: ``from genloop.sdk import Client, Graph``, ``Client.local()``, a one-image
  ``generate`` on ``shapes``, ``run.wait()`` and the artifact's bytes.
Phases, in seconds since the process's start: by hand ``imported``, ``loaded``, ``image``;
genloop ``client`` (the SDK imported and the embedded runtime up), ``submitted``, ``loaded``
(the engine logged the model resident: torch, diffusers and the weights are in) and ``image``
(``wait()`` returned and the bytes are read). Medians; the page cache is warm after the first
repetition, which is left out.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

PROMPT = "a large red circle in the centre, black background"

BY_HAND = """
import time, json, sys
t0 = float(sys.argv[1])
import torch
from diffusers import DiffusionPipeline
imported = time.time()
pipe = DiffusionPipeline.from_pretrained(sys.argv[2], local_files_only=True)
loaded = time.time()
image = pipe(sys.argv[3], num_inference_steps=int(sys.argv[4]), guidance_scale=float(sys.argv[5]),
             generator=torch.Generator().manual_seed(1)).images[0]
done = time.time()
print(json.dumps({"imported": imported - t0, "loaded": loaded - t0, "image": done - t0}))
"""

GENLOOP = """
import time, json, sys, logging
t0 = float(sys.argv[1])
marks = {}

class Loaded(logging.Handler):
    def emit(self, record):
        if record.getMessage().startswith("loaded model"):
            marks.setdefault("loaded", record.created - t0)

logging.getLogger("genloop").addHandler(Loaded())
logging.getLogger("genloop").setLevel(logging.INFO)
from genloop.sdk import Client, Graph
with Client.local(sys.argv[2]) as client:
    marks["client"] = time.time() - t0
    g = Graph()
    g.generate(sys.argv[3], n=1, seed=1, model="shapes")
    run = client.submit(g)
    marks["submitted"] = time.time() - t0
    run.wait(300)
    result = run.result()
    data = client.read_artifact(result.items(next(iter(result.outputs)))[0].artifact)
    marks["image"] = time.time() - t0
assert data[:4] == b"\\x89PNG"
print(json.dumps(marks))
"""


def timed(code: str, *args: str) -> dict:
    started = time.time()
    out = subprocess.run([sys.executable, "-c", code, str(started), *args], check=True,
                         capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    from genloop.shapes import DEFAULT_GUIDANCE, DEFAULT_STEPS
    from genloop.workers.models.models_config import shipped_shapes

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    found = shipped_shapes()
    if found is None:
        sys.exit("no shipped shapes weights")
    runs: dict[str, list[dict]] = {"by_hand": [], "genloop": []}
    for r in range(args.repeats + 1):
        with tempfile.TemporaryDirectory() as home:
            order = ["by_hand", "genloop"] if r % 2 else ["genloop", "by_hand"]
            for side in order:
                marks = (timed(BY_HAND, str(found.path), PROMPT, str(DEFAULT_STEPS),
                                               str(DEFAULT_GUIDANCE)) if side == "by_hand"
                         else timed(GENLOOP, os.path.join(home, side), PROMPT))
                if r:  # the first repetition warms the page cache
                    runs[side].append(marks)
    report = {side: {phase: statistics.median(m[phase] for m in marks)
                     for phase in marks[0]} for side, marks in runs.items()}
    report["ratio"] = report["genloop"]["image"] / report["by_hand"]["image"]
    report["spread"] = {side: [min(m["image"] for m in marks), max(m["image"] for m in marks)]
                        for side, marks in runs.items()}
    if args.json:
        print(json.dumps(report))
        return
    for side in ("by_hand", "genloop"):
        phases = ", ".join(f"{k} {v:.2f} s" for k, v in report[side].items())
        lo, hi = report["spread"][side]
        print(f"{side:8s}: {phases} (image {lo:.2f}-{hi:.2f})")
    print(f"genloop / by hand: {report['ratio']:.2f}x the time to the first image")


if __name__ == "__main__":
    main()
