"""Formats generated at their own shape: one small run per variant, after its loop.

With ``generate_formats`` set, a variant's pick is not only cropped or padded to each format: the
engine draws it again at the format's size (or at the loop's pixel area in the format's aspect,
for models that draw well only near their native size), from the pick's prompt and seed, a few
seeds if asked, and the loop's evaluator keeps the best. Candidate 0 uses the pick's own seed, so
it is the pick's noise at the new shape. A format whose size is the pick's own needs no run.

Each variant's format graph is submitted with an idempotency key made from its content and its
run id is logged in ``format_runs.jsonl``, so a re-run or a resumed crash pays for nothing twice,
like the loops. A format whose generation failed (a model that cannot draw that size) falls back
to cropping or padding the pick, and says why.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

from genloop.sdk import Client, Graph, Run, RunResult, ScoredCandidate

from .keys import GRAPH_KEYED, key_fields
from .manifest import VariantRecord
from .runlog import RunLog
from .spec import CampaignSpec, FormatSpec

RUNS_FILE = "format_runs.jsonl"


def generation_size(fmt: FormatSpec, pick: ScoredCandidate, size: str) -> tuple[int, int]:
    """Pixel size to draw ``fmt`` at, in multiples of 8 (what latent diffusion models take): its
    own size, or about the pick's area in its aspect. At small sizes rounding each side alone
    would bend the aspect (32 x 40 becomes 32 x 32), so the pair is chosen whose aspect is
    closest, then whose area is."""
    if size == "format":
        return max(8, round(fmt.width / 8) * 8), max(8, round(fmt.height / 8) * 8)
    area = pick.width * pick.height
    ideal = (area / fmt.aspect) ** 0.5
    pairs = [(max(8, round(h * fmt.aspect / 8) * 8), h)
             for h in range(8, max(16, round(2 * ideal / 8) * 8) + 1, 8)]

    def cost(pair: tuple[int, int]) -> float:
        w, h = pair
        return abs(math.log(w / h / fmt.aspect)) + 0.5 * abs(math.log(w * h / area))

    return min(pairs, key=cost)


def node_id(fmt: FormatSpec) -> str:
    return f"{fmt.slug}/select"


def format_graph(spec: CampaignSpec, record: VariantRecord,
                 pick: ScoredCandidate) -> Graph | None:
    """The graph that draws ``record``'s pick in every format that needs drawing, or ``None``."""
    settings = spec.generate_formats
    if settings is None:
        return None
    loop = spec.loop_for(record.values)
    g = Graph(priority=loop.priority)
    for fmt in spec.formats:
        width, height = generation_size(fmt, pick, settings.size)
        if (width, height) == (pick.width, pick.height):
            continue
        gen = g.generate(pick.prompt, n=settings.candidates, seed=pick.seed, model=pick.model,
                         steps=pick.steps, guidance=loop.guidance, width=width, height=height,
                         id=f"{fmt.slug}/generate")
        options = {"options": loop.evaluator_options} if loop.evaluator_options else {}
        scores = g.score(gen, text=record.prompt, evaluator=loop.evaluator,
                         id=f"{fmt.slug}/score", **options)
        g.select(scores, top_k=1, id=node_id(fmt))
    return g if g.nodes else None


def graph_key(graph: Graph) -> str:
    """Decided by what the graph draws: its labels, webhook and lane (none of them there when
    keys of stored campaigns were made) are left out, and so are fields added to Graph since
    while left at their defaults (:mod:`.keys`)."""
    canonical = json.dumps(key_fields(graph, GRAPH_KEYED), sort_keys=True)
    return "campaign-formats:" + hashlib.sha256(canonical.encode()).hexdigest()[:32]


def submit(spec: CampaignSpec, client: Client, records: list[VariantRecord],
           picks: dict[str, ScoredCandidate], folder: Path, *,
           start: bool) -> dict[str, tuple[Run, Graph]]:
    """The format run of every picked variant: found in ``format_runs.jsonl`` (resumed if a crash
    left it unfinished), or submitted when ``start`` (``False``: rebuild from stored runs only)."""
    log = RunLog(folder / RUNS_FILE)
    runs: dict[str, tuple[Run, Graph]] = {}
    for record in records:
        pick = picks.get(record.key)
        graph = format_graph(spec, record, pick) if pick is not None else None
        if graph is None:
            continue
        key = graph_key(graph)
        run_id = log.run_id(key)
        if run_id is not None:
            run = client.get(run_id)
            if start and not run.info.status.terminal:
                run = client.resume(run_id)
        elif start:
            run = client.submit(graph, idempotency_key=key)
            log.record(key, run.id)
        else:
            continue
        runs[record.key] = (run, graph)
    return runs


def generated_formats(spec: CampaignSpec, graph: Graph,
                      result: RunResult) -> tuple[dict[str, str], dict[str, str]]:
    """``({format name: artifact}, {format name: error})`` for the formats ``graph`` draws."""
    made, errors = {}, {}
    drawn = {node.id for node in graph.nodes}
    failed = {f.node_id.split("/")[0]: f.message for f in result.failures}
    for fmt in spec.formats:
        if node_id(fmt) not in drawn:
            continue
        best = (result.items(node_id(fmt), ScoredCandidate)
                if node_id(fmt) in result.outputs else [])
        if best:
            made[fmt.name] = best[0].artifact
        else:
            errors[fmt.name] = failed.get(fmt.slug) or result.error or "not generated"
    return made, errors
