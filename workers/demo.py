"""``genloop demo``: one loop, embedded, with a progress bar; writes result.json and a sheet."""

from __future__ import annotations

import json
from pathlib import Path

from tqdm import tqdm

from genloop.sdk import Client, Loop

from .contact_sheet import contact_sheet


def run_demo(client: Client, loop: Loop, out: Path, progress: bool = True) -> str:
    """Run ``loop``, write ``out/result.json`` and ``out/contact_sheet.png``; return a summary."""
    run = client.submit(loop)
    with tqdm(total=loop.rounds, unit="round", disable=not progress,
              desc=f"{loop.rounds}x{loop.candidates} {loop.model}") as bar:
        for event in run.events():
            if event.type == "progress":
                bar.set_postfix_str(f"{event.node_id} step {event.step}/{event.total}")
            elif event.type == "node.succeeded" and event.node_id.endswith("/score"):
                bar.update(1)
            elif event.type == "node.skipped" and event.node_id.endswith("/score"):
                bar.update(1)
    result = run.wait()

    rounds = result.rounds
    out.mkdir(parents=True, exist_ok=True)
    no_embeddings = {"embedding"}
    report = {
        "run_id": result.run_id,
        "status": result.status,
        "loop": loop.model_dump(mode="json"),
        "rounds": [
            {
                "round": r.round,
                "best_score": r.best_score,
                "best": r.best.model_dump(mode="json", exclude=no_embeddings) if r.best else None,
                "candidates": [c.model_dump(mode="json", exclude=no_embeddings)
                               for c in r.candidates],
            }
            for r in rounds
        ],
        "failures": [f.model_dump(mode="json") for f in result.failures],
    }
    (out / "result.json").write_text(json.dumps(report, indent=2))
    contact_sheet(rounds, client.read_artifact).save(out / "contact_sheet.png")
    scores = ", ".join(f"round {r.round}: {r.best_score:.2f}" for r in rounds)
    return f"{result.status}: best per round {scores}; wrote {out}/result.json, contact_sheet.png"
