"""``genloop demo``: one loop, embedded, with a progress bar; writes result.json and a sheet.

When the prompt is a shapes caption, every candidate is graded by the shapes pixel checker (which
the loop never sees): result.json carries each verdict and the contact sheet prints it beside
the score."""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from PIL import Image
from tqdm import tqdm

from genloop.sdk import Client, Loop

from .contact_sheet import Verdict, contact_sheet

#: The demo's loop: a hard prompt (two objects and a relation: one image gets all of it right
#: about a third of the time) and a first seed where round 1 misses, so the sheet shows what
#: refinement does. On the shipped v2 model, at this seed, round 1's 4 images are all wrong
#: and round 2 (fresh seeds) gets 1 of 4 right, which shapes-clip ranks first of all 8, so the
#: loop keeps it. It is a demo, not a measurement (benchmarks/loop_quality.py measures).
DEMO_PROMPT = "a small yellow circle above a large green triangle, black background"
DEMO_SEED = 12
DEMO_ROUNDS = 2
DEMO_CANDIDATES = 4


def shapes_verdict(prompt: str) -> Callable[[Image.Image], Verdict] | None:
    """The shapes checker's verdict on images for ``prompt``; ``None`` for other prompts."""
    from genloop import shapes

    try:
        wanted = shapes.parse_caption(prompt)
    except ValueError:
        return None
    def grade(image: Image.Image) -> Verdict:
        match = shapes.grade(wanted, image, shapes.world_of(image.width))
        wrong = [k for k, ok in match.clauses().items() if not ok]
        return Verdict(not wrong, "ok" if not wrong else "wrong " + ",".join(wrong))

    return grade


def run_demo(client: Client, loop: Loop, out: Path, progress: bool = True) -> str:
    """Run ``loop``, write ``out/result.json`` and ``out/contact_sheet.png``; return a summary."""
    run = client.submit(loop)
    with tqdm(total=loop.rounds, unit="round", disable=not progress,
              desc=f"{loop.rounds}x{loop.candidates} {loop.model}") as bar:
        for event in run.events():
            if event.type == "progress":
                bar.set_postfix_str(f"{event.node_id} step {event.step}/{event.total}")
            elif (event.type in ("node.succeeded", "node.skipped")
                  and (event.node_id or "").endswith("/score")):
                bar.update(1)
    result = run.wait()

    rounds = result.rounds
    out.mkdir(parents=True, exist_ok=True)
    no_embeddings = {"embedding"}
    verdict = shapes_verdict(loop.prompt)

    def candidate(c) -> dict:
        out = c.model_dump(mode="json", exclude=no_embeddings)
        if verdict is not None:
            said = verdict(Image.open(io.BytesIO(client.read_artifact(c.artifact))))
            out["checker"] = {"all_correct": said.ok, "verdict": said.label}
        return out

    report: dict[str, Any] = {
        "run_id": result.run_id,
        "status": result.status,
        "loop": loop.model_dump(mode="json"),
        "rounds": [
            {
                "round": r.round,
                "best_score": r.best_score,
                "best": r.best.model_dump(mode="json", exclude=no_embeddings) if r.best else None,
                "candidates": [candidate(c) for c in r.candidates],
            }
            for r in rounds
        ],
        "failures": [f.model_dump(mode="json") for f in result.failures],
        "compute": result.compute.model_dump(mode="json"),
    }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    contact_sheet(rounds, client.read_artifact, verdict).save(out / "contact_sheet.png")
    scores = ", ".join(f"round {r.round}: {r.best_score:.2f}" for r in rounds)
    if verdict is not None:
        right = [sum(c["checker"]["all_correct"] for c in r["candidates"])
                 for r in report["rounds"]]
        scores += "; checker-correct per round " + ", ".join(
            f"{k}/{len(r.candidates)}" for k, r in zip(right, rounds, strict=True))
    return f"{result.status}: best per round {scores}; wrote {out}/result.json, contact_sheet.png"
